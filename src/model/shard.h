// Where each GPT parameter lives under tensor parallelism (Megatron-LM, Shoeybi et al. 2019).
//
// Terms. T tensor-parallel ranks, r this rank, C width, NH heads, Vp padded vocabulary.
// Every parameter keeps its global name and shape (README's safetensors table); a rank holds
// one box of it (or, for qkv, three boxes) laid out row-major in its flat buffers, in the
// same view order as one process, so units and the DP/ZeRO engines are unchanged:
//   column-parallel (output rows split)  attn.c_attn w/b: rows [rC/T, (r+1)C/T) of each of
//                                        q, k and v (whole heads), so the local qkv is
//                                        q_r | k_r | v_r and attention runs on NH/T heads;
//                                        mlp.c_fc w/b: rows [4rC/T, 4(r+1)C/T)
//   row-parallel (input columns split)   attn.c_proj w, mlp.c_proj w: a column box
//   vocab-parallel                       wte: rows [floor(r Vp/T), floor((r+1) Vp/T)), uneven
//                                        when T does not divide Vp (the global shape never
//                                        depends on T)
//   replicated (primary on tp rank 0)    wpe, ln_1, ln_2, ln_f, attn.c_proj.bias,
//                                        mlp.c_proj.bias
// Llama blocks split q_proj like c_attn's q and k_proj, v_proj by whole key/value heads; with
// fewer key/value heads NKV than T, rank r holds head r / (T/NKV), the same rows as the other
// ranks sharing it (replicated, primary on the first of them; TensorComm::sum_shared_kv sums
// their gradients).
// An MoE block (docs/moe.md) splits each expert's MLP like the dense one (c_fc
// column-parallel, c_proj.weight row-parallel, c_proj.bias replicated) and replicates the
// router (E, C).
// Per block a rank holds 12C²/T + 7C/T + 6C elements, an MoE block
// 4C²/T + 3C/T + 5C + E·(C + 8C²/T + 4C/T + C); T = 1 is exactly the one-process table.
#pragma once
#include <cstdint>
#include <vector>

#include "core/tensor_layout.h"
#include "cost/shapes.h"
#include "model/gpt.h"

namespace strata::model {

struct VocabSlice {
  int64_t begin = 0, end = 0;  // rows [begin, end) of wte
  int64_t size() const { return end - begin; }
};
VocabSlice vocab_slice(int64_t padded_vocab, TpShard s);

// Throws one line naming --tp and the numbers when the model cannot be split T ways
// (heads % T, or with sequence parallelism the seq / cp tokens of a cp rank % T; `seq` is the
// whole training sequence).
void check_tensor_parallel(const GPTConfig& cfg, int tp, bool sequence_parallel, int seq,
                           int cp = 1);

// The local table (views in one-process order, local shapes, local offsets) and, for each
// view, the boxes of global tensors it holds.
struct ShardedView {
  ParamView view;
  std::vector<TensorPiece> pieces;  // local_offset relative to the flat buffer
};
// With an ExpertShard the expert units hold that ep rank's experts only (under their global
// names, each split over tp like the dense MLP).
std::vector<ShardedView> build_sharded_table(const GPTConfig& cfg, TpShard s,
                                             ExpertShard x = {});

// Every piece of the rank's flat buffer in local_offset order (core/tensor_layout.h).
TensorLayout tensor_layout(const GPTConfig& cfg, TpShard s, ExpertShard x = {});

// The model's shape as the cost models take it (cost/shapes.h).
cost::GptShape gpt_shape(const GPTConfig& cfg);

// Elements a tp rank holds (the local Ψ); with an ExpertShard, an ep rank.
int64_t local_num_params(const GPTConfig& cfg, TpShard s, ExpertShard x = {});

// Elements of the expert units of one rank of an expert-parallel group of `ep` ranks and a
// tensor-parallel group of `tp` (the expert region of the flat space): MoE blocks x E/ep x
// (8C²/T + 4C/T + C), which is 8C² + 5C per expert at tp 1. The dense region is the rest of
// local_num_params.
int64_t expert_params(const GPTConfig& cfg, int ep, int tp = 1);

}  // namespace strata::model
