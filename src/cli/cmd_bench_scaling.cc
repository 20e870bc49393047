// `strata bench scaling --nproc 1,2,3,4 [--weak|--strong] [train flags]`: trains the same
// model at each rank count and decomposes every point's step time (report/scaling.h).
//
//   strata bench scaling --nproc 1,2,3,4 --model tiny --seq 64 --batch 12 --steps 60
//   strata bench scaling --nproc 1,2 --weak --zero 3 --layers 2 --dim 64 --heads 4 --seq 32
#include <cstdio>

#include "cli/command.h"
#include "core/error.h"
#include "report/scaling.h"

namespace strata::cli {
namespace {

struct ScalingArgs {
  std::string nproc = "1,2,3,4";
  bool weak = false, strong = false, json = false;
  report::ScalingOptions opts;
};

static Register reg_bench_scaling(
    "bench scaling", "Scaling study: train at several rank counts, decompose each step",
    [](CLI::App& app) {
      auto a = std::make_shared<ScalingArgs>();
      app.add_option("--nproc", a->nproc, "Rank counts, e.g. 1,2,3,4")->capture_default_str();
      app.add_flag("--weak", a->weak, "Per-rank batch fixed (global batch = --batch x ranks)");
      app.add_flag("--strong", a->strong, "Global batch fixed (default)");
      app.add_option("--out", a->opts.out, "Directory for scaling.json and the points' runs")
          ->check(dir_path())
          ->capture_default_str();
      app.add_option("--threads", a->opts.threads, "Threads per rank")->capture_default_str();
      app.add_option("--repeat", a->opts.repeat,
                     "Runs per point in interleaved rounds; the median is kept")
          ->capture_default_str();
      app.add_option("--gpu", a->opts.gpu,
                     "Planner hardware for the predicted step time: local (strata plan "
                     "calibrate), a preset or FILE.json; '' for none")
          ->capture_default_str();
      app.add_flag("--json", a->json, "Print scaling.json instead of the table");
      app.allow_extras();  // everything else goes to `strata train`
      app.footer("Other flags go to every `strata train` run, e.g. --model tiny --seq 64 "
                 "--batch 12 --steps 20 --zero 3 (docs/report.md)");
      app.callback([a, &app] {
        STRATA_CHECK(!(a->weak && a->strong), "--weak and --strong exclude each other");
        report::ScalingOptions o = a->opts;
        o.weak = a->weak;
        o.nproc = report::parse_nproc_list(a->nproc);
        o.train_args = app.remaining();
        report::ScalingResult r = report::run_scaling(o);
        if (a->json)
          std::printf("%s\n", r.study.dump(2).c_str());
        else
          std::printf("%s", r.table.c_str());
      });
    });

}  // namespace
}  // namespace strata::cli
