// `strata plan calibrate`: measures this host (GEMM peak, memory bandwidth, a fit of
// `strata bench comm`, the model's compute efficiency) and writes the GPU JSON that
// `strata plan --gpu local` reads (report/calibrate.h).
#include <cstdio>

#include "cli/command.h"
#include "report/calibrate.h"

namespace strata::cli {

void add_plan_calibrate(CLI::App& plan) {
  CLI::App* app = plan.add_subcommand(
      "calibrate", "Measure this host and write the file `strata plan --gpu local` reads");
  auto o = std::make_shared<report::CalibrateOptions>();
  app->add_option("-o,--output", o->out, "File to write (default: $STRATA_CALIBRATION, else "
                                         "~/.cache/strata/local-gpu.json)")
      ->check(plain_path(false));
  app->add_option("--threads", o->threads, "Threads per rank")->capture_default_str();
  app->add_option("--nproc", o->comm_ranks, "Ranks for the communication fit")->capture_default_str();
  app->add_option("--probe-seconds", o->probe_s, "Length of the GEMM probe")->capture_default_str();
  app->allow_extras();  // train flags for the efficiency run (the model of a study)
  app->footer("Other flags go to the efficiency run's `strata train` (default --model tiny "
              "--seq 64 --batch 4 --steps 16), e.g. a study's model (docs/report.md)");
  app->callback([o, app] {
    report::CalibrateOptions opts = *o;
    opts.train_args = app->remaining();
    std::printf("%s", report::calibrate(opts).text.c_str());
  });
}

}  // namespace strata::cli
