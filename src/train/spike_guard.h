// The step guard (`--skip-nonfinite`, `--spike-zscore Z`): judges each step's loss and global
// gradient norm before its update, which the engine then skips (parallel/engine.h step_if).
//
//   non-finite   the loss or the norm is NaN or infinite (with --skip-nonfinite; without it
//                the run stops there with one line, before anything of the step is saved)
//   spike        the loss or the norm lies more than Z standard deviations above the mean of
//                the last `window` accepted steps (judged once `min_history` are in; the
//                deviation is floored at 1e-3 of the mean, so a flat history does not make
//                every tiny rise a spike)
//
// A skipped step leaves parameters and optimizer moments unchanged; its data is consumed and
// the learning-rate schedule moves on (as Megatron's skipped iterations). More than
// `max_skipped` skips in the run stop it with one line naming --max-skipped-steps.
// Every rank judges the same numbers (the loss summed over the job, the global norm), so the
// ranks agree without talking.
#pragma once
#include <cstdint>
#include <deque>
#include <string>

namespace strata::train {

struct GuardConfig {
  bool skip_nonfinite = false;
  double zscore = 0;  // 0: no spike detection
  int window = 32;
  int min_history = 8;
  int max_skipped = 10;
  // --spike-action rollback: a refused step also restores the newest in-memory checkpoint
  // (recovery/mem_checkpoints.h) and the run continues from its step, past the batch.
  bool rollback = false;
  bool active() const { return skip_nonfinite || zscore > 0; }
  // One line naming the flag, for a bad value.
  void validate() const;
};

class SpikeGuard {
 public:
  explicit SpikeGuard(GuardConfig c) : cfg_(c) {}
  const GuardConfig& config() const { return cfg_; }
  // Why the step with this loss and norm must be skipped ("" to take it). Does not record.
  std::string verdict(double loss, double norm) const;
  // The step was taken: its numbers join the history.
  void accepted(double loss, double norm);
  // The step was skipped: counts it; throws (one line) past max_skipped.
  void skipped(int64_t step, const std::string& why);
  int64_t skips() const { return skips_; }

 private:
  struct Stat {
    double mean = 0, sd = 0;
  };
  Stat stat(const std::deque<double>& v) const;
  std::string spike(const char* what, double x, const std::deque<double>& history) const;

  GuardConfig cfg_;
  std::deque<double> losses_, norms_;
  int64_t skips_ = 0;
};

}  // namespace strata::train
