#include "model/tensor/block_split.h"

#include <cstring>

#include "core/error.h"
#include "kernels/kernels.h"
#include "model/context/gpt_cp.h"
#include "model/tensor/linear.h"

namespace strata::model {

namespace k = strata::kernels;
namespace tn = strata::model::tensor;

void tp_block_backward_input(TensorComm& tc, const TpDims& d, const TpScratch& im, const Block& w,
                             const Block& g, const LayerActs& a, const float* x,
                             const BlockStash& st, int layer) {
  const int64_t N = d.N, n = d.n;
  const int C = d.C, Cl = d.Cl;
  const bool h = a.ln1_h != nullptr;  // bf16 compute
  float* rep = im.rep;  // ln1 w, b | proj b | ln2 w, b | fc proj b of this micro-batch
  std::memset(rep, 0, sizeof(float) * 6 * C);
  tn::row_backward_input(tc, h, st.dfch, rep + 5 * C, im.dres, w.fcprojw, st.d3, N, 4 * Cl, C);
  gelu_grad(st.dfch, a, N * 4 * Cl);
  tn::column_backward_input(tc, h, im.dbuf_c, st.dfch, w.fcw, im.full_b, N, C, 4 * Cl);
  k::layernorm_backward(im.dres, rep + 3 * C, rep + 4 * C, im.dbuf_c, a.res2, w.ln2w, a.ln2_mean,
                        a.ln2_rstd, n, C);
  float* datty = im.dbuf_4c;  // (N, Cl)
  tn::row_backward_input(tc, h, datty, rep + 2 * C, im.dres, w.projw, st.d2, N, Cl, C);
  if (im.cp)  // context parallel: over the cp group (layer is its key)
    attention_backward(im.cp, layer, st.dqkv, datty, a.qkv, a.atty, a.att_lse, d.B, d.T, Cl,
                       d.NHl, h);
  else
    attention_grad(st.dqkv, datty, a, d.B, d.T, Cl, d.NHl);
  tn::column_backward_input(tc, h, im.dbuf_c, st.dqkv, w.qkvw, im.full_b, N, C, 3 * Cl);
  k::layernorm_backward(im.dres, rep, rep + C, im.dbuf_c, x, w.ln1w, a.ln1_mean, a.ln1_rstd, n, C);
  tp_add_replicated(tc, rep, g, C);
}

void tp_block_backward_weight(TensorComm& tc, const TpDims& d, const TpScratch& im, const Block& g,
                              const LayerActs& a, const BlockStash& st) {
  const int64_t N = d.N;
  const int C = d.C, Cl = d.Cl;
  const bool h = a.ln1_h != nullptr;
  tn::linear_backward_weight(h, g.fcprojw, nullptr, st.d3, tn::act(a.fch_gelu, a.gelu_h, 4 * Cl),
                             N, 4 * Cl, C);
  tn::column_backward_weight(tc, h, g.fcw, g.fcb, st.dfch, tn::act(a.ln2, a.ln2_h, C), im.full_a,
                             im.full_b, N, C, 4 * Cl);
  tn::linear_backward_weight(h, g.projw, nullptr, st.d2, tn::act(a.atty, a.atty_h, Cl), N, Cl, C);
  tn::column_backward_weight(tc, h, g.qkvw, g.qkvb, st.dqkv, tn::act(a.ln1, a.ln1_h, C), im.full_a,
                             im.full_b, N, C, 3 * Cl);
}

}  // namespace strata::model
