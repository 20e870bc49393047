#include "cli/flags/metrics.h"

#include "cli/command.h"

namespace strata::cli {

void MetricsFlags::add_to(CLI::App& app, const Only& only) {
  FamilyScope family(app, "Metrics", "metrics", only);
  app.add_option("--log-every", log_every, "Progress line every K steps")->capture_default_str();
  app.add_option("--run-dir", run_dir, "Write metrics.jsonl and summary.json here")->check(dir_path());
  app.add_flag("--json", json, "Print JSON records on stdout instead of progress lines");
  app.add_option("--peak-gflops", peak_gflops, "Peak GFLOP/s for MFU (default: measured by an sgemm probe, cached)")
      ->check(finite(NumberRange::positive()));
  app.add_flag("--trace", trace, "Write a Chrome trace per rank (<run-dir>/trace-rank<R>.json)");
  app.add_option("--straggler-every", straggler.every_steps, "Compare the ranks' compute time every K steps (0: never)")
      ->capture_default_str();
  app.add_option("--straggler-pct", straggler.threshold_pct, "Name ranks computing more than X% over the median")
      ->capture_default_str();
  app.add_option("--collapse-pct", collapse_pct, "Warn when one expert takes over X% of a block's assignments ...")
      ->capture_default_str();
  app.add_option("--collapse-steps", collapse_steps, "... for K steps in a row")->capture_default_str();
}

}  // namespace strata::cli
