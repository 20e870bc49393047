// What context parallelism sends, per rank, layer and micro-batch (model/context/
// context_comm.h): the engine counts the bytes it sends and the planner and the tests predict
// them with these formulas. Terms: C cp ranks, B·Tl local rows, Cl attention columns on this
// rank (C_model / tp), fp32 payload.
//   ring     forward  (C-1) kv blocks of 2·B·Tl·Cl                 = (C-1)·8·B·Tl·Cl bytes
//            backward (C-1) kv blocks and (C-1) dkv blocks        = 2x the forward
//   ulysses  forward  all-to-alls of q, k, v and of the output: (C-1)/C of 4·B·Tl·Cl floats
//            backward the same (dO, then dq, dk, dv)
// Ring sends (2C-2)/(4(C-1)/C) = C/2 times Ulysses' bytes; it hides them behind the block
// computations, Ulysses' all-to-alls are exposed.
#pragma once
#include <cstdint>

#include "model/context/layout.h"

namespace strata::model {

inline int64_t cp_attention_bytes(CpMode mode, int C, int64_t B, int64_t Tl, int64_t Cl,
                                  bool backward) {
  if (C <= 1) return 0;
  if (mode == CpMode::ring) return (C - 1) * 2 * B * Tl * Cl * 4 * (backward ? 2 : 1);
  return (C - 1) * 4 * B * Tl * (Cl / C) * 4;
}

// Forward plus backward of every layer, per micro-batch.
inline int64_t cp_bytes_per_micro(CpMode mode, int C, int layers, int64_t B, int64_t T,
                                  int64_t Cl) {
  const int64_t Tl = T / C;
  return layers * (cp_attention_bytes(mode, C, B, Tl, Cl, false) +
                   cp_attention_bytes(mode, C, B, Tl, Cl, true));
}

}  // namespace strata::model
