// One transformer block, the final norm's backward and the embedding's backward on one
// tensor-parallel rank (the passes of model/gpt_tp.cc, which says what crosses the tp group),
// for callers that hold their activations themselves: model::GPT's tensor-parallel path and
// a tensor-parallel pipeline stage (model/stage.h).
//
// Terms: N = B·T rows of the micro-batch, n = tc.local_rows(N) rows of the residual region
// (N/T with sequence parallelism, else N), C width, Cl = C/T, NHl = NH/T local heads, wte
// rows [v0, v0 + Vr) on this rank.
#pragma once
#include <cstdint>

#include "model/gpt.h"
#include "model/gpt_impl.h"
#include "model/tensor/collectives.h"

namespace strata::model {

struct TpDims {
  int B = 0, T = 0;  // batch, sequence
  int64_t N = 0, n = 0;
  int C = 0, Cl = 0, NHl = 0;
  int64_t v0 = 0, Vr = 0;
};
// Throws one line when sequence parallelism cannot split the B·T rows over the tp ranks.
TpDims tp_dims(const GPTConfig& cfg, const TensorComm& tc, TpShard s, int B, int T);

// Backward scratch: dres, dbuf_c (n, C); dbuf_4c (N, 4Cl); dqkv (N, 3Cl); full_a, full_b
// (N, C); rep (T·C + 6C) for the replicated gradients of one micro-batch.
struct TpScratch {
  float *dres = nullptr, *dbuf_c = nullptr, *dbuf_4c = nullptr, *dqkv = nullptr;
  float *full_a = nullptr, *full_b = nullptr, *rep = nullptr;
  ContextComm* cp = nullptr;
};

// x (n, C) -> a.res3 (n, C); full, stage (N, C) scratch; out (N, 4Cl) fp32 matmul outputs.
// moe: the block's experts instead of its MLP (null: a dense block; docs/moe.md).
void tp_block_forward(TensorComm& tc, const TpDims& d, const Block& w, LayerActs& a,
                      const float* x, float* full, float* stage, float* out, ContextComm* cp,
                      int layer, MoEBlock* moe = nullptr);
// s.dres (n, C): d loss / d res3 on entry, d loss / d x on exit; g += this block's gradients.
void tp_block_backward(TensorComm& tc, const TpDims& d, const TpScratch& s, const Block& w,
                       const Block& g, const LayerActs& a, const float* x, int layer,
                       MoEBlock* moe = nullptr);
// rep (6C): one micro-batch's replicated gradients of a block (ln1 w, b | proj b | ln2 w, b |
// fc proj b), summed over tp under SP, then added (+=) into g's; the last only with mlp_bias
// (an MoE block's experts hold their own, whole on every tp rank).
void tp_add_replicated(TensorComm& tc, float* rep, const Block& g, int C, bool mlp_bias = true);
// Final LayerNorm: s.dbuf_c (n, C) d loss / d its output -> s.dres (n, C) d loss / d x;
// gw, gb (C) += its weight and bias gradients (summed over tp under SP).
void tp_final_norm_backward(TensorComm& tc, const TpDims& d, const TpScratch& s, const float* w,
                            float* gw, float* gb, const float* x, const float* mean,
                            const float* rstd);
// Embedding: s.dres (n, C) d loss / d its output; dwte (Vr, C) +=; returns this
// micro-batch's wpe gradient (T, C) in s.rep, summed over tp (the caller adds it).
const float* tp_embedding_backward(TensorComm& tc, const TpDims& d, const TpScratch& s,
                                   float* dwte, const int32_t* tokens);

}  // namespace strata::model
