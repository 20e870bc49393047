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

int block_view_index(bool llama, int i) {
  static constexpr int kLlama[12] = {0, -1, 1, -1, 4, -1, 5, -1, 6, -1, 8, -1};
  return llama ? kLlama[i] : i;
}

void carve_layer(Carver& c, LayerActs& l, const BlockArch& m, const ActShape& a, bool bf16,
                 bool attn_f32, BlockKeep keep) {
  const LocalWidths w(m, a.T);
  const int64_t C = m.C, N = a.N, n = a.n, Cl = w.Cl;
  const bool f32 = !bf16, ln = !m.llama;  // LayerNorm keeps its mean, RMSNorm none
  l = LayerActs{};
  if (keeps_output_only(keep)) {
    l.res3 = c.take_if(n * C, keep == BlockKeep::output);
    l.res3_h = c.take_bf16(n * C, keep == BlockKeep::output_bf16);
    return;
  }
  // Selective recomputation's buffers: the norms' outputs and the fp32 GELU/SwiGLU output.
  const bool norms = keep != BlockKeep::selective;
  const bool rest = keep != BlockKeep::dropped;  // everything else
  l.ln1 = c.take_if(n * C, f32 && norms);
  l.ln1_h = c.take_bf16(n * C, bf16 && norms);
  if (rest) {
    l.ln1_mean = c.take_if(n, ln);
    l.ln1_rstd = c.take(n);
    l.qkv = c.take_if(N * w.qkv, attn_f32);
    l.qkv_h = c.take_bf16(N * w.qkv, !attn_f32);
    l.atty = c.take_if(N * Cl, attn_f32);
    l.atty_h = c.take_bf16(N * Cl, !attn_f32);
    l.att_lse = c.take(N * w.heads);
    l.res2 = c.take(n * C);
  }
  l.ln2 = c.take_if(n * C, f32 && norms);
  l.ln2_h = c.take_bf16(n * C, bf16 && norms);
  if (rest) {
    l.ln2_mean = c.take_if(n, ln);
    l.ln2_rstd = c.take(n);
    l.fch = c.take_if(N * w.fc, f32);
    l.fch_h = c.take_bf16(N * w.fc, bf16);
  }
  l.fch_gelu = c.take_if(N * w.act, f32 && norms);
  if (rest) l.gelu_h = c.take_bf16(N * w.act, bf16);
  if (keep == BlockKeep::all || keep == BlockKeep::selective) l.res3 = c.take(n * C);
}

LayerActs effective_acts(const LayerActs& kept, const LayerActs& work, BlockKeep keep) {
  if (keep == BlockKeep::all) return kept;
  LayerActs e = work;
  if (keeps_output_only(keep)) {
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

void norm_out(const BlockArch& m, float* f, uint16_t* h, float* mean, float* rstd, const float* x,
              const float* w, const float* b, int64_t N) {
  if (m.llama && h)
    k::rmsnorm_forward(h, rstd, x, w, N, m.C, m.eps);
  else if (m.llama)
    k::rmsnorm_forward(f, rstd, x, w, N, m.C, m.eps);
  else if (h)
    k::layernorm_forward(h, mean, rstd, x, w, b, N, m.C);
  else
    k::layernorm_forward(f, mean, rstd, x, w, b, N, m.C);
}

void norm_backward(const BlockArch& m, float* dx, float* gw, float* gb, const float* dout,
                   const float* x, const float* w, const float* mean, const float* rstd,
                   int64_t N) {
  if (m.llama)
    k::rmsnorm_backward(dx, gw, dout, x, w, rstd, N, m.C);
  else
    k::layernorm_backward(dx, gw, gb, dout, x, w, mean, rstd, N, m.C);
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
                      c.doc_start, d.NKVl);
  else if (a.qkv_h)
    k::attention_forward(a.atty_h, a.att_lse, a.qkv_h, d.attention(), c.doc_start);
  else
    k::attention_forward(a.atty, a.att_lse, a.qkv, d.attention(), false, c.doc_start);
}

// dqkv (N, qkv) written; datt (N, Cl). A Llama block's dq and dk are turned back by RoPE.
void attention_bwd(const BlockCtx& c, float* dqkv, const float* datt, const LayerActs& a,
                   bool h) {
  const TpDims& d = c.d;
  if (c.cp)
    attention_backward(c.cp, c.key, dqkv, datt, a.qkv, a.atty, a.att_lse, d.B, d.T, d.Cl, d.NHl,
                       h, c.doc_start, d.NKVl);
  else if (a.qkv_h)
    k::attention_backward(dqkv, datt, a.qkv_h, a.atty_h, a.att_lse, d.attention(), c.doc_start);
  else
    k::attention_backward(dqkv, datt, a.qkv, a.atty, a.att_lse, d.attention(), false,
                          c.doc_start);
  if (d.m.llama) k::rope_backward(dqkv, c.pos, d.attention(), d.m.rope);
}

// Key/value heads replicated over tp (TensorComm::kv_share > 1). This rank's dk and dv in dqkv
// (N, qkv) hold what its own query heads contributed; summed over the ranks sharing the head
// (into `summed`, N·2hs floats) they are the head's whole gradient. The input pass must see
// each head's gradient once: share_kv_grads leaves it on the head's first rank and zeros it on
// the others (so dx rounds it once under bf16, as one process does); restore_kv_grads then
// gives every sharing rank the whole gradient for the weight pass, so the replicated k and v
// rows get equal gradients.
struct KvColumns {
  int64_t N, q, kv, width;  // rows; q columns before k | v; k | v columns; a row's columns
  explicit KvColumns(const TpDims& d)
      : N(d.N), q(int64_t(d.NHl) * d.m.hs()), kv(2 * int64_t(d.NKVl) * d.m.hs()),
        width(d.w().qkv) {}
  void copy(float* dqkv, const float* packed, bool zero) const {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < N; ++i) {
      float* row = dqkv + i * width + q;
      if (zero)
        std::memset(row, 0, sizeof(float) * size_t(kv));
      else
        std::memcpy(row, packed + i * kv, sizeof(float) * size_t(kv));
    }
  }
};

void share_kv_grads(const BlockCtx& c, float* dqkv, float* summed) {
  const KvColumns k(c.d);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < k.N; ++i)
    std::memcpy(summed + i * k.kv, dqkv + i * k.width + k.q, sizeof(float) * size_t(k.kv));
  c.tc.sum_shared_kv(summed, k.N * k.kv);
  k.copy(dqkv, summed, /*zero=*/c.tc.rank() % c.tc.kv_share() != 0);
}

void restore_kv_grads(const BlockCtx& c, float* dqkv, const float* summed) {
  if (c.tc.rank() % c.tc.kv_share() != 0) KvColumns(c.d).copy(dqkv, summed, false);
}

// The MLP's activation of fc (N rows at gemm_out(a.fch, scratch)): GELU (fp32, or under bf16
// compute its output and the input both stored in bf16, from the fp32 matmul output in one
// pass), or for a Llama block SwiGLU of the (gate | up) rows, the same way.
void mlp_act_out(const TpDims& d, LayerActs& a, const float* fc, int64_t N) {
  const LocalWidths w = d.w();
  if (d.m.llama && a.fch_h)
    k::swiglu_forward_rows(a.gelu_h, a.fch_h, fc, N, int(w.act));
  else if (d.m.llama)
    k::swiglu_forward_rows(a.fch_gelu, fc, N, int(w.act));
  else if (a.fch_h)
    k::gelu_forward(a.gelu_h, a.fch_h, fc, N * w.fc);
  else
    k::gelu_forward(a.fch_gelu, fc, N * w.fc);
}

// Where d loss / d (the MLP's activation) (N, act) goes before mlp_act_grad: GELU's gradient
// is taken in place in dfc; SwiGLU's needs the (N, act) after the (N, fc) of the scratch.
float* act_grad_buf(const TpDims& d, const TpScratch& s, float* dfc) {
  return d.m.llama ? s.dbuf_4c + d.N * d.w().fc : dfc;
}

// dfc (N, fc) = d loss / d fc from dact (act_grad_buf), fc read from whichever store the
// forward kept.
void mlp_act_grad(const TpDims& d, float* dfc, const float* dact, const LayerActs& a) {
  const LocalWidths w = d.w();
  if (d.m.llama && a.fch_h)
    k::swiglu_backward_rows(dfc, a.fch_h, dact, d.N, int(w.act));
  else if (d.m.llama)
    k::swiglu_backward_rows(dfc, a.fch, dact, d.N, int(w.act));
  else if (a.fch_h)
    k::gelu_backward(dfc, a.fch_h, dact, d.N * w.fc);
  else
    k::gelu_backward(dfc, a.fch, dact, d.N * w.fc);
}

// Where one micro-batch's gradients of the replicated views go: at T > 1 the scratch rep
// (the views the block has of ln1 w, b | proj b | ln2 w, b | fc proj b, packed: 6C for GPT-2,
// 2C for Llama's two norm weights), reduced and added by done(); at T = 1 the block's
// gradients themselves.
struct Replicated {
  float *ln1w, *ln1b, *projb, *ln2w, *ln2b, *fcprojb;
  TensorComm& tc;
  float* rep;
  const Block& g;
  int C;
  int count = 0;  // views packed into rep

  Replicated(TensorComm& tc, float* rep, const Block& g, int C)
      : tc(tc), rep(tc.size() > 1 ? rep : nullptr), g(g), C(C) {
    float** mine[6] = {&ln1w, &ln1b, &projb, &ln2w, &ln2b, &fcprojb};
    float* const theirs[6] = {g.ln1w, g.ln1b, g.projb, g.ln2w, g.ln2b, g.fcprojb};
    for (int i = 0; i < 6; ++i)
      *mine[i] = !this->rep || !theirs[i] ? theirs[i] : this->rep + int64_t(count++) * C;
    if (this->rep) std::memset(this->rep, 0, sizeof(float) * size_t(count) * size_t(C));
  }
  // mlp_bias: add fc proj's bias too (an MoE block's experts hold their own, whole on every
  // tp rank, so its slot stays 0 and is not added).
  void done(bool mlp_bias) {
    if (!rep) return;
    if (tc.sequence_parallel()) tc.all_reduce_sum(rep, int64_t(count) * C);  // rows differ
    auto add = [&](float* dst, const float* src) {
      if (dst)
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
  c.moe->seq_rows = d.T;
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

void block_forward_qkv(const BlockCtx& c, const Block& w, LayerActs& a, const float* x) {
  const TpDims& d = c.d;
  const bool h = a.ln1_h != nullptr;  // bf16 compute
  float* out = c.s.dbuf_4c;           // (N, max(fc, qkv)) the fp32 matmul outputs bf16 stores round
  norm_out(d.m, a.ln1, a.ln1_h, a.ln1_mean, a.ln1_rstd, x, w.ln1w, w.ln1b, d.n);
  float* qkv = gemm_out(a.qkv, out);
  tn::column_forward(c.tc, h, qkv, tn::act(a.ln1, a.ln1_h, d.C), w.qkvw, w.qkvb, c.s.full_a,
                     c.s.full_b, d.N, d.C, int(d.w().qkv), c.few_rows);
  if (d.m.llama) k::rope_forward(qkv, c.pos, d.attention(), d.m.rope);
  store_qkv(a, out, d.N * d.w().qkv);
}

void block_forward_rest(const BlockCtx& c, const Block& w, LayerActs& a, const float* x) {
  TensorComm& tc = c.tc;
  const TpDims& d = c.d;
  const LocalWidths lw = d.w();
  const int64_t N = d.N, n = d.n;
  const int C = d.C, Cl = d.Cl;
  const bool h = a.ln1_h != nullptr;  // bf16 compute
  float* out = c.s.dbuf_4c;
  tn::row_forward_residual(tc, h, a.res2, tn::act(a.atty, a.atty_h, Cl), w.projw, w.projb, x,
                           c.s.full_a, N, Cl, C, c.few_rows);
  norm_out(d.m, a.ln2, a.ln2_h, a.ln2_mean, a.ln2_rstd, a.res2, w.ln2w, w.ln2b, n);
  if (c.moe) return moe_forward(c, a, h);
  tn::column_forward(tc, h, gemm_out(a.fch, out), tn::act(a.ln2, a.ln2_h, C), w.fcw, w.fcb,
                     c.s.full_a, c.s.full_b, N, C, int(lw.fc), c.few_rows);
  mlp_act_out(d, a, gemm_out(a.fch, out), N);
  tn::row_forward_residual(tc, h, a.res3, tn::act(a.fch_gelu, a.gelu_h, lw.act), w.fcprojw,
                           w.fcprojb, a.res2, c.s.full_a, N, int(lw.act), C, c.few_rows);
}

void block_forward(const BlockCtx& c, const Block& w, LayerActs& a, const float* x) {
  block_forward_qkv(c, w, a, x);
  attention_fwd(c, a, a.ln1_h != nullptr);
  block_forward_rest(c, w, a, x);
}

void block_recompute(const BlockCtx& c, const Block& w, LayerActs& e, const float* x,
                     BlockKeep keep) {
  if (keeps_output_only(keep)) return block_forward(c, w, e, x);
  if (keep != BlockKeep::selective) return;
  const TpDims& d = c.d;
  norm_out(d.m, e.ln1, e.ln1_h, e.ln1_mean, e.ln1_rstd, x, w.ln1w, w.ln1b, d.n);
  norm_out(d.m, e.ln2, e.ln2_h, e.ln2_mean, e.ln2_rstd, e.res2, w.ln2w, w.ln2b, d.n);
  if (!c.moe && e.fch_gelu) mlp_act_out(d, e, e.fch, d.N);
}

void block_backward(const BlockCtx& c, const Block& w, const Block& g, const LayerActs& a,
                    const float* x) {
  TensorComm& tc = c.tc;
  const TpDims& d = c.d;
  const TpScratch& s = c.s;
  const LocalWidths lw = d.w();
  const int64_t N = d.N, n = d.n;
  const int C = d.C, Cl = d.Cl;
  const bool h = a.ln1_h != nullptr;  // bf16 compute
  Replicated r(tc, s.rep, g, C);
  if (c.moe) {
    moe_backward(c, h);
  } else {
    float* dfc = s.dbuf_4c;  // (N, fc)
    float* dact = act_grad_buf(d, s, dfc);
    tn::row_backward(tc, h, dact, g.fcprojw, r.fcprojb, s.dres,
                     tn::act(a.fch_gelu, a.gelu_h, lw.act), w.fcprojw, s.full_a, N, int(lw.act),
                     C);
    mlp_act_grad(d, dfc, dact, a);
    tn::column_backward(tc, h, s.dbuf_c, g.fcw, g.fcb, dfc, tn::act(a.ln2, a.ln2_h, C), w.fcw,
                        s.full_a, s.full_b, N, C, int(lw.fc));
  }
  norm_backward(d.m, s.dres, r.ln2w, r.ln2b, s.dbuf_c, a.res2, w.ln2w, a.ln2_mean, a.ln2_rstd, n);
  float* datty = s.dbuf_4c;  // (N, Cl)
  tn::row_backward(tc, h, datty, g.projw, r.projb, s.dres, tn::act(a.atty, a.atty_h, Cl), w.projw,
                   s.full_a, N, Cl, C);
  attention_bwd(c, s.dqkv, datty, a, h);
  if (tc.kv_share() > 1) {  // shared key/value heads: the two passes see different dk, dv
    share_kv_grads(c, s.dqkv, datty);
    tn::column_backward_input(tc, h, s.dbuf_c, s.dqkv, w.qkvw, s.full_b, N, C, int(lw.qkv));
    restore_kv_grads(c, s.dqkv, datty);
    tn::column_backward_weight(tc, h, g.qkvw, g.qkvb, s.dqkv, tn::act(a.ln1, a.ln1_h, C),
                               s.full_a, s.full_b, N, C, int(lw.qkv));
  } else {
    tn::column_backward(tc, h, s.dbuf_c, g.qkvw, g.qkvb, s.dqkv, tn::act(a.ln1, a.ln1_h, C),
                        w.qkvw, s.full_a, s.full_b, N, C, int(lw.qkv));
  }
  norm_backward(d.m, s.dres, r.ln1w, r.ln1b, s.dbuf_c, x, w.ln1w, a.ln1_mean, a.ln1_rstd, n);
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
  const LocalWidths lw = d.w();
  const int64_t N = d.N, n = d.n;
  const int C = d.C, Cl = d.Cl;
  const bool h = a.ln1_h != nullptr;
  const bool bias_here = tc.size() > 1;
  Replicated r(tc, s.rep, g, C);
  float* dact = act_grad_buf(d, s, st.dfch);
  tn::row_backward_input(tc, h, dact, bias_here ? r.fcprojb : nullptr, s.dres, w.fcprojw, st.d3,
                         N, int(lw.act), C);
  mlp_act_grad(d, st.dfch, dact, a);
  tn::column_backward_input(tc, h, s.dbuf_c, st.dfch, w.fcw, s.full_b, N, C, int(lw.fc));
  norm_backward(d.m, s.dres, r.ln2w, r.ln2b, s.dbuf_c, a.res2, w.ln2w, a.ln2_mean, a.ln2_rstd, n);
  float* datty = s.dbuf_4c;  // (N, Cl)
  tn::row_backward_input(tc, h, datty, bias_here ? r.projb : nullptr, s.dres, w.projw, st.d2, N,
                         Cl, C);
  attention_bwd(c, st.dqkv, datty, a, h);
  const bool shared_kv = tc.kv_share() > 1;
  if (shared_kv) share_kv_grads(c, st.dqkv, datty);
  tn::column_backward_input(tc, h, s.dbuf_c, st.dqkv, w.qkvw, s.full_b, N, C, int(lw.qkv));
  if (shared_kv) restore_kv_grads(c, st.dqkv, datty);  // the weight pass's dk, dv
  norm_backward(d.m, s.dres, r.ln1w, r.ln1b, s.dbuf_c, x, w.ln1w, a.ln1_mean, a.ln1_rstd, n);
  r.done(/*mlp_bias=*/true);
}

void block_backward_weight(const BlockCtx& c, const Block& g, const LayerActs& a,
                           const BlockStash& st) {
  TensorComm& tc = c.tc;
  const TpDims& d = c.d;
  const LocalWidths lw = d.w();
  const int64_t N = d.N;
  const int C = d.C, Cl = d.Cl;
  const bool h = a.ln1_h != nullptr;
  const bool bias_here = tc.size() == 1;
  tn::linear_backward_weight(h, g.fcprojw, bias_here ? g.fcprojb : nullptr, st.d3,
                             tn::act(a.fch_gelu, a.gelu_h, lw.act), N, int(lw.act), C);
  tn::column_backward_weight(tc, h, g.fcw, g.fcb, st.dfch, tn::act(a.ln2, a.ln2_h, C), c.s.full_a,
                             c.s.full_b, N, C, int(lw.fc));
  tn::linear_backward_weight(h, g.projw, bias_here ? g.projb : nullptr, st.d2,
                             tn::act(a.atty, a.atty_h, Cl), N, Cl, C);
  tn::column_backward_weight(tc, h, g.qkvw, g.qkvb, st.dqkv, tn::act(a.ln1, a.ln1_h, C),
                             c.s.full_a, c.s.full_b, N, C, int(lw.qkv));
}

void moe_block_forward(MoEBlock& b, const float* x, const uint16_t* xh, float* out, int64_t N,
                       bool bf16) {
  b.moe->forward(b.index, x, xh, out, N, b.w, bf16, b.ids, b.slot, b.seq_rows);
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
    norm_backward(d.m, s.dres, gw, gb, s.dbuf_c, x, w, mean, rstd, d.n);
    return;
  }
  float* rep = s.rep;  // w | b (GPT-2) or w (RMSNorm)
  const int views = gb ? 2 : 1;
  std::memset(rep, 0, sizeof(float) * size_t(views) * size_t(C));
  norm_backward(d.m, s.dres, rep, gb ? rep + C : nullptr, s.dbuf_c, x, w, mean, rstd, d.n);
  if (tc.sequence_parallel()) tc.all_reduce_sum(rep, int64_t(views) * C);
  for (int i = 0; i < C; ++i) gw[i] += rep[i];
  for (int i = 0; gb && i < C; ++i) gb[i] += rep[C + i];
}

}  // namespace strata::model
