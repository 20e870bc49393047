// A training layout and the setup it is planned for.
//
// Grid: world = tp · cp · dp · pp GPUs, ranks ordered with tp fastest, then cp, then dp, then
// pp (Megatron's order), so a group whose ranks fit in one node talks over NVLink and any
// other group crosses the network. Expert parallelism (ep) is carved out of the dp · cp
// ranks: each of ep ranks holds E/ep experts and the expert weights are replicated (and
// ZeRO-sharded) over the remaining dp · cp / ep ranks. The pipeline runs the setup's schedule
// (1F1B unless told) over m = global_batch / (dp · micro_batch) micro-batches.
#pragma once
#include <cstdint>
#include <string>

#include "cost/activations.h"
#include "cost/memory.h"
#include "model/parallel_rules.h"
#include "parallel/pipeline/schedule.h"
#include "plan/hardware.h"
#include "plan/model_spec.h"

namespace strata::plan {

using model::CpMode;  // model/parallel_rules.h: the engine's and the planner's

// Everything the planner holds fixed while it searches layouts.
struct TrainSetup {
  ModelSpec model;
  GpuSpec gpu;
  int64_t gpus = 8;
  int64_t global_batch = 0;  // sequences per optimizer step
  Precision precision = Precision::bf16;
  bool fp32_grads = false;
  Optimizer optimizer = Optimizer::adamw;
  bool seq_parallel = true;  // Megatron sequence parallelism whenever tp > 1
  CpMode cp_mode = CpMode::ring;
  double headroom = 0.10;  // fraction of device memory kept free (allocator, CUDA context)
  double bucket_mib = 25;  // ZeRO-1/2 reduce-scatter bucket
  double overlap = 1.0;    // fraction of compute that DP/ZeRO and CP-ring traffic can hide behind
  // The pipeline schedule every layout runs (parallel/pipeline/schedule.h), its model chunks
  // per stage (interleaved), and the micro-batches per step when fixed (0: global batch /
  // (dp · micro-batch), whatever that is).
  parallel::pipeline::ScheduleKind schedule = parallel::pipeline::ScheduleKind::one_f_one_b;
  int virtual_stages = 1;
  int64_t micro_batches = 0;
  StateBytesPerParam state_bytes() const {
    return state_bytes_per_param(precision, fp32_grads, optimizer);
  }
};

struct Layout {
  int tp = 1, pp = 1, dp = 1, cp = 1, ep = 1;
  int zero = 0;
  int micro_batch = 1;
  Recompute recompute = Recompute::none;

  int64_t gpus() const { return int64_t(tp) * pp * dp * cp; }
  int64_t micro_batches(int64_t global_batch) const {
    return global_batch / (int64_t(dp) * micro_batch);
  }
  std::string str() const;  // "tp 8 · pp 4 · dp 32 · cp 1 · ep 1 · zero 1 · mb 1 · rc selective"
  bool operator==(const Layout&) const = default;
};


// Empty when the layout can run this setup, else one line naming the numbers at fault.
std::string layout_problem(const TrainSetup& setup, const Layout& l);

// Whether a group of `size` ranks spaced `stride` apart stays inside one node.
inline bool group_in_node(int64_t stride, int64_t size, int64_t gpus_per_node) {
  return size <= 1 || stride * size <= gpus_per_node;
}

}  // namespace strata::plan
