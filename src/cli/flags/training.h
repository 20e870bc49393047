// The training family, TOML section [training]: the run's length and batches, its held-out
// evals and samples, the steps it refuses (train/spike_guard.h), and how it computes
// (precision, recomputation):
//   --steps 200 --seq 256 --batch 8 --micro-batch 2 --seed 1 --eval-every 100
//   --skip-nonfinite --spike-zscore 6 --spike-action rollback
//   --precision bf16 --reduce-dtype fp32 --recompute full --recompute-layers 2
#pragma once
#include <cstdint>
#include <string>

#include "cli/flags/family.h"
#include "model/model_part.h"
#include "parallel/options.h"
#include "train/spike_guard.h"

namespace strata::cli {

struct TrainingFlags {
  int seq = 0;  // 0: the model's maximum
  int64_t steps = 200;
  uint64_t seed = 1;
  int batch = 8, micro_batch = 0;
  train::GuardConfig guard;
  std::string spike_action = "skip";
  int eval_every = 100, eval_batches = 8, sample_every = 0, sample_tokens = 64;
  std::string precision = "fp32", reduce_dtype;  // reduce_dtype empty: the precision's
  std::string recompute = "none", recompute_inputs = "fp32";
  int recompute_layers = 0;

  void add_to(CLI::App& app, const Only& only = {});
  // After parsing: the recomputation policy; the precision (and --reduce-dtype) onto `dp`.
  // Each throws one line naming the flag.
  model::RecomputePolicy recompute_policy() const;
  void apply_precision(const CLI::App& app, parallel::DataParallelOptions& dp) const;
  // The guard with --spike-action applied.
  train::GuardConfig resolved_guard() const;
};

}  // namespace strata::cli
