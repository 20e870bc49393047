// Data-parallel engine options (`strata train --zero S --precision P --bucket-mb M
// --prefetch K`) and the checks that reject impossible settings before any work starts.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "cost/memory.h"

namespace strata::parallel {

// The engine keeps its states in the precision the memory formulas are written in (cost/memory.h).
using cost::Precision;

struct DataParallelOptions {
  int stage = 0;                          // ZeRO stage: 0 (DDP), 1, 2, 3 (FSDP)
  Precision precision = Precision::fp32;  // working parameters and gradients
  // Gradient bucket cap in MiB of working-precision gradients. A unit (a layer) larger than
  // the cap forms a bucket of its own, so any cap below a layer gives one bucket per layer.
  // 4 rather than PyTorch DDP's 25: strata buckets whole layers, and a 25 MiB cap would put
  // a small model (tiny: 12.6 MB of fp32 gradients) in one bucket with nothing to overlap.
  double bucket_mb = 4;
  int prefetch = 1;                   // stage 3: units gathered ahead of their use (>= 0)
  bool reshard_after_forward = true;  // stage 3: free gathered units after their forward
  // `--reduce-dtype`: the dtype gradients are summed in across ranks (FSDP's
  // MixedPrecision.reduce_dtype). Unset: the working precision (no conversion). Set to the
  // other one: each bucket is converted into a wire buffer of that dtype (category comm)
  // before its collective and back after (grad_reducer.h).
  std::optional<Precision> reduce_precision;
  Precision reduce() const { return reduce_precision.value_or(precision); }

  // Throws one line naming the option and its value ("--zero 4: ZeRO stage must be ...").
  void validate() const;
  std::string describe() const;  // "zero 2, bf16, bucket 25 MiB"
};

Precision parse_precision(std::string_view s);  // "fp32" | "bf16"; throws naming the value
const char* precision_name(Precision p);
int parse_zero_stage(std::string_view s);  // "0".."3"; throws naming the value

// The engine owns every parameter and gradient buffer (it binds each unit of the model), so
// the model must be built without its own: GPT(cfg, batch, /*allocate_state=*/false).
inline bool model_owns_state(const DataParallelOptions&) { return false; }

// Rejects a data-parallel layout the machine cannot hold: `ranks_on_host` ranks, each with
// the model states of `stage` for `psi` parameters (cost/memory.h) plus
// `other_bytes_per_rank` (activations, buffers), against `available_bytes` (<= 0: read
// MemAvailable from /proc/meminfo). Throws naming the numbers. An MoE rank holds
// `psi_experts` more parameters (its E/ep experts) sharded over `expert_world` ranks
// (moe_model_state_bytes).
void check_memory_fits(int64_t psi, int world, int ranks_on_host, const DataParallelOptions& opts,
                       int64_t other_bytes_per_rank, int64_t available_bytes = 0,
                       int64_t psi_experts = 0, int expert_world = 1);

// Rejects a global batch that cannot feed `world` ranks: every rank needs at least one
// sequence per micro-step, and the batch must split evenly (B = b * A * world).
void check_batch_split(int global_batch, int micro_batch, int world);

}  // namespace strata::parallel
