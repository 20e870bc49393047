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
#include "model/tensor/tp_cost.h"

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

// Bytes of the buffers a ContextComm holds for micro-batches of B sequences (Tl local rows,
// Cl columns, NH heads on this rank): ring keeps two kv blocks, two travelling dkv blocks and
// one received (each B·Tl·2Cl) plus D (B·NH·Tl); Ulysses keeps send, receive and two
// head-sharded scratch tensors (3+3+1+3 B·Tl·Cl) plus every layer's head-sharded output.
inline int64_t cp_buffer_bytes(CpMode mode, int C, int layers, int64_t B, int64_t Tl, int64_t Cl,
                               int64_t NH) {
  if (C <= 1) return 0;
  const int64_t N = B * Tl;
  if (mode == CpMode::ring) return 4 * (5 * N * 2 * Cl + N * NH);
  return 4 * (10 * N * Cl + layers * N * Cl);
}

// Activation bytes of a (tp rank of a) cp rank, as GPT allocates them plus the cp buffers for
// micro-batches of b sequences of seq tokens: the model's buffers hold ceil(max_seq / C) rows
// per sequence (the tensor-parallel position-gradient scratch still spans the whole table).
inline int64_t cp_activation_bytes(const TpModel& m, int tp, bool sp, int rank, int64_t b,
                                   bool bf16, CpMode mode, int C, int64_t seq) {
  TpModel local = m;
  local.max_seq = (m.max_seq + C - 1) / C;
  int64_t bytes = tp_activation_bytes(local, tp, sp, rank, b, bf16, /*attn_fp32=*/C > 1);
  if (tp > 1) bytes += 4 * (m.max_seq - local.max_seq) * m.dim;
  return bytes + cp_buffer_bytes(mode, C, int(m.layers), b, seq / C, m.dim / tp, m.heads / tp);
}

}  // namespace strata::model
