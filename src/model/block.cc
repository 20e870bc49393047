// The block's passes (model/block.h). Communication per micro-batch and block under
// tensor parallelism with SP: forward 2 all-gathers + 2 reduce-scatters of N·C floats;
// backward 4 all-gathers + 2 reduce-scatters of N·C + 6C all-reduced. Without SP: 2
// all-reduces of N·C forward and 2 backward (cost/comm.h). At T = 1: none.
#include "model/block.h"

#include <cstring>

#include "kernels/kernels.h"
#include "model/context/attention.h"
#include "model/tensor/linear.h"

namespace strata::model {

namespace k = strata::kernels;
namespace tn = strata::model::tensor;

void carve_layer(Carver& c, LayerActs& l, int C_, int heads, const ActShape& a, bool bf16,
                 bool attn_f32, BlockKeep keep) {
  const int64_t C = C_, N = a.N, n = a.n, Cl = C / a.T;
  const bool f32 = !bf16;
  l = LayerActs{};
  if (keep == BlockKeep::output) {
    l.res3 = c.take(n * C);
    return;
  }
  // Selective recomputation's buffers: the norms' outputs and the fp32 GELU output.
  const bool norms = keep != BlockKeep::selective;
  const bool rest = keep != BlockKeep::dropped;  // everything else
  l.ln1 = c.take_if(n * C, f32 && norms);
  l.ln1_h = c.take_bf16(n * C, bf16 && norms);
  if (rest) {
    l.ln1_mean = c.take(n);
    l.ln1_rstd = c.take(n);
    l.qkv = c.take_if(3 * N * Cl, attn_f32);
    l.qkv_h = c.take_bf16(3 * N * Cl, !attn_f32);
    l.atty = c.take_if(N * Cl, attn_f32);
    l.atty_h = c.take_bf16(N * Cl, !attn_f32);
    l.att_lse = c.take(N * heads / a.T);
    l.res2 = c.take(n * C);
  }
  l.ln2 = c.take_if(n * C, f32 && norms);
  l.ln2_h = c.take_bf16(n * C, bf16 && norms);
  if (rest) {
    l.ln2_mean = c.take(n);
    l.ln2_rstd = c.take(n);
    l.fch = c.take_if(4 * N * Cl, f32);
    l.fch_h = c.take_bf16(4 * N * Cl, bf16);
  }
  l.fch_gelu = c.take_if(4 * N * Cl, f32 && norms);
  if (rest) l.gelu_h = c.take_bf16(4 * N * Cl, bf16);
  if (keep == BlockKeep::all || keep == BlockKeep::selective) l.res3 = c.take(n * C);
}

LayerActs effective_acts(const LayerActs& kept, const LayerActs& work, BlockKeep keep) {
  if (keep == BlockKeep::all) return kept;
  LayerActs e = work;
  if (keep == BlockKeep::output) {
    e.res3 = kept.res3;
    return e;
  }
  e = kept;
  e.ln1 = work.ln1;
  e.ln1_h = work.ln1_h;
  e.ln2 = work.ln2;
  e.ln2_h = work.ln2_h;
  e.fch_gelu = work.fch_gelu;  // fp32 compute; bf16 keeps its gelu_h
  return e;
}

namespace {

// Where a matmul producing qkv or fch writes: the fp32 activation itself, or under bf16
// compute the fp32 scratch (at least (N, 4Cl)) that store_qkv / gelu_out round from.
float* gemm_out(float* f, float* scratch) { return f ? f : scratch; }

// qkv (N, 3Cl) written by the matmul into gemm_out(a.qkv, scratch): kept as bf16 under bf16
// compute (the attention tile products round it to bf16 anyway, so nothing is lost).
void store_qkv(LayerActs& a, const float* scratch, int64_t n) {
  if (a.qkv_h) k::f32_to_bf16(a.qkv_h, scratch, n);
}

// The block's attention: over the cp group (fp32 qkv and output), or the one-rank kernel on
// whichever store the block keeps.
void attention_fwd(const BlockCtx& c, LayerActs& a, bool h) {
  const TpDims& d = c.d;
  if (c.cp)
    attention_forward(c.cp, c.key, a.atty, a.att_lse, a.qkv, d.B, d.T, d.Cl, d.NHl, h,
                      c.doc_start);
  else if (a.qkv_h)
    k::attention_forward(a.atty_h, a.att_lse, a.qkv_h, d.B, d.T, d.Cl, d.NHl, c.doc_start);
  else
    k::attention_forward(a.atty, a.att_lse, a.qkv, d.B, d.T, d.Cl, d.NHl, false, c.doc_start);
}

// dqkv (N, 3Cl) written; datt (N, Cl).
void attention_bwd(const BlockCtx& c, float* dqkv, const float* datt, const LayerActs& a,
                   bool h) {
  const TpDims& d = c.d;
  if (c.cp)
    attention_backward(c.cp, c.key, dqkv, datt, a.qkv, a.atty, a.att_lse, d.B, d.T, d.Cl, d.NHl,
                       h, c.doc_start);
  else if (a.qkv_h)
    k::attention_backward(dqkv, datt, a.qkv_h, a.atty_h, a.att_lse, d.B, d.T, d.Cl, d.NHl,
                          c.doc_start);
  else
    k::attention_backward(dqkv, datt, a.qkv, a.atty, a.att_lse, d.B, d.T, d.Cl, d.NHl, false,
                          c.doc_start);
}

// GELU of fc (n values at gemm_out(a.fch, scratch)): fp32, or under bf16 compute its output
// and the pre-GELU input both stored in bf16, from the fp32 matmul output in one pass.
void gelu_out(LayerActs& a, const float* fc, int64_t n) {
  if (a.fch_h)
    k::gelu_forward(a.gelu_h, a.fch_h, fc, n);
  else
    k::gelu_forward(a.fch_gelu, fc, n);
}

// d (n) = d * gelu'(fc), fc read from whichever store the forward kept.
void gelu_grad(float* d, const LayerActs& a, int64_t n) {
  if (a.fch_h)
    k::gelu_backward(d, a.fch_h, d, n);
  else
    k::gelu_backward(d, a.fch, d, n);
}

// Where one micro-batch's gradients of the replicated views go: at T > 1 the scratch rep
// (6C: ln1 w, b | proj b | ln2 w, b | fc proj b), reduced and added by done(); at T = 1 the
// block's gradients themselves.
struct Replicated {
  float *ln1w, *ln1b, *projb, *ln2w, *ln2b, *fcprojb;
  TensorComm& tc;
  float* rep;
  const Block& g;
  int C;

  Replicated(TensorComm& tc, float* rep, const Block& g, int C)
      : tc(tc), rep(tc.size() > 1 ? rep : nullptr), g(g), C(C) {
    if (!this->rep) {
      ln1w = g.ln1w, ln1b = g.ln1b, projb = g.projb, ln2w = g.ln2w, ln2b = g.ln2b,
      fcprojb = g.fcprojb;
      return;
    }
    std::memset(rep, 0, sizeof(float) * 6 * size_t(C));
    ln1w = rep, ln1b = rep + C, projb = rep + 2 * C, ln2w = rep + 3 * C, ln2b = rep + 4 * C,
    fcprojb = rep + 5 * C;
  }
  // mlp_bias: add fc proj's bias too (an MoE block's experts hold their own, whole on every
  // tp rank, so rep + 5C stays 0 and is not added).
  void done(bool mlp_bias) {
    if (!rep) return;
    if (tc.sequence_parallel()) tc.all_reduce_sum(rep, 6 * C);  // each rank saw its own rows
    auto add = [&](float* dst, const float* src) {
      for (int i = 0; i < C; ++i) dst[i] += src[i];
    };
    add(g.ln1w, ln1w);
    add(g.ln1b, ln1b);
    add(g.projb, projb);
    add(g.ln2w, ln2w);
    add(g.ln2b, ln2b);
    if (mlp_bias) add(g.fcprojb, fcprojb);
  }
};

// The MoE half: a.ln2 (n, C) -> a.res3 (n, C) = a.res2 + the experts' output.
void moe_forward(const BlockCtx& c, LayerActs& a, bool h) {
  const TpDims& d = c.d;
  const int64_t N = d.N, n = d.n;
  const int C = d.C;
  if (c.tc.size() == 1) {
    std::memcpy(a.res3, a.res2, sizeof(float) * size_t(N * C));
    moe_block_forward(*c.moe, a.ln2, a.ln2_h, a.res3, N, h);
    return;
  }
  const tn::Mat x =
      tn::gather_input(c.tc, tn::act(a.ln2, a.ln2_h, C), c.s.full_a, c.s.full_b, N, C);
  float* partial = c.s.full_b;  // free once gathered
  std::memset(partial, 0, sizeof(float) * size_t(N * C));
  const bool xh = x.t == DType::bf16;
  moe_block_forward(*c.moe, xh ? nullptr : static_cast<const float*>(x.p),
                    xh ? static_cast<const uint16_t*>(x.p) : nullptr, partial, N, h);
  c.tc.reduce_rows(partial, a.res3, N, C);  // g forward
  for (int64_t i = 0; i < n * C; ++i) a.res3[i] += a.res2[i];
}

// c.s.dres (n, C) d loss / d res3 -> c.s.dbuf_c (n, C) d loss / d ln2 (the MoE half's input).
void moe_backward(const BlockCtx& c, bool h) {
  const TpScratch& s = c.s;
  if (c.tc.size() == 1) return moe_block_backward(*c.moe, s.dres, s.dbuf_c, h);
  const float* dout = c.tc.gather_rows(s.dres, s.full_a, c.d.N, c.d.C);  // g backward
  moe_block_backward(*c.moe, dout, s.full_b, h);                         // this rank's partial
  c.tc.reduce_rows(s.full_b, s.dbuf_c, c.d.N, c.d.C);                    // f backward
}

}  // namespace

void block_forward(const BlockCtx& c, const Block& w, LayerActs& a, const float* x) {
  TensorComm& tc = c.tc;
  const TpDims& d = c.d;
  const int64_t N = d.N, n = d.n;
  const int C = d.C, Cl = d.Cl;
  const bool h = a.ln1_h != nullptr;  // bf16 compute
  float* out = c.s.dbuf_4c;           // (N, 4Cl) the fp32 matmul outputs bf16 stores rounded
  layernorm_out(a.ln1, a.ln1_h, a.ln1_mean, a.ln1_rstd, x, w.ln1w, w.ln1b, n, C);
  tn::column_forward(tc, h, gemm_out(a.qkv, out), tn::act(a.ln1, a.ln1_h, C), w.qkvw, w.qkvb,
                     c.s.full_a, c.s.full_b, N, C, 3 * Cl);
  store_qkv(a, out, N * 3 * Cl);
  attention_fwd(c, a, h);
  tn::row_forward_residual(tc, h, a.res2, tn::act(a.atty, a.atty_h, Cl), w.projw, w.projb, x,
                           c.s.full_a, N, Cl, C);
  layernorm_out(a.ln2, a.ln2_h, a.ln2_mean, a.ln2_rstd, a.res2, w.ln2w, w.ln2b, n, C);
  if (c.moe) return moe_forward(c, a, h);
  tn::column_forward(tc, h, gemm_out(a.fch, out), tn::act(a.ln2, a.ln2_h, C), w.fcw, w.fcb,
                     c.s.full_a, c.s.full_b, N, C, 4 * Cl);
  gelu_out(a, gemm_out(a.fch, out), N * 4 * Cl);
  tn::row_forward_residual(tc, h, a.res3, tn::act(a.fch_gelu, a.gelu_h, 4 * Cl), w.fcprojw,
                           w.fcprojb, a.res2, c.s.full_a, N, 4 * Cl, C);
}

void block_recompute(const BlockCtx& c, const Block& w, LayerActs& e, const float* x, BlockKeep keep) {
  if (keep == BlockKeep::output) return block_forward(c, w, e, x);
  if (keep != BlockKeep::selective) return;
  const TpDims& d = c.d;
  layernorm_out(e.ln1, e.ln1_h, e.ln1_mean, e.ln1_rstd, x, w.ln1w, w.ln1b, d.n, d.C);
  layernorm_out(e.ln2, e.ln2_h, e.ln2_mean, e.ln2_rstd, e.res2, w.ln2w, w.ln2b, d.n, d.C);
  if (!c.moe && e.fch_gelu) k::gelu_forward(e.fch_gelu, e.fch, d.N * 4 * d.Cl);
}

void block_backward(const BlockCtx& c, const Block& w, const Block& g, const LayerActs& a,
                    const float* x) {
  TensorComm& tc = c.tc;
  const TpDims& d = c.d;
  const TpScratch& s = c.s;
  const int64_t N = d.N, n = d.n;
  const int C = d.C, Cl = d.Cl;
  const bool h = a.ln1_h != nullptr;  // bf16 compute
  Replicated r(tc, s.rep, g, C);
  if (c.moe) {
    moe_backward(c, h);
  } else {
    float* dgelu = s.dbuf_4c;  // (N, 4Cl)
    tn::row_backward(tc, h, dgelu, g.fcprojw, r.fcprojb, s.dres,
                     tn::act(a.fch_gelu, a.gelu_h, 4 * Cl), w.fcprojw, s.full_a, N, 4 * Cl, C);
    gelu_grad(dgelu, a, N * 4 * Cl);
    tn::column_backward(tc, h, s.dbuf_c, g.fcw, g.fcb, dgelu, tn::act(a.ln2, a.ln2_h, C), w.fcw,
                        s.full_a, s.full_b, N, C, 4 * Cl);
  }
  k::layernorm_backward(s.dres, r.ln2w, r.ln2b, s.dbuf_c, a.res2, w.ln2w, a.ln2_mean, a.ln2_rstd,
                        n, C);
  float* datty = s.dbuf_4c;  // (N, Cl)
  tn::row_backward(tc, h, datty, g.projw, r.projb, s.dres, tn::act(a.atty, a.atty_h, Cl), w.projw,
                   s.full_a, N, Cl, C);
  attention_bwd(c, s.dqkv, datty, a, h);
  tn::column_backward(tc, h, s.dbuf_c, g.qkvw, g.qkvb, s.dqkv, tn::act(a.ln1, a.ln1_h, C), w.qkvw,
                      s.full_a, s.full_b, N, C, 3 * Cl);
  k::layernorm_backward(s.dres, r.ln1w, r.ln1b, s.dbuf_c, x, w.ln1w, a.ln1_mean, a.ln1_rstd, n, C);
  r.done(/*mlp_bias=*/c.moe == nullptr);
}

// At T = 1 the row-parallel biases' gradients are left to the weight pass (they come with
// the weights' products there); at T > 1 the input pass takes them with the other replicated
// gradients, from this rank's rows, before dres is gathered.
void block_backward_input(const BlockCtx& c, const Block& w, const Block& g, const LayerActs& a,
                          const float* x, const BlockStash& st) {
  STRATA_CHECK(!c.moe, "the split backward runs dense blocks only");
  TensorComm& tc = c.tc;
  const TpDims& d = c.d;
  const TpScratch& s = c.s;
  const int64_t N = d.N, n = d.n;
  const int C = d.C, Cl = d.Cl;
  const bool h = a.ln1_h != nullptr;
  const bool bias_here = tc.size() > 1;
  Replicated r(tc, s.rep, g, C);
  tn::row_backward_input(tc, h, st.dfch, bias_here ? r.fcprojb : nullptr, s.dres, w.fcprojw, st.d3,
                         N, 4 * Cl, C);
  gelu_grad(st.dfch, a, N * 4 * Cl);
  tn::column_backward_input(tc, h, s.dbuf_c, st.dfch, w.fcw, s.full_b, N, C, 4 * Cl);
  k::layernorm_backward(s.dres, r.ln2w, r.ln2b, s.dbuf_c, a.res2, w.ln2w, a.ln2_mean, a.ln2_rstd,
                        n, C);
  float* datty = s.dbuf_4c;  // (N, Cl)
  tn::row_backward_input(tc, h, datty, bias_here ? r.projb : nullptr, s.dres, w.projw, st.d2, N,
                         Cl, C);
  attention_bwd(c, st.dqkv, datty, a, h);
  tn::column_backward_input(tc, h, s.dbuf_c, st.dqkv, w.qkvw, s.full_b, N, C, 3 * Cl);
  k::layernorm_backward(s.dres, r.ln1w, r.ln1b, s.dbuf_c, x, w.ln1w, a.ln1_mean, a.ln1_rstd, n, C);
  r.done(/*mlp_bias=*/true);
}

void block_backward_weight(const BlockCtx& c, const Block& g, const LayerActs& a,
                           const BlockStash& st) {
  TensorComm& tc = c.tc;
  const TpDims& d = c.d;
  const int64_t N = d.N;
  const int C = d.C, Cl = d.Cl;
  const bool h = a.ln1_h != nullptr;
  const bool bias_here = tc.size() == 1;
  tn::linear_backward_weight(h, g.fcprojw, bias_here ? g.fcprojb : nullptr, st.d3,
                             tn::act(a.fch_gelu, a.gelu_h, 4 * Cl), N, 4 * Cl, C);
  tn::column_backward_weight(tc, h, g.fcw, g.fcb, st.dfch, tn::act(a.ln2, a.ln2_h, C), c.s.full_a,
                             c.s.full_b, N, C, 4 * Cl);
  tn::linear_backward_weight(h, g.projw, bias_here ? g.projb : nullptr, st.d2,
                             tn::act(a.atty, a.atty_h, Cl), N, Cl, C);
  tn::column_backward_weight(tc, h, g.qkvw, g.qkvb, st.dqkv, tn::act(a.ln1, a.ln1_h, C),
                             c.s.full_a, c.s.full_b, N, C, 3 * Cl);
}

void moe_block_forward(MoEBlock& b, const float* x, const uint16_t* xh, float* out, int64_t N,
                       bool bf16) {
  b.moe->forward(b.index, x, xh, out, N, b.w, bf16, b.ids, b.slot);
}

void moe_block_backward(MoEBlock& b, const float* dout, float* dx, bool bf16) {
  b.moe->backward(b.index, dout, dx, b.w, b.g, bf16, b.scale, b.slot);
}

void final_norm_backward(TensorComm& tc, const TpDims& d, const TpScratch& s, const float* w,
                         float* gw, float* gb, const float* x, const float* mean,
                         const float* rstd) {
  const int C = d.C;
  std::memset(s.dres, 0, sizeof(float) * size_t(d.n * C));
  if (tc.size() == 1) {
    k::layernorm_backward(s.dres, gw, gb, s.dbuf_c, x, w, mean, rstd, d.n, C);
    return;
  }
  float* rep = s.rep;
  std::memset(rep, 0, sizeof(float) * 2 * size_t(C));
  k::layernorm_backward(s.dres, rep, rep + C, s.dbuf_c, x, w, mean, rstd, d.n, C);
  if (tc.sequence_parallel()) tc.all_reduce_sum(rep, 2 * C);
  for (int i = 0; i < C; ++i) gw[i] += rep[i];
  for (int i = 0; i < C; ++i) gb[i] += rep[C + i];
}

}  // namespace strata::model
