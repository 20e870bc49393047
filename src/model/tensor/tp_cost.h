// Tensor-parallel costs of strata's own GPT (model/shard.h, model/gpt_tp.cc), shared by the
// model's sizes, the training summary and `strata plan --local`, which must agree to the
// byte with what a run measures.
//
// Terms: L layers, C width, NH heads, Vp padded vocabulary, maxT position rows, T tp ranks,
// N = micro-batch · seq rows, seq the training sequence.
// Local parameters of tp rank r: Vr·C (vocab rows floor((r+1)Vp/T) - floor(rVp/T)) + maxT·C
// + L·(12C²/T + 7C/T + 6C) + 2C, plus per MoE block E·C + (E-1)·(8C²/T + 4C/T + C) (the
// router whole, E expert MLPs instead of one; docs/moe.md).
// Payload of the tp collectives per micro-batch (model/tensor/collectives.h counts an
// all-gather or reduce-scatter as the whole (N, C) tensor, an all-reduce as its buffer):
//   with SP:    (5 + 10L)·N·C + 3N + 2C + 6L·C + seq·C floats
//               forward 4 per layer + embedding + logits input, backward 6 per layer + 3,
//               the CE statistics (3N) and the replicated gradients under SP
//   without SP: (2 + 4L)·N·C + 3N floats (all-reduces: 2 per layer each way, embedding,
//               logits input gradient, CE statistics)
//   an MoE block (K experts per token) adds N·K (the gates' gradients, all-reduced), and with
//   SP moves one N·C gather less: its backward keeps its input instead of re-gathering it.
#pragma once
#include <cstdint>

namespace strata::model {

struct TpModel {
  int64_t layers = 0, dim = 0, heads = 0, max_seq = 0, vocab = 0, padded_vocab = 0;
  int64_t moe_layers = 0, experts = 0, top_k = 0;  // MoE blocks (docs/moe.md); 0: dense
};

inline int64_t tp_vocab_rows(int64_t padded_vocab, int tp, int rank) {
  return padded_vocab * (rank + 1) / tp - padded_vocab * rank / tp;
}

inline int64_t tp_local_params(const TpModel& m, int tp, int rank) {
  const int64_t C = m.dim, T = tp;
  // An MoE block: the router (E, C) whole, and E expert MLPs split as the dense one.
  const int64_t mlp = 8 * C * C / T + 4 * C / T + C;
  return tp_vocab_rows(m.padded_vocab, tp, rank) * C + m.max_seq * C +
         m.layers * (12 * C * C / T + 7 * C / T + 6 * C) + 2 * C +
         m.moe_layers * (m.experts * C + (m.experts - 1) * mlp);
}

// Bytes (fp32) of one micro-batch's tensor-parallel collectives, forward and backward.
inline int64_t tp_comm_bytes_per_micro(const TpModel& m, int tp, bool sp, int64_t micro_batch,
                                       int64_t seq) {
  if (tp <= 1 || micro_batch == 0) return 0;
  const int64_t N = micro_batch * seq, C = m.dim, L = m.layers;
  const int64_t floats = sp ? (5 + 10 * L) * N * C + 3 * N + 2 * C + 6 * L * C + seq * C
                            : (2 + 4 * L) * N * C + 3 * N;
  const int64_t moe = m.moe_layers * (N * m.top_k - (sp ? N * C : 0));
  return 4 * (floats + moe);
}

// Activation bytes the model allocates on one tp rank for micro-batches of up to
// `micro_batch` sequences of max_seq (model/part.h's carve_slot, without its 64-byte
// alignment padding, plus tokens, targets and weights). bf16 compute keeps the norm outputs
// (ln1, ln2, ln_f: n·C each), qkv (3·N·Cl), the attention output (N·Cl) and the GELU input
// and output (4·N·Cl each) in bf16, half their fp32 bytes.
// attn_fp32: qkv and the attention output stay fp32 under bf16 (context parallelism).
inline int64_t tp_activation_bytes(const TpModel& m, int tp, bool sp, int rank,
                                   int64_t micro_batch, bool bf16_compute = false,
                                   bool attn_fp32 = false) {
  const int64_t N = micro_batch * m.max_seq, C = m.dim, L = m.layers, T = tp;
  const int64_t n = sp && T > 1 ? (N + T - 1) / T : N, Cl = C / T;
  const int64_t Vr = tp_vocab_rows(m.padded_vocab, tp, rank);
  // bf16-able activations in floats: whole under fp32, halves (rounded up) under bf16.
  auto out = [&](int64_t e) { return bf16_compute ? (e + 1) / 2 : e; };
  auto att = [&](int64_t e) { return attn_fp32 ? e : out(e); };
  int64_t f = n * C;                                                   // embedding output
  f += L * (2 * n * C + 2 * out(n * C) + 4 * n + att(3 * N * Cl) + att(N * Cl) +
            2 * out(4 * N * Cl) + N * m.heads / T);                    // per layer
  f += out(n * C) + 2 * n + N * Vr + 2 * N;                            // ln_f, logits, losses
  f += 2 * n * C + 7 * N * Cl;                                         // gradient scratch
  if (T > 1) f += 2 * N * C + m.max_seq * C + 6 * C + 2 * N;           // tp scratch
  return 4 * f + 12 * N;
}

}  // namespace strata::model
