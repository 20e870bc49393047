// The observability family, TOML section [metrics]: what a run records and prints
// (train/metrics.h, summary.json, traces, straggler and expert-collapse warnings):
//   --run-dir runs/a --log-every 10 --json --trace --peak-gflops 500
//   --straggler-every 50 --straggler-pct 20 --collapse-pct 90 --collapse-steps 5
#pragma once
#include <string>

#include "cli/flags/family.h"
#include "diag/straggler.h"

namespace strata::cli {

struct MetricsFlags {
  int log_every = 1;
  std::string run_dir;
  bool json = false, trace = false;
  double peak_gflops = 0;  // 0: measured
  diag::StragglerConfig straggler;
  double collapse_pct = 90;
  int collapse_steps = 5;

  void add_to(CLI::App& app, const Only& only = {});
};

}  // namespace strata::cli
