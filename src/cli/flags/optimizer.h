// The optimizer family, TOML section [optimizer]: AdamW or Muon and the learning-rate schedule
// (train/schedule.h, parallel/engine.h OptimConfig):
//   --lr 6e-4 --min-lr 6e-5 --warmup 100 --weight-decay 0.1 --grad-clip 1 --beta2 0.95
//   --optimizer muon --muon-momentum 0.95 --ns-steps 5 --muon-lr-scale 0.2
#pragma once
#include <cstdint>

#include "cli/flags/family.h"
#include "parallel/engine.h"

namespace CLI {
class App;
}

namespace strata::cli {

struct OptimizerFlags {
  double lr = 1e-3;
  double min_lr = -1;   // -1: lr / 10
  int64_t warmup = -1;  // -1: 5% of the steps
  parallel::OptimConfig optim;

  void add_to(CLI::App& app, const Only& only = {});
  // After parsing: the final learning rate and the warmup of a run of `steps` steps.
  double resolved_min_lr(const CLI::App& app) const;
  int64_t resolved_warmup(const CLI::App& app, int64_t steps) const;
};

}  // namespace strata::cli
