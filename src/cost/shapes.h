// The shape of a GPT as the cost models see it, and what its parameters number on one rank:
// model/shard.h fills it from strata's model config and plan/model_spec.h from the planner's
// model description, and the engine's sizes, the training summary, `strata plan --local` and
// the planner's parameter counts all count from the functions below, which must agree to the
// byte with what a run holds. Also the width rules every description of a model shares (the
// padded vocabulary, Llama's MLP width).
//
// Terms: L layers, C width, NH heads (hs = C/NH), NKV key/value heads, F the dense MLP's
// width, Vp padded vocabulary, maxT position rows, T tp ranks, E experts, P ep ranks.
// Each part on tp rank r:
//   embedding   Vr·C, Vr = floor((r+1)Vp/T) - floor(rVp/T) rows (an untied head as many again)
//   positions   maxT·C when learned (GPT-2), replicated
//   attention   q, k, v column-parallel (NH/T and NKVl heads: C·(NH/T + 2·NKVl)·hs), o
//               row-parallel (C·C/T); biases (NH/T + 2·NKVl)·hs and o's C (replicated)
//   norms       2 per block and a final one: 2C each (LayerNorm) or C (RMSNorm), replicated
//   MLP of H    up (and gate) column-parallel, down row-parallel: 2CH/T (3CH/T gated);
//               biases H/T and down's C (replicated)
//   MoE block   the router E·C (replicated), E/P expert MLPs of H = fe (fine-grained; F unless
//               set) and the shared experts' one MLP of S·fe units, instead of the dense MLP
// GPT-2 (F = 4C) per block: 12C²/T + 7C/T + 6C, and Vr·C + maxT·C + L·(...) + 2C in all;
// an MoE block E·C + (E/P)·(2·C·H/T + H/T + C) + the shared experts' 2·C·Hs/T + Hs/T + C
// - (8C²/T + 4C/T + C) more (docs/moe.md).
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include "core/align.h"

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

// Rows of the embedding: the vocabulary rounded up to a multiple of 64 (50257 -> 50304), as
// Megatron and nanoGPT pad it.
inline int64_t padded_vocab(int64_t vocab) { return align64(vocab); }
// Llama's MLP width for width C: 8C/3 rounded up to a multiple of 256 (Meta's multiple_of).
inline int64_t llama_ffn(int64_t dim) { return round_up(8 * dim / 3, 256); }
// The MLP width a model has unless given: 4C (GPT-2's GELU MLP) or llama_ffn(C) (SwiGLU).
inline int64_t default_ffn(bool llama, int64_t dim) { return llama ? llama_ffn(dim) : 4 * dim; }

// What a block holds beyond its sizes. strata's two blocks are GPT-2's (GELU MLP, biases on
// every linear layer, LayerNorm's weight and bias, a learned position table) and Llama's
// (SwiGLU, none of the others); the planner's shapes may mix them (plan::ModelSpec).
struct BlockParts {
  bool gated = false;        // SwiGLU: gate, up and down (three matrices); else GELU (two)
  bool biases = true;        // on every linear layer
  bool layernorm = true;     // LayerNorm (weight, bias) vs RMSNorm (weight)
  bool learned_pos = true;   // a maxT x C position table vs rotary (no parameters)
  static BlockParts of(bool llama) {
    return llama ? BlockParts{true, false, false, false} : BlockParts{};
  }
  bool operator==(const BlockParts&) const = default;
};

struct GptShape {
  int64_t layers = 0, dim = 0, heads = 0, max_seq = 0, vocab = 0, padded_vocab = 0;
  int64_t moe_layers = 0, experts = 0, top_k = 0;  // MoE blocks (docs/moe.md); 0: dense
  // Activation recomputation (cost/activations.h); under full, the blocks that keep only
  // their output.
  Recompute recompute = Recompute::none;
  int64_t recomputed_layers = 0;
  // Llama blocks (model/model_part.h Arch): RMSNorm, no biases, no position table, SwiGLU,
  // an untied lm_head unless tied. false: GPT-2 blocks. (Last, so the positional
  // initialisers of GPT-2 shapes keep their meaning.)
  bool llama = false;
  // Key/value heads (0: heads) and the dense MLP's width (0: default_ffn).
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
  // A block other than llama's or GPT-2's (the planner's mixed shapes; strata's model never
  // has one): its parts as given. nullopt: BlockParts::of(llama).
  std::optional<BlockParts> parts = std::nullopt;
};

inline BlockParts block_parts(const GptShape& m) {
  return m.parts.value_or(BlockParts::of(m.llama));
}
inline int64_t kv_heads_of(const GptShape& m) { return m.kv_heads > 0 ? m.kv_heads : m.heads; }
// The dense MLP's hidden width.
inline int64_t dense_ffn(const GptShape& m) {
  return m.ffn > 0 ? m.ffn : default_ffn(m.llama, m.dim);
}
// One routed expert's hidden width.
inline int64_t expert_ffn(const GptShape& m) {
  return m.expert_ffn > 0 ? m.expert_ffn : dense_ffn(m);
}

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

// Each part's parameters on one of T tp ranks (rank r of the vocabulary's uneven split), as
// the header describes them.
inline int64_t embedding_params(const GptShape& m, int tp, int rank) {
  return tp_vocab_rows(m.padded_vocab, tp, rank) * m.dim;
}
// The untied output layer's (0 when it is the embedding).
inline int64_t head_params(const GptShape& m, int tp, int rank) {
  return m.tied ? 0 : embedding_params(m, tp, rank);
}
inline int64_t position_params(const GptShape& m) {
  return block_parts(m).learned_pos ? m.max_seq * m.dim : 0;
}
// One norm (a block has two, the model one more at the end).
inline int64_t norm_params(const GptShape& m) {
  return block_parts(m).layernorm ? 2 * m.dim : m.dim;
}
// Query (and attention output) columns of one tp rank: NH/T heads of hs.
inline int64_t q_columns(const GptShape& m, int tp) { return m.heads / tp * (m.dim / m.heads); }
// Key (or value) columns of one tp rank: NKVl·hs (C/T without grouped-query attention).
inline int64_t kv_columns(const GptShape& m, int tp) {
  return tp_kv_heads(kv_heads_of(m), tp) * (m.dim / m.heads);
}
// Attention's q, k, v and o matrices (what Muon orthogonalises), and with their biases.
inline int64_t attention_matrix_params(const GptShape& m, int tp) {
  return 2 * m.dim * (q_columns(m, tp) + kv_columns(m, tp));
}
inline int64_t attention_params(const GptShape& m, int tp) {
  const int64_t biases = q_columns(m, tp) + 2 * kv_columns(m, tp) + m.dim;
  return attention_matrix_params(m, tp) + (block_parts(m).biases ? biases : 0);
}
// An MLP of H hidden units of width C on one of T tp ranks, gated (SwiGLU) or not, with or
// without biases.
inline int64_t mlp_params(int64_t dim, int tp, int64_t hidden, bool gated, bool biases) {
  const int64_t C = dim, T = tp, H = hidden;
  return (gated ? 3 : 2) * C * H / T + (biases ? H / T + C : 0);
}
// One GPT-2 MLP of H hidden units (H = 4C: the dense block's).
inline int64_t mlp_params(int64_t dim, int tp, int64_t hidden = 0) {
  return mlp_params(dim, tp, hidden > 0 ? hidden : default_ffn(false, dim), false, true);
}
// An MLP of H hidden units of m's blocks.
inline int64_t mlp_params_of(const GptShape& m, int tp, int64_t hidden) {
  const BlockParts p = block_parts(m);
  return mlp_params(m.dim, tp, hidden, p.gated, p.biases);
}
// One routed expert's MLP on one of T tp ranks.
inline int64_t expert_mlp_params(const GptShape& m, int tp) {
  return mlp_params_of(m, tp, expert_ffn(m));
}
// One MoE block's shared experts on one of T tp ranks (0: none).
inline int64_t shared_mlp_params(const GptShape& m, int tp) {
  return m.shared_ffn > 0 ? mlp_params_of(m, tp, m.shared_ffn) : 0;
}
// One MoE block's router (replicated over tp and ep).
inline int64_t router_params(const GptShape& m) { return m.experts * m.dim; }

// Every block's parameters on one of T tp ranks, `routed` of each MoE block's experts among
// them: the router, those experts and the shared ones in place of the dense MLP.
inline int64_t block_params(const GptShape& m, int tp, int64_t routed) {
  const int64_t block = attention_params(m, tp) + 2 * norm_params(m);
  const int64_t dense_mlp = mlp_params_of(m, tp, dense_ffn(m));
  const int64_t moe_mlp =
      router_params(m) + routed * expert_mlp_params(m, tp) + shared_mlp_params(m, tp);
  return m.layers * block + (m.layers - m.moe_layers) * dense_mlp + m.moe_layers * moe_mlp;
}

// Parameters of tp rank `rank` holding the experts of one of `ep` expert-parallel ranks.
inline int64_t local_params(const GptShape& m, int tp, int rank, int ep = 1) {
  return embedding_params(m, tp, rank) + head_params(m, tp, rank) + position_params(m) +
         block_params(m, tp, m.experts / ep) + norm_params(m);
}

// Parameters a token multiplies by, the N of model FLOPs (cost/flops.h): every block's (its
// norms and biases with them; an MoE block's router, shared experts and K routed ones) and
// the output layer (the embedding when tied); not the input lookup, the position table or the
// final norm.
inline int64_t active_matmul_params(const GptShape& m) {
  return block_params(m, 1, m.top_k) + (m.tied ? embedding_params(m, 1, 0) : head_params(m, 1, 0));
}

}  // namespace strata::cost
