// GPT forward and backward on one tensor-parallel rank (model/shard.h says what it holds).
//
// Terms: T tp ranks, N = B·seq rows of the micro-batch, n = tc.local_rows(N) rows of the
// residual region (N/T with sequence parallelism, else N), C width, Cl = C/T, NH/T local
// heads, Vr local vocabulary rows. One block, Megatron-LM with sequence parallelism
// (f, g: model/tensor/collectives.h):
//
//   x (n,C) -ln1-> (n,C) -f-> qkv column (N,3Cl) -attention on NH/T heads-> (N,Cl)
//           -proj row-> g -> + x + b -> res2 (n,C) -ln2-> -f-> fc column (N,4Cl) -gelu->
//           -fc proj row-> g -> + res2 + b -> res3 (n,C)
//
// Embedding and loss are vocab-parallel (model/tensor/vocab.h): the logits exist only as
// (N, Vr) on each rank. The backward re-gathers the norm outputs instead of keeping the
// gathered (N, C) copies, so the activations a rank keeps per layer are all 1/T of the
// one-process ones (plus two (N, C) scratch tensors shared by all layers).
//
// Replicated parameters (norms, wpe, row-parallel biases) see only this rank's n rows under
// SP: their gradients for the micro-batch are computed into a scratch, all-reduced over tp,
// then added (+=) to the unit's gradients, so accumulation over micro-batches stays exact.
// Without SP every rank computes them whole and identical, and nothing is reduced.
// Communication per micro-batch and layer (SP): forward 2 all-gathers + 2 reduce-scatters
// of N·C floats; backward 4 all-gathers + 2 reduce-scatters of N·C + 6C all-reduced.
// Without SP: 2 all-reduces of N·C forward and 2 backward (model/tensor/tp_cost.h).
// Precision: under bf16 compute (im.bf16) the GEMMs and attention products run in bf16 and
// the norm outputs, qkv, attention output and GELU input and output are kept in bf16
// (ln1_h, ln2_h, qkv_h, atty_h, fch_h, gelu_h, lnf_h), as in gpt.cc;
// the collectives stay fp32 (model/tensor/linear.h widens bf16 rows before a gather).
// An MoE block (docs/moe.md) replaces the MLP half: its input is the gathered ln2 output
// (N, C), every tp rank routes alike with the whole router and runs its 4C/T hidden units of
// each expert; the partial outputs (N, C) are reduce-scattered (SP) or all-reduced like the
// MLP's c_proj output. Backward gathers d res3 (N, C), all-reduces the gates' gradients
// (N·K, inside model/expert/moe.cc) and reduce-scatters (all-reduces) the partial dx.
#include <cstring>

#include "core/phase.h"
#include "kernels/kernels.h"
#include "model/context/gpt_cp.h"
#include "model/gpt_impl.h"
#include "model/shard.h"
#include "model/tensor/block.h"
#include "model/tensor/linear.h"
#include "model/tensor/vocab.h"

namespace strata::model {

namespace k = strata::kernels;
namespace tn = strata::model::tensor;

namespace {

using Dims = TpDims;

Dims dims_of(const GPT::Impl& im, const GPTConfig& cfg, const TensorComm& tc, TpShard s) {
  return tp_dims(cfg, tc, s, im.B, im.T);
}

TpScratch scratch_of(GPT::Impl& im) {
  return {im.dres, im.dbuf_c, im.dbuf_4c, im.dqkv, im.full_a, im.full_b, im.rep_grads, im.cp};
}

// dst (n) += src (n): a replicated gradient after its tp reduction.
void add_into(float* dst, const float* src, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] += src[i];
}

// The replicated gradients in `rep` (n floats) of this micro-batch: summed over tp ranks
// under SP (each saw its own rows), whole already without it.
void reduce_replicated(TensorComm& tc, float* rep, int64_t n) {
  if (tc.sequence_parallel()) tc.all_reduce_sum(rep, n);
}

// The MoE half of a block: a.ln2 (n, C) -> a.res3 (n, C) = a.res2 + the experts' output.
// full, stage (N, C) scratch.
void tp_moe_forward(TensorComm& tc, const TpDims& d, MoEBlock& moe, LayerActs& a, float* full,
                    float* stage) {
  const int64_t N = d.N, n = d.n;
  const int C = d.C;
  const bool h = a.ln1_h != nullptr;  // bf16 compute
  const tn::Mat x = tn::gather_input(tc, tn::act(a.ln2, a.ln2_h, C), full, stage, N, C);
  float* partial = stage;  // free once gathered
  std::memset(partial, 0, sizeof(float) * N * C);
  const bool xh = x.t == DType::bf16;
  moe_block_forward(moe, xh ? nullptr : static_cast<const float*>(x.p),
                    xh ? static_cast<const uint16_t*>(x.p) : nullptr, partial, N, h);
  tc.reduce_rows(partial, a.res3, N, C);  // g forward
  for (int64_t i = 0; i < n * C; ++i) a.res3[i] += a.res2[i];
}

// s.dres (n, C) d loss / d res3 -> s.dbuf_c (n, C) d loss / d ln2 (the MoE half's input).
void tp_moe_backward(TensorComm& tc, const TpDims& d, MoEBlock& moe, const TpScratch& s, bool h) {
  const float* dout = tc.gather_rows(s.dres, s.full_a, d.N, d.C);  // g backward
  moe_block_backward(moe, dout, s.full_b, h);                       // this rank's partial dx
  tc.reduce_rows(s.full_b, s.dbuf_c, d.N, d.C);                      // f backward
}

}  // namespace

TpDims tp_dims(const GPTConfig& cfg, const TensorComm& tc, TpShard s, int B, int T) {
  TpDims d;
  d.B = B;
  d.T = T;
  d.N = int64_t(B) * T;
  d.n = tc.local_rows(d.N);
  d.C = cfg.dim;
  d.Cl = cfg.dim / s.size;
  d.NHl = cfg.heads / s.size;
  const VocabSlice vs = vocab_slice(cfg.padded_vocab, s);
  d.v0 = vs.begin;
  d.Vr = vs.size();
  STRATA_CHECK(!tc.sequence_parallel() || d.N % s.size == 0, "sequence parallelism over ", s.size,
               " ranks needs rows divisible by ", s.size, " (batch ", B, " x seq ", T, ")");
  return d;
}

// full, stage: the (N, C) scratch tensors (gathered input; bf16 rows widened under SP);
// out (N, 4Cl): the fp32 matmul outputs that bf16 compute stores rounded.
void tp_block_forward(TensorComm& tc, const TpDims& d, const Block& w, LayerActs& a,
                      const float* x, float* full, float* stage, float* out, ContextComm* cp,
                      int layer, MoEBlock* moe) {
  const int64_t N = d.N, n = d.n;
  const int C = d.C, Cl = d.Cl;
  const bool h = a.ln1_h != nullptr;  // bf16 compute
  layernorm_out(a.ln1, a.ln1_h, a.ln1_mean, a.ln1_rstd, x, w.ln1w, w.ln1b, n, C);
  tn::column_forward(tc, h, gemm_out(a.qkv, out), tn::act(a.ln1, a.ln1_h, C), w.qkvw, w.qkvb,
                     full, stage, N, C, 3 * Cl);
  store_qkv(a, out, N * 3 * Cl);
  if (cp)  // context parallel: qkv and the attention output stay fp32 (gpt_impl.h's carve)
    attention_forward(cp, layer, a.atty, a.att_lse, a.qkv, d.B, d.T, Cl, d.NHl, h);
  else
    attention_out(a, d.B, d.T, Cl, d.NHl);
  tn::row_forward(tc, h, a.res2, tn::act(a.atty, a.atty_h, Cl), w.projw, full, N, Cl, C);
  tn::add_residual_bias(a.res2, x, w.projb, n, C);
  layernorm_out(a.ln2, a.ln2_h, a.ln2_mean, a.ln2_rstd, a.res2, w.ln2w, w.ln2b, n, C);
  if (moe) return tp_moe_forward(tc, d, *moe, a, full, stage);
  tn::column_forward(tc, h, gemm_out(a.fch, out), tn::act(a.ln2, a.ln2_h, C), w.fcw, w.fcb, full,
                     stage, N, C, 4 * Cl);
  gelu_out(a, gemm_out(a.fch, out), N * 4 * Cl);
  tn::row_forward(tc, h, a.res3, tn::act(a.fch_gelu, a.gelu_h, 4 * Cl), w.fcprojw, full, N, 4 * Cl,
                  C);
  tn::add_residual_bias(a.res3, a.res2, w.fcprojb, n, C);
}

// dres (n, C): d loss / d res3 on entry, d loss / d x on exit.
void tp_block_backward(TensorComm& tc, const TpDims& d, const TpScratch& im, const Block& w,
                       const Block& g, const LayerActs& a, const float* x, int layer,
                       MoEBlock* moe) {
  const int64_t N = d.N, n = d.n;
  const int C = d.C, Cl = d.Cl;
  const bool h = a.ln1_h != nullptr;  // bf16 compute
  // Replicated gradients of this micro-batch: ln1 w, b | proj b | ln2 w, b | fc proj b.
  float* rep = im.rep;
  std::memset(rep, 0, sizeof(float) * 6 * C);
  float* dgelu = im.dbuf_4c;  // (N, 4Cl)
  if (moe) {  // rep + 5C (the MLP's c_proj bias) stays 0: each expert's is whole already
    tp_moe_backward(tc, d, *moe, im, h);
  } else {
    tn::row_backward(tc, h, dgelu, g.fcprojw, rep + 5 * C, im.dres,
                     tn::act(a.fch_gelu, a.gelu_h, 4 * Cl), w.fcprojw, im.full_a, N, 4 * Cl, C);
    gelu_grad(dgelu, a, N * 4 * Cl);
    tn::column_backward(tc, h, im.dbuf_c, g.fcw, g.fcb, dgelu, tn::act(a.ln2, a.ln2_h, C), w.fcw,
                        im.full_a, im.full_b, N, C, 4 * Cl);
  }
  k::layernorm_backward(im.dres, rep + 3 * C, rep + 4 * C, im.dbuf_c, a.res2, w.ln2w, a.ln2_mean,
                        a.ln2_rstd, n, C);
  float* datty = im.dbuf_4c;  // (N, Cl)
  tn::row_backward(tc, h, datty, g.projw, rep + 2 * C, im.dres, tn::act(a.atty, a.atty_h, Cl),
                   w.projw, im.full_a, N, Cl, C);
  if (im.cp)
    attention_backward(im.cp, layer, im.dqkv, datty, a.qkv, a.atty, a.att_lse, d.B, d.T, Cl, d.NHl,
                       h);
  else
    attention_grad(im.dqkv, datty, a, d.B, d.T, Cl, d.NHl);
  tn::column_backward(tc, h, im.dbuf_c, g.qkvw, g.qkvb, im.dqkv, tn::act(a.ln1, a.ln1_h, C),
                      w.qkvw, im.full_a, im.full_b, N, C, 3 * Cl);
  k::layernorm_backward(im.dres, rep, rep + C, im.dbuf_c, x, w.ln1w, a.ln1_mean, a.ln1_rstd, n, C);
  tp_add_replicated(tc, rep, g, C, /*mlp_bias=*/moe == nullptr);
}

void tp_add_replicated(TensorComm& tc, float* rep, const Block& g, int C, bool mlp_bias) {
  reduce_replicated(tc, rep, 6 * C);
  add_into(g.ln1w, rep, C);
  add_into(g.ln1b, rep + C, C);
  add_into(g.projb, rep + 2 * C, C);
  add_into(g.ln2w, rep + 3 * C, C);
  add_into(g.ln2b, rep + 4 * C, C);
  if (mlp_bias) add_into(g.fcprojb, rep + 5 * C, C);
}

void tp_final_norm_backward(TensorComm& tc, const TpDims& d, const TpScratch& s, const float* w,
                            float* gw, float* gb, const float* x, const float* mean,
                            const float* rstd) {
  const int C = d.C;
  std::memset(s.dres, 0, sizeof(float) * d.n * C);
  float* rep = s.rep;
  std::memset(rep, 0, sizeof(float) * 2 * C);
  k::layernorm_backward(s.dres, rep, rep + C, s.dbuf_c, x, w, mean, rstd, d.n, C);
  reduce_replicated(tc, rep, 2 * C);
  add_into(gw, rep, C);
  add_into(gb, rep + C, C);
}

const float* tp_embedding_backward(TensorComm& tc, const TpDims& d, const TpScratch& s,
                                   float* dwte, const int32_t* tokens) {
  float* dwpe = s.rep;  // (seq, C) of this micro-batch
  std::memset(dwpe, 0, sizeof(float) * d.T * d.C);
  tn::embedding_backward(tc, dwte, dwpe, s.dres, tokens, d.v0, d.Vr, s.full_a, d.B, d.T, d.C);
  reduce_replicated(tc, dwpe, int64_t(d.T) * d.C);
  return dwpe;
}

namespace {

// Embedding, blocks and final norm: fills im.lnf (n, C). Forward hooks of units 0 .. L+1.
void trunk_forward(GPT::Impl& im, const GPTConfig& cfg, TensorComm& tc, const Dims& d) {
  const int L = cfg.layers;
  const bool any = d.N > 0;  // the same on every tp rank (they share the micro-batch)
  PhaseState& phase = current_phase();
  phase.set_layer(-1);
  im.before(0, Pass::forward);
  if (any) {
    UnitSpan s("forward", "embed");
    float* p0 = checked(im.unit_params[0], 0, "parameter");
    const float* wpe = p0 + im.view_rel[1];
    if (im.cp) wpe = cp_local_wpe(im.rep_grads, *im.cp, wpe, d.T, d.C);  // local positions
    tn::embedding_forward(tc, im.encoded, im.tokens, p0 + im.view_rel[0], d.v0, d.Vr, wpe,
                          im.full_a, d.B, d.T, d.C);
  }
  im.after(0, Pass::forward);
  for (int l = 0; l < L; ++l) {
    phase.set_layer(l);
    im.before(l + 1, Pass::forward);
    std::unique_ptr<MoEBlock> moe = moe_block(im, cfg, l, false, 0.0f);
    if (any) {
      UnitSpan s("forward", "L", l);
      const Block w = block_views_at(im.unit_params[l + 1], im.view_rel, im.view0[l], l);
      tp_block_forward(tc, d, w, im.layers[l], l == 0 ? im.encoded : im.layers[l - 1].res3,
                    im.full_a, im.full_b, im.dbuf_4c, im.cp, l, moe.get());
    } else if (moe) {  // no tokens here, but this rank's experts may get some
      moe_block_forward(*moe, nullptr, nullptr, nullptr, 0, im.bf16);
    }
    moe_block_done(im, moe.get(), Pass::forward);
    im.after(l + 1, Pass::forward);
  }
  phase.set_layer(-1);
  im.before(L + 1, Pass::forward);
  if (any) {
    UnitSpan s("forward", "ln_f");
    float* pf = checked(im.unit_params[L + 1], L + 1, "parameter");
    const int64_t* r = im.view_rel.data() + im.view0[size_t(L)];
    layernorm_out(im.lnf, im.lnf_h, im.lnf_mean, im.lnf_rstd,
                  L > 0 ? im.layers[L - 1].res3 : im.encoded, pf + r[0], pf + r[1], d.n, d.C);
  }
  im.after(L + 1, Pass::forward);
}

// Local logits (N, Vr) = f(lnf) @ wte_r^T.
void local_logits(GPT::Impl& im, TensorComm& tc, const Dims& d) {
  const float* wte = checked(im.unit_params[0], 0, "parameter") + im.view_rel[0];
  tn::column_forward(tc, im.bf16, im.logits, tn::act(im.lnf, im.lnf_h, d.C), wte, nullptr,
                     im.full_a, im.full_b, d.N, d.C, int(d.Vr));
}

}  // namespace

double tp_forward(GPT::Impl& im, const GPTConfig& cfg, TensorComm& tc, TpShard s) {
  const Dims d = dims_of(im, cfg, tc, s);
  trunk_forward(im, cfg, tc, d);
  double loss = 0.0;
  im.before(0, Pass::forward);
  if (d.N > 0) {
    UnitSpan span("forward", "logits");
    local_logits(im, tc, d);
    loss = tn::crossentropy_forward(tc, im.losses, im.ce_lse, im.logits, im.targets,
                                    im.has_weights ? im.weights : nullptr, im.ce_stats, d.N, d.v0,
                                    d.Vr, cfg.vocab);
  }
  im.after(0, Pass::forward);
  return loss;
}

void tp_backward(GPT::Impl& im, const GPTConfig& cfg, TensorComm& tc, TpShard s, float scale) {
  const Dims d = dims_of(im, cfg, tc, s);
  const int L = cfg.layers, C = d.C;
  const std::vector<int64_t>& rel = im.view_rel;
  const bool any = d.N > 0;
  im.before(0, Pass::backward);
  if (any) {
    UnitSpan span("backward", "logits");
    const float* wte = checked(im.unit_params[0], 0, "parameter") + rel[0];
    float* dwte = checked(im.unit_grads[0], 0, "gradient") + rel[0];
    tn::crossentropy_backward(im.logits, im.ce_lse, im.targets,
                              im.has_weights ? im.weights : nullptr, scale, d.N, d.v0, d.Vr,
                              cfg.vocab);
    tn::column_backward(tc, im.bf16, im.dbuf_c, dwte, nullptr, im.logits,
                        tn::act(im.lnf, im.lnf_h, C), wte, im.full_a, im.full_b, d.N, C,
                        int(d.Vr));
  }
  im.before(L + 1, Pass::backward);
  if (any) {
    UnitSpan span("backward", "ln_f");
    const float* pf = checked(im.unit_params[L + 1], L + 1, "parameter");
    float* gf = checked(im.unit_grads[L + 1], L + 1, "gradient");
    const int64_t* r = rel.data() + im.view0[size_t(L)];
    tp_final_norm_backward(tc, d, scratch_of(im), pf + r[0], gf + r[0], gf + r[1],
                           L > 0 ? im.layers[L - 1].res3 : im.encoded, im.lnf_mean, im.lnf_rstd);
  }
  im.after(L + 1, Pass::backward);
  PhaseState& ph = current_phase();
  for (int l = L - 1; l >= 0; --l) {
    ph.set_layer(l);
    im.before(l + 1, Pass::backward);
    std::unique_ptr<MoEBlock> moe = moe_block(im, cfg, l, true, scale);
    if (any) {
      UnitSpan span("backward", "L", l);
      const int first = im.view0[size_t(l)];
      const Block w = block_views_at(im.unit_params[l + 1], rel, first, l);
      const Block g = block_views_at(checked(im.unit_grads[l + 1], l + 1, "gradient"), rel, first, l);
      tp_block_backward(tc, d, scratch_of(im), w, g, im.layers[l],
                        l == 0 ? im.encoded : im.layers[l - 1].res3, l, moe.get());
    } else if (moe) {  // this rank's experts may have received tokens
      moe_block_backward(*moe, nullptr, nullptr, im.bf16);
    }
    moe_block_done(im, moe.get(), Pass::backward);
    im.after(l + 1, Pass::backward);
  }
  ph.set_layer(-1);
  if (any) {
    UnitSpan span("backward", "embed");
    float* g0 = checked(im.unit_grads[0], 0, "gradient");
    const float* dwpe = tp_embedding_backward(tc, d, scratch_of(im), g0 + rel[0], im.tokens);
    if (im.cp)  // rows of this rank's positions
      cp_add_wpe_grad(g0 + rel[1], *im.cp, dwpe, d.T, C);
    else
      add_into(g0 + rel[1], dwpe, int64_t(d.T) * C);
  }
  im.after(0, Pass::backward);
}

const float* tp_logits(GPT::Impl& im, const GPTConfig& cfg, TensorComm& tc, TpShard s) {
  const Dims d = dims_of(im, cfg, tc, s);
  const bool training = im.moe && im.moe->training();
  if (im.moe) im.moe->set_training(false);  // inference: no router jitter
  trunk_forward(im, cfg, tc, d);
  if (im.moe) im.moe->set_training(training);
  im.before(0, Pass::forward);
  const int64_t Vp = cfg.padded_vocab;
  if (d.N > 0) {
    UnitSpan span("forward", "logits");
    local_logits(im, tc, d);
  }
  im.after(0, Pass::forward);
  // Inference only (sampling): every rank's (N, Vr) block, then columns in vocabulary order.
  const size_t need = sizeof(float) * size_t(2 * d.N * Vp);
  if (im.logits_full.bytes() < need) im.logits_full = Buffer(MemCategory::activations, need);
  float* blocks = im.logits_full.as<float>();
  float* out = blocks + d.N * Vp;
  std::vector<size_t> counts(size_t(s.size));
  for (int r = 0; r < s.size; ++r)
    counts[size_t(r)] = size_t(d.N * vocab_slice(Vp, {s.size, r}).size());
  if (d.N > 0) tc.group().all_gather_v_async(im.logits, blocks, counts, DType::f32)->wait();
  const float* src = blocks;
  for (int r = 0; r < s.size; ++r) {
    const VocabSlice vs = vocab_slice(Vp, {s.size, r});
    for (int64_t row = 0; row < d.N; ++row)
      std::memcpy(out + row * Vp + vs.begin, src + row * vs.size(), sizeof(float) * vs.size());
    src += d.N * vs.size();
  }
  return out;
}

}  // namespace strata::model
