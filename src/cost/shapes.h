// The shape of strata's own GPT as the cost models see it, and what its parameters number on
// one rank: model/shard.h fills it from the model's config, and the engine's sizes, the
// training summary and `strata plan --local` count from it, which must agree to the byte
// with what a run holds.
//
// Terms: L layers, C width, NH heads, Vp padded vocabulary, maxT position rows, T tp ranks,
// E experts, P ep ranks.
// Local parameters of tp rank r: Vr·C (vocab rows floor((r+1)Vp/T) - floor(rVp/T)) + maxT·C
// + L·(12C²/T + 7C/T + 6C) + 2C, plus per MoE block E·C + (E/P - 1)·(8C²/T + 4C/T + C) (the
// router whole, the rank's E/P expert MLPs, each split over tp as the dense one, instead of
// one; docs/moe.md).
#pragma once
#include <cstdint>
#include <optional>
#include <string>

namespace strata::cost {

// Activation recomputation (docs/recompute.md): none; selective (each block's norms and
// activation function again in the backward); full (each block again from its input). The
// engine's policy (model/model_part.h), the planner's layouts and the cost models share it.
enum class Recompute : uint8_t { none, selective, full };
inline const char* recompute_name(Recompute r) {
  return r == Recompute::none ? "none" : r == Recompute::selective ? "selective" : "full";
}
// The recomputation named `name`; nullopt for any other name.
inline std::optional<Recompute> recompute_from_name(const std::string& name) {
  for (Recompute r : {Recompute::none, Recompute::selective, Recompute::full})
    if (name == recompute_name(r)) return r;
  return std::nullopt;
}

struct GptShape {
  int64_t layers = 0, dim = 0, heads = 0, max_seq = 0, vocab = 0, padded_vocab = 0;
  int64_t moe_layers = 0, experts = 0, top_k = 0;  // MoE blocks (docs/moe.md); 0: dense
  // Activation recomputation (cost/activations.h); under full, the blocks that keep only
  // their output.
  Recompute recompute = Recompute::none;
  int64_t recomputed_layers = 0;
  // Llama blocks (model/model_part.h Arch): RMSNorm, no biases, no position table, SwiGLU of
  // ffn, kv_heads key/value heads, an untied lm_head unless tied. false: GPT-2 blocks. (Last,
  // so the positional initialisers of GPT-2 shapes keep their meaning.)
  bool llama = false;
  int64_t kv_heads = 0, ffn = 0;
  bool tied = true;
  // Full recomputation under bf16 compute with --recompute-inputs bf16: each recomputed block
  // followed by another keeps its output in bf16.
  bool recompute_bf16_inputs = false;
};

// Key/value heads one of T tp ranks holds: NKV/T when T divides NKV; when NKV divides T, the
// one head its query heads share, replicated on the T/NKV ranks that share it (Megatron-Core's
// layout for multi-query and small-group models; model/shard.h).
inline int64_t tp_kv_heads(int64_t kv_heads, int64_t tp) {
  return kv_heads >= tp ? kv_heads / tp : 1;
}
// How many tp ranks hold each key/value head: 1, or T/NKV when they are replicated.
inline int64_t tp_kv_share(int64_t kv_heads, int64_t tp) {
  return kv_heads >= tp ? 1 : tp / kv_heads;
}

// Ulysses' key (or value) columns for one of C cp ranks, of a tp rank's Kl (NKVl heads of hs
// columns): Kl / C, or with fewer heads than cp ranks one head (hs), sent to each of the C/NKVl
// ranks sharing it (model/context/ulysses.cc). hs 0: whole heads split.
inline int64_t ulysses_kv_columns(int64_t Kl, int64_t C, int64_t hs) {
  return hs > 0 && Kl < C * hs ? hs : Kl / C;
}

inline int64_t tp_vocab_rows(int64_t padded_vocab, int tp, int rank) {
  return padded_vocab * (rank + 1) / tp - padded_vocab * rank / tp;
}

// One MLP (fc 4C x C and its bias, proj C x 4C and its bias) on one of T tp ranks: the dense
// block's and each expert's.
inline int64_t mlp_params(int64_t dim, int tp) {
  const int64_t C = dim, T = tp;
  return 8 * C * C / T + 4 * C / T + C;
}

// One expert's MLP on one of T tp ranks: GPT-2's (mlp_params), or a Llama block's SwiGLU
// (gate, up (F, C) and down (C, F), no biases).
inline int64_t expert_mlp_params(const GptShape& m, int tp) {
  return m.llama ? 3 * m.ffn * m.dim / tp : mlp_params(m.dim, tp);
}

// Parameters of tp rank `rank` holding the experts of one of `ep` expert-parallel ranks.
// Llama: the embedding's rows (and an untied lm_head's, split the same way) + per block
// 2C + C·(NH/T + 2·NKVl)·hs + C²/T + 3FC/T + the final norm's C, NKVl = tp_kv_heads.
inline int64_t local_params(const GptShape& m, int tp, int rank, int ep = 1) {
  const int64_t C = m.dim, T = tp;
  if (m.llama) {
    const int64_t hs = C / m.heads, vocab = tp_vocab_rows(m.padded_vocab, tp, rank) * C;
    return vocab * (m.tied ? 1 : 2) +
           m.layers * (2 * C + C * (m.heads / T + 2 * tp_kv_heads(m.kv_heads, T)) * hs + C * C / T +
                       3 * m.ffn * C / T) +
           C + m.moe_layers * (m.experts * C + (m.experts / ep - 1) * expert_mlp_params(m, tp));
  }
  return tp_vocab_rows(m.padded_vocab, tp, rank) * C + m.max_seq * C +
         m.layers * (12 * C * C / T + 7 * C / T + 6 * C) + 2 * C +
         m.moe_layers * (m.experts * C + (m.experts / ep - 1) * mlp_params(C, tp));
}

}  // namespace strata::cost
