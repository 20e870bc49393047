// The conditions a model puts on a parallel layout, written once for the engine's checks
// (model/shard.h, model/context/layout.h, train/run_spec.h) and the planner's
// (plan/layout.h), which word them each for its reader. The layout's own conditions (batch
// split, pipeline shape) are parallel/parallel_layout.h.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

namespace strata::model {

// Context-parallel attention (model/context/): K/V blocks travel a ring of the cp ranks, or
// Ulysses' all-to-all gives each cp rank whole heads of the whole sequence. The engine's
// option and the planner's layouts share it.
enum class CpMode : uint8_t { ring, ulysses };
inline const char* cp_mode_name(CpMode m) { return m == CpMode::ring ? "ring" : "ulysses"; }
// The mode named `name`; nullopt for any other name.
inline std::optional<CpMode> cp_mode_from_name(const std::string& name) {
  for (CpMode m : {CpMode::ring, CpMode::ulysses})
    if (name == cp_mode_name(m)) return m;
  return std::nullopt;
}

// Tensor parallelism gives each rank whole attention heads.
inline bool tp_splits_heads(int64_t heads, int64_t tp) { return tp >= 1 && heads % tp == 0; }

// Key/value heads split whole over `ranks` ranks, or, when fewer, each is replicated on the
// ranks/NKV ranks whose query heads share it (tensor parallelism over the model's heads;
// Ulysses over one tp rank's). The query heads must split whole too.
inline bool splits_kv_heads(int64_t kv_heads, int64_t ranks) {
  return ranks >= 1 && kv_heads >= 1 && (kv_heads % ranks == 0 || ranks % kv_heads == 0);
}

// Ulysses' all-to-all splits each tensor-parallel rank's heads over the cp ranks.
inline bool ulysses_splits_heads(int64_t heads, int64_t tp, int64_t cp) {
  return heads % (tp * cp) == 0;
}

// Expert parallelism needs experts, and whole experts on each ep rank.
inline bool ep_has_experts(int64_t experts, int64_t ep) { return ep == 1 || experts > 0; }
inline bool ep_splits_experts(int64_t experts, int64_t ep) { return experts % ep == 0; }

}  // namespace strata::model
