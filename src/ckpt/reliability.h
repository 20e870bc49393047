// Checkpoint-interval cost models: the checkpointer's interval advice (ckpt/interval.h) and
// the planner's reliability estimate (plan/reliability.h) both use them.
//   δ: time to write one checkpoint (the stall the job pays), M: mean time between failures.
// Young (1974): τ = sqrt(2δM). Daly (2006), higher order, for δ < 2M:
//   τ = sqrt(2δM) · [1 + (1/3)·sqrt(δ/(2M)) + (1/9)·(δ/(2M))] − δ, else τ = M.
#pragma once
#include <cmath>

namespace strata::ckpt {

inline double young_interval_s(double delta_s, double mtbf_s) {
  return std::sqrt(2.0 * delta_s * mtbf_s);
}

inline double daly_interval_s(double delta_s, double mtbf_s) {
  if (delta_s >= 2.0 * mtbf_s) return mtbf_s;
  double r = delta_s / (2.0 * mtbf_s);
  return std::sqrt(2.0 * delta_s * mtbf_s) * (1.0 + std::sqrt(r) / 3.0 + r / 9.0) - delta_s;
}

// Expected work lost per failure with checkpoints every tau seconds: half an interval of
// compute plus the restart cost (time to detect, restart and reload).
inline double expected_loss_per_failure_s(double tau_s, double restart_s) {
  return tau_s / 2.0 + restart_s;
}

}  // namespace strata::ckpt
