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

// Where a restart resumes from, and so the work a failure loses (lost work per failure):
//   disk    the newest disk checkpoint, written every τ: τ/2 of recomputation on average
//           (uniform failure times), τ at worst
//   memory  the newest in-memory copy (--mem-ckpt-every K, steps of t seconds): at most K
//           steps, K·t (the copy of the step before the failure may still be in its
//           asynchronous commit when the failure lands, so a failure right after a copy still
//           loses that step; measured: 1 step at K = 1, bench/resilience/recovery.sh)
//   live    the newest in-memory copy, as memory, but the survivors re-form in process
//           (`--recovery live`, docs/checkpoints.md "Live recovery"): no new processes, so a
//           smaller R; the job runs one data-parallel replica short until the replacement
//           joins (not counted here: at N replicas it costs 1/N of that time)
// Each plus the restart cost R (detection, new processes or the re-formation, loading, first
// step). A failure that takes the copies' host with it (host lost, no replicas) falls back to
// disk.
enum class Recovery { disk, memory, live };

// interval_s: τ for disk, K·t for memory and live.
inline double lost_work_per_failure_s(Recovery mode, double interval_s, double restart_s) {
  return (mode == Recovery::disk ? interval_s / 2.0 : interval_s) + restart_s;
}

// Measured R: a failure to the first completed step after it, detection and that step
// included; rank 1 of 2 SIGKILLed, `--model tiny`, 2-core AMD EPYC VM at load 5-6, medians of
// 3, the three modes alternated in one invocation (bench/resilience/recovery.sh,
// docs/checkpoints.md "Measured recovery", 2026-12-05 19:38). A restart from memory verifies
// both slots of every rank before it loads, 0.3 s more here; live recovery rebuilds the model
// in the surviving processes. The default restart cost of the single-host advice (`strata
// ckpt advise`, `strata train --mtbf`, the report); a cluster's restart (scheduler, many
// hosts) is an input (`strata plan --restart-min`).
inline constexpr double kMeasuredRestartDiskS = 1.27;
inline constexpr double kMeasuredRestartMemoryS = 1.60;
inline constexpr double kMeasuredRestartLiveS = 0.84;
inline double measured_restart_s(Recovery m) {
  return m == Recovery::disk     ? kMeasuredRestartDiskS
         : m == Recovery::memory ? kMeasuredRestartMemoryS
                                 : kMeasuredRestartLiveS;
}

// Expected work lost per failure with checkpoints every tau seconds: half an interval of
// compute plus the restart cost (time to detect, restart and reload).
inline double expected_loss_per_failure_s(double tau_s, double restart_s) {
  return lost_work_per_failure_s(Recovery::disk, tau_s, restart_s);
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
  double step_s = 0;            // time per step (0: unknown, no in-memory figures)
  int mem_every = 1;            // in-memory copies every K steps
};

struct CheckpointPlan {
  double job_mtbf_s = 0, write_s = 0, stall_s = 0, young_s = 0, daly_s = 0;
  double overhead_fraction = 0;  // at the Daly interval
  double failures_per_day = 0;
  double gpu_hours_lost_per_day = 0;
  // Lost work per failure: restart from disk at Daly's interval, and from in-memory copies
  // every mem_every steps (0 when the step time is unknown); restarts and redone work only.
  double step_s = 0;
  int mem_every = 1;
  double disk_lost_per_failure_s = 0, memory_lost_per_failure_s = 0;
  double memory_restart_fraction = 0;  // (K·t + R)/M: the memory mode's share of wall time
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
  p.disk_lost_per_failure_s = lost_work_per_failure_s(Recovery::disk, p.daly_s, in.restart_s);
  p.step_s = in.step_s;
  p.mem_every = in.mem_every;
  if (in.step_s > 0) {
    p.memory_lost_per_failure_s =
        lost_work_per_failure_s(Recovery::memory, in.mem_every * in.step_s, in.restart_s);
    p.memory_restart_fraction = std::min(1.0, p.memory_lost_per_failure_s / p.job_mtbf_s);
  }
  return p;
}

}  // namespace strata::cost
