// Flat-range arithmetic for sharded checkpoints.
//
// Terms.
//   state    one flat buffer of the model state ("params", "exp_avg", "exp_avg_sq", "master"),
//            Ψ elements long, laid out by the parameter table.
//   shard    the contiguous range [begin, end) of a state that one rank holds. ZeRO pads so any
//            Ψ splits over any N: rank r holds [r·S, (r+1)·S) with S = ceil(Ψ/N), clipped to Ψ
//            (the padding past Ψ is never saved).
//   write    the part of its shard a rank saves; the write ranges of a group tile [0, Ψ).
// What a range holds of which tensor, and how saved chunks map onto it, is chunks.h.
#pragma once
#include <algorithm>
#include <cstdint>
#include <vector>

#include "core/shard.h"

namespace strata::ckpt {

struct Range {
  int64_t begin = 0;
  int64_t end = 0;
  int64_t size() const { return end > begin ? end - begin : 0; }
  bool empty() const { return end <= begin; }
  friend bool operator==(const Range&, const Range&) = default;
};

inline Range intersect(Range a, Range b) {
  Range r{std::max(a.begin, b.begin), std::min(a.end, b.end)};
  return r.empty() ? Range{r.begin, r.begin} : r;
}

// Rank r's ZeRO shard of a Ψ-element state over n ranks, clipped to [0, Ψ).
inline Range zero_shard(int64_t psi, int rank, int n) {
  const int64_t s = shard_elems(psi, n);
  return intersect({int64_t(rank) * s, int64_t(rank + 1) * s}, {0, psi});
}

// Which states a ZeRO stage shards: optimizer states from stage 1, parameters from stage 3
// (gradients from stage 2, but they are not saved).
inline bool zero_shards_state(int stage, bool is_parameters) {
  return is_parameters ? stage >= 3 : stage >= 1;
}

}  // namespace strata::ckpt
