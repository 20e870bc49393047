// The shape of strata's own GPT as the cost models see it, and what its parameters number on
// one rank: model/shard.h fills it from the model's config, and the engine's sizes, the
// training summary and `strata plan --local` count from it, which must agree to the byte
// with what a run holds.
//
// Terms: L layers, C width, NH heads, Vp padded vocabulary, maxT position rows, T tp ranks,
// E experts, P ep ranks.
// Local parameters of tp rank r: Vr·C (vocab rows floor((r+1)Vp/T) - floor(rVp/T)) + maxT·C
// + L·(12C²/T + 7C/T + 6C) + 2C, plus per MoE block E·C + (E/P)·(2·C·H/T + H/T + C) + the
// shared experts' (2·C·Hs/T + Hs/T + C, Hs = S·H; none when S = 0) - (8C²/T + 4C/T + C) (the
// router whole, the rank's E/P expert MLPs of H hidden units and the shared ones, each split
// over tp as the dense one, instead of the dense MLP; docs/moe.md). H = 4C unless fine-grained.
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
  // Fine-grained experts: each routed expert's hidden width (0: the dense MLP's); the shared
  // experts' hidden units together (S · that width; 0: none).
  int64_t expert_ffn = 0, shared_ffn = 0;
  // Node-limited routing (model/expert/config.h): the experts in route_groups groups, each
  // token's experts within route_max_groups of them (cost/comm.h's all-to-all rows); 0: none.
  int64_t route_groups = 0, route_max_groups = 0;
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

// One GPT-2 MLP of H hidden units (fc H x C and its bias, proj C x H and its bias; H = 4C: the
// dense block's) on one of T tp ranks.
inline int64_t mlp_params(int64_t dim, int tp, int64_t hidden = 0) {
  const int64_t C = dim, T = tp, H = hidden > 0 ? hidden : 4 * dim;
  return 2 * C * H / T + H / T + C;
}

// An MLP of H hidden units on one of T tp ranks: GPT-2's (mlp_params), or a Llama block's
// SwiGLU (gate, up (H, C) and down (C, H), no biases).
inline int64_t mlp_params_of(const GptShape& m, int tp, int64_t hidden) {
  return m.llama ? 3 * hidden * m.dim / tp : mlp_params(m.dim, tp, hidden);
}
// The dense MLP's hidden width.
inline int64_t dense_ffn(const GptShape& m) { return m.llama ? m.ffn : 4 * m.dim; }
// One routed expert's MLP on one of T tp ranks.
inline int64_t expert_mlp_params(const GptShape& m, int tp) {
  return mlp_params_of(m, tp, m.expert_ffn > 0 ? m.expert_ffn : dense_ffn(m));
}
// One MoE block's shared experts on one of T tp ranks (0: none).
inline int64_t shared_mlp_params(const GptShape& m, int tp) {
  return m.shared_ffn > 0 ? mlp_params_of(m, tp, m.shared_ffn) : 0;
}

// Parameters of tp rank `rank` holding the experts of one of `ep` expert-parallel ranks.
// Llama: the embedding's rows (and an untied lm_head's, split the same way) + per block
// 2C + C·(NH/T + 2·NKVl)·hs + C²/T + 3FC/T + the final norm's C, NKVl = tp_kv_heads.
inline int64_t local_params(const GptShape& m, int tp, int rank, int ep = 1) {
  const int64_t C = m.dim, T = tp;
  // Each MoE block: the router, E/P experts and the shared ones instead of the dense MLP.
  const int64_t moe_extra =
      m.moe_layers * (m.experts * C + (m.experts / ep) * expert_mlp_params(m, tp) + shared_mlp_params(m, tp) -
                      mlp_params_of(m, tp, dense_ffn(m)));
  if (m.llama) {
    const int64_t hs = C / m.heads, vocab = tp_vocab_rows(m.padded_vocab, tp, rank) * C;
    return vocab * (m.tied ? 1 : 2) +
           m.layers * (2 * C + C * (m.heads / T + 2 * tp_kv_heads(m.kv_heads, T)) * hs + C * C / T +
                       3 * m.ffn * C / T) +
           C + moe_extra;
  }
  return tp_vocab_rows(m.padded_vocab, tp, rank) * C + m.max_seq * C +
         m.layers * (12 * C * C / T + 7 * C / T + 6 * C) + 2 * C + moe_extra;
}

}  // namespace strata::cost
