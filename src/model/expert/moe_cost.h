// What expert parallelism moves, for `strata plan --local` and the tests that hold the
// engine to it (docs/moe.md).
//
// Per MoE block and micro-batch, every rank of an ep group of P ranks sends E/P counts
// (int64) to each rank, then its kept assignments' rows (C floats each) to their owners;
// owners send the results back, and backward repeats both row exchanges with gradients:
// every kept assignment travels 4 times. Summed over the P ranks of the group (sends to
// oneself included, as all_to_all_v moves them too):
//   bytes = blocks · (P · E · 8 + 4 · kept · C · 4),  kept = P · b · T · K when dropless
// (with a capacity factor kept is at most that, and depends on the routing). Nothing is
// exchanged when P = 1.
#pragma once
#include <cstdint>

#include "model/expert/config.h"

namespace strata::model::expert {

inline int64_t ep_group_bytes_per_micro(const MoEConfig& c, int layers, int dim, int P,
                                        int64_t tokens_per_rank) {
  if (P <= 1 || !c.enabled()) return 0;
  const int64_t kept = int64_t(P) * tokens_per_rank * c.top_k;
  return c.moe_layers(layers) * (int64_t(P) * c.experts * 8 + 4 * kept * dim * 4);
}

}  // namespace strata::model::expert
