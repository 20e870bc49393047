// The conditions a model puts on a parallel layout, written once for the engine's checks
// (model/shard.h, model/context/layout.h, train/run_spec.h) and the planner's
// (plan/layout.h), which word them each for its reader. The layout's own conditions (batch
// split, pipeline shape) are parallel/parallel_layout.h.
#pragma once
#include <cstdint>

namespace strata::model {

// Tensor parallelism gives each rank whole attention heads.
inline bool tp_splits_heads(int64_t heads, int64_t tp) { return tp >= 1 && heads % tp == 0; }

// Ulysses' all-to-all splits each tensor-parallel rank's heads over the cp ranks.
inline bool ulysses_splits_heads(int64_t heads, int64_t tp, int64_t cp) {
  return heads % (tp * cp) == 0;
}

// Expert parallelism needs experts, and whole experts on each ep rank.
inline bool ep_has_experts(int64_t experts, int64_t ep) { return ep == 1 || experts > 0; }
inline bool ep_splits_experts(int64_t experts, int64_t ep) { return experts % ep == 0; }

}  // namespace strata::model
