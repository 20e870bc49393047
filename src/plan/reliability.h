// The planner's reliability estimate: how often a job of n GPUs fails, how often it should
// checkpoint and what failures cost, from the interval models of ckpt/reliability.h.
// A job of n GPUs whose failures are independent fails n times as often as one GPU:
//   M_job = M_gpu / n.
// Fraction of wall time lost with checkpoints every τ and restart cost R per failure
// (first-order, τ + δ << M): δ/τ for writing plus (τ/2 + R)/M for recomputing lost work.
#pragma once
#include <algorithm>

#include "ckpt/reliability.h"

namespace strata::plan {

inline double job_mtbf_s(double gpu_mtbf_s, double n_gpus) {
  return n_gpus > 0 ? gpu_mtbf_s / n_gpus : gpu_mtbf_s;
}

// Fraction of wall time spent writing checkpoints and redoing lost work (see above).
inline double checkpoint_overhead_fraction(double tau_s, double delta_s, double mtbf_s,
                                           double restart_s) {
  if (tau_s <= 0 || mtbf_s <= 0) return 1.0;
  return delta_s / tau_s + ckpt::expected_loss_per_failure_s(tau_s, restart_s) / mtbf_s;
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
  p.young_s = ckpt::young_interval_s(p.stall_s, p.job_mtbf_s);
  p.daly_s = ckpt::daly_interval_s(p.stall_s, p.job_mtbf_s);
  p.overhead_fraction =
      std::min(1.0, checkpoint_overhead_fraction(p.daly_s, p.stall_s, p.job_mtbf_s, in.restart_s));
  p.failures_per_day = 86400.0 / p.job_mtbf_s;
  p.gpu_hours_lost_per_day = in.gpus * 24.0 * p.overhead_fraction;
  return p;
}

}  // namespace strata::plan
