// Flat-range arithmetic for sharded checkpoints.
//
// Terms.
//   state    one flat buffer of the model state ("params", "exp_avg", "exp_avg_sq", "master"),
//            Ψ elements long, laid out by the parameter table.
//   shard    the contiguous range [begin, end) of a state that one rank holds. ZeRO pads so any
//            Ψ splits over any N: rank r holds [r·S, (r+1)·S) with S = ceil(Ψ/N), clipped to Ψ
//            (the padding past Ψ is never saved).
//   piece    a range of a state stored contiguously in one shard file.
//   read     the part of a piece that falls in the range a loading rank wants.
// Loading on M ranks at another stage is the intersection of every wanted range with every
// saved piece: O(P·W) for P pieces and W wanted ranges, both at most a few per rank.
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

// One copy operation of a load: `count` elements from a saved piece at element offset
// `piece_offset` (relative to the piece's begin) to the wanted buffer at `dst_offset`.
struct ReadOp {
  int piece = 0;          // index into the pieces list given to plan_reads
  int64_t piece_offset = 0;
  int64_t dst_offset = 0;
  int64_t count = 0;
};

// Intersects `want` with every piece; returns the copies and the elements of `want` that no
// piece covers (0 when the saved pieces cover it).
inline std::vector<ReadOp> plan_reads(const std::vector<Range>& pieces, Range want,
                                      int64_t* uncovered = nullptr) {
  std::vector<ReadOp> ops;
  int64_t covered = 0;
  for (size_t i = 0; i < pieces.size(); ++i) {
    Range x = intersect(pieces[i], want);
    if (x.empty()) continue;
    ops.push_back({int(i), x.begin - pieces[i].begin, x.begin - want.begin, x.size()});
    covered += x.size();
  }
  // Pieces of one state never overlap (checked when the manifest is read), so the covered
  // count is exact.
  if (uncovered) *uncovered = want.size() - covered;
  std::sort(ops.begin(), ops.end(),
            [](const ReadOp& a, const ReadOp& b) { return a.dst_offset < b.dst_offset; });
  return ops;
}

}  // namespace strata::ckpt
