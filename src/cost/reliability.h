// Checkpoint-interval and failure cost models: the checkpointer's interval advice
// (ckpt/interval.h) and the planner's reliability estimate both use them.
//   δ: time to write one checkpoint (the stall the job pays), M: mean time between failures.
// Young (1974): τ = sqrt(2δM). Daly (2006), higher order, for δ < 2M:
//   τ = sqrt(2δM) · [1 + (1/3)·sqrt(δ/(2M)) + (1/9)·(δ/(2M))] − δ, else τ = M.
// A job of n GPUs whose failures are independent fails n times as often as one GPU:
//   M_job = M_gpu / n.
// Fraction of wall time lost with checkpoints every τ and restart cost R per failure
// (first-order, τ + δ << M): δ/τ for writing plus (τ/2 + R)/M for recomputing lost work.
#pragma once
#include <algorithm>
#include <cmath>

namespace strata::cost {

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

inline double job_mtbf_s(double gpu_mtbf_s, double n_gpus) {
  return n_gpus > 0 ? gpu_mtbf_s / n_gpus : gpu_mtbf_s;
}

// Fraction of wall time spent writing checkpoints and redoing lost work (see above). δ = 0
// gives τ = 0 (checkpoint continuously, for free): only the restarts cost, R/M.
inline double checkpoint_overhead_fraction(double tau_s, double delta_s, double mtbf_s,
                                           double restart_s) {
  if (mtbf_s <= 0 || (tau_s <= 0 && delta_s > 0)) return 1.0;
  const double writing = tau_s > 0 ? delta_s / tau_s : 0;
  return writing + expected_loss_per_failure_s(tau_s, restart_s) / mtbf_s;
}

struct CheckpointPlanInput {
  double gpus = 1;
  double job_mtbf_s = 0;  // used when set, else gpu_mtbf_s / gpus
  double gpu_mtbf_s = 0;
  double checkpoint_bytes = 0;  // whole checkpoint, all ranks together
  double storage_gbps = 0;      // aggregate write bandwidth, GB/s
  double stall_s = -1;          // job stall per checkpoint when not the full write (async)
  double restart_s = 0;
};

struct CheckpointPlan {
  double job_mtbf_s = 0, write_s = 0, stall_s = 0, young_s = 0, daly_s = 0;
  double overhead_fraction = 0;  // at the Daly interval
  double failures_per_day = 0;
  double gpu_hours_lost_per_day = 0;
};

inline CheckpointPlan plan_checkpoints(const CheckpointPlanInput& in) {
  CheckpointPlan p;
  p.job_mtbf_s = in.job_mtbf_s > 0 ? in.job_mtbf_s : job_mtbf_s(in.gpu_mtbf_s, in.gpus);
  p.write_s = in.storage_gbps > 0 ? in.checkpoint_bytes / (in.storage_gbps * 1e9) : 0;
  p.stall_s = in.stall_s >= 0 ? in.stall_s : p.write_s;
  p.young_s = young_interval_s(p.stall_s, p.job_mtbf_s);
  p.daly_s = daly_interval_s(p.stall_s, p.job_mtbf_s);
  p.overhead_fraction =
      std::min(1.0, checkpoint_overhead_fraction(p.daly_s, p.stall_s, p.job_mtbf_s, in.restart_s));
  p.failures_per_day = 86400.0 / p.job_mtbf_s;
  p.gpu_hours_lost_per_day = in.gpus * 24.0 * p.overhead_fraction;
  return p;
}

}  // namespace strata::cost
