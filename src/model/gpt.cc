// GPT forward and backward over the flat parameter and gradient buffers.
//
// Terms: B batch, T time, C channels, NH heads, Vp padded vocabulary, N = B*T rows.
// Every matmul folds (B, T) into N rows so BLAS sees one large GEMM per layer and pass.
// Residual adds are fused into the output projections (out = x + y @ W^T + b), so the
// residual stream's gradient (dres) flows through unchanged and the layer norms' input
// gradients accumulate into it.
// Activations for (max_batch, seq) are allocated once; a call with smaller (B, T) uses the
// first N rows of each. Per block and row we keep ln1, qkv (3C), attention output, res2,
// ln2, fc (4C), gelu (4C), res3 plus norm statistics and the attention log-sum-exp:
// 16C + 2*2 + NH floats per row and layer. Under bf16 compute ln1, ln2 and gelu (6C), and
// the final ln_f, are stored in bf16: they are read only as matmul inputs, which round
// them to bf16 anyway, so nothing is lost (LayerNorm and GELU backward read their fp32
// inputs and statistics, not these outputs).
// Cost per token: forward ~2*(12*L*C^2 + C*Vp) GEMM flops + ~2*L*C*T attention flops
// (causal, T/2 keys on average), backward about twice that (plus the attention recompute).
// A tensor-parallel rank (model/shard.h) runs the passes of gpt_tp.cc instead, in the same
// compute precision and with the same bf16 buffers; the table, initialisation, units and
// hooks here serve both.
#include "model/gpt.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "core/phase.h"
#include "core/rng.h"
#include "core/trace.h"
#include "kernels/kernels.h"
#include "model/gpt_impl.h"
#include "model/shard.h"
#include "model/tensor/collectives.h"
#include "model/tensor/linear.h"

namespace strata::model {

namespace k = strata::kernels;

using tensor::act;
using tensor::linear_backward;
using tensor::linear_forward;

GPT::GPT(const GPTConfig& cfg, int max_batch, bool allocate_state, TensorComm* tp, DType compute)
    : cfg_(cfg), tp_(tp), max_batch_(max_batch), compute_(compute), impl_(new Impl) {
  cfg_.validate();
  STRATA_CHECK(compute == DType::f32 || compute == DType::bf16, "model compute dtype ",
               dtype_name(compute), " is neither float nor bfloat16");
  STRATA_CHECK(max_batch >= 0, "max batch must be >= 0 (got ", max_batch, ")");
  if (tp_ && tp_->size() > 1) {
    shard_ = {tp_->size(), tp_->rank()};
  } else {
    tp_ = nullptr;  // one rank: the one-process code path
  }
  impl_->bf16 = compute_ == DType::bf16;
  table_ = build_param_table(cfg_, shard_);
  num_params_ = table_.back().offset + numel(table_.back().shape);
  STRATA_CHECK(num_params_ == local_num_params(cfg_, shard_),
               "internal: parameter table does not cover the flat buffer");
  if (allocate_state) {
    params_ = Buffer(MemCategory::parameters, sizeof(float) * num_params_);
    grads_ = Buffer(MemCategory::gradients, sizeof(float) * num_params_);
  }
  impl_->unit_params.assign(num_units(), nullptr);
  impl_->unit_grads.assign(num_units(), nullptr);
  for (int u = 0; u < num_units(); ++u) {
    if (allocate_state) bind_unit(u, params() + unit_range(u).first, grads() + unit_range(u).first);
  }
  for (const ParamView& v : table_) impl_->view_rel.push_back(v.offset - unit_range(v.unit).first);

  ActShape a;
  a.N = int64_t(max_batch) * cfg_.seq;
  a.T = shard_.size;
  a.n = tp_ && tp_->sequence_parallel() ? (a.N + a.T - 1) / a.T : a.N;
  a.Vr = vocab_slice(cfg_.padded_vocab, shard_).size();
  a.rep = int64_t(cfg_.seq) * cfg_.dim + 6 * int64_t(cfg_.dim);
  const int64_t floats = impl_->carve(nullptr, cfg_, a);
  impl_->acts_buf = Buffer(MemCategory::activations, sizeof(float) * floats);
  impl_->carve(impl_->acts_buf.as<float>(), cfg_, a);
  const int64_t N = a.N;
  impl_->input_buf = Buffer(MemCategory::activations, (2 * sizeof(int32_t) + sizeof(float)) * N);
  impl_->tokens = impl_->input_buf.as<int32_t>();
  impl_->targets = impl_->tokens + N;
  impl_->weights = reinterpret_cast<float*>(impl_->targets + N);
}

GPT::~GPT() { delete impl_; }

std::pair<int64_t, int64_t> GPT::unit_range(int unit) const {
  STRATA_CHECK(unit >= 0 && unit < num_units(), "unit ", unit, " out of range [0, ", num_units(),
               ")");
  // Views are in unit order: unit 0 is views [0, 2), block l views [2 + 12l, 14 + 12l), the
  // final norm the last two.
  const size_t first = unit == 0 ? 0 : 2 + size_t(kViewsPerLayer) * (unit - 1);
  const size_t last = unit == 0 ? 1 : unit <= cfg_.layers ? first + kViewsPerLayer - 1 : first + 1;
  return {table_[first].offset, table_[last].offset + numel(table_[last].shape)};
}

int64_t GPT::activation_bytes() const {
  return int64_t(impl_->acts_buf.bytes() + impl_->input_buf.bytes());
}

TensorLayout GPT::tensor_layout() const { return model::tensor_layout(cfg_, shard_); }

void GPT::set_hooks(UnitHooks hooks) { impl_->hooks = std::move(hooks); }

void GPT::bind_unit(int unit, float* params, float* grads) {
  STRATA_CHECK(unit >= 0 && unit < num_units(), "bind_unit: unit ", unit, " out of range [0, ",
               num_units(), ")");
  impl_->unit_params[unit] = params;
  impl_->unit_grads[unit] = grads;
}

// Global element index of element q of a box (row-major in the box) of a 1-D or 2-D tensor.
static int64_t global_index(const TensorPiece& p, int64_t q) {
  if (p.extents.size() == 1) return p.offsets[0] + q;
  return (p.offsets[0] + q / p.extents[1]) * p.global_shape[1] + p.offsets[1] + q % p.extents[1];
}

void GPT::init(uint64_t seed) {
  const double resid_std = 0.02 / std::sqrt(2.0 * cfg_.layers);
  const std::vector<ShardedView> sharded = build_sharded_table(cfg_, shard_);
  for (size_t i = 0; i < sharded.size(); ++i) {
    const ParamView& v = sharded[i].view;
    float* base = impl_->unit_params[v.unit];
    STRATA_CHECK(base, "init: unit ", v.unit, " has no parameter memory bound");
    base -= unit_range(v.unit).first;  // indexed by flat offset from here on
    const std::string& name = v.name;
    auto ends_with = [&](const char* s) {
      const size_t k = std::strlen(s);
      return name.size() >= k && name.compare(name.size() - k, k, s) == 0;
    };
    const bool ones = ends_with("ln_1.weight") || ends_with("ln_2.weight") || name == "ln_f.weight";
    const float stdv = float(ends_with("c_proj.weight") ? resid_std : 0.02);
    // Rows of wte past the real vocabulary stay zero: no token selects them and their
    // logits are ignored, so they never receive a gradient.
    const int64_t live = name == "wte" ? int64_t(cfg_.vocab) * cfg_.dim : INT64_MAX;
    for (const TensorPiece& piece : sharded[i].pieces) {
      float* p = base + piece.local_offset;
      const int64_t n = piece.numel();
      if (ones) {
        for (int64_t e = 0; e < n; ++e) p[e] = 1.0f;
        continue;
      }
      if (v.shape.size() == 1) {  // biases
        std::memset(p, 0, sizeof(float) * n);
        continue;
      }
      // Global element e takes the (e % 2)-th pair of words of Philox block e / 2 of
      // stream i: the values a sequential Rng(seed, i).normal() would produce over the whole
      // tensor, computed in parallel and for any box of it.
#pragma omp parallel for schedule(static)
      for (int64_t q = 0; q < n; ++q) {
        const int64_t e = global_index(piece, q);
        if (e >= live) {
          p[q] = 0.0f;
          continue;
        }
        const auto w = philox4x32(seed, i, uint64_t(e / 2));
        const int j = int(e % 2) * 2;
        const double u1 = (double(w[j]) + 1.0) / 4294967296.0;
        const double u2 = double(w[j + 1]) / 4294967296.0;
        const float z = float(std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2));
        p[q] = z * stdv;
      }
    }
  }
}

void GPT::zero_grads() {
  for (int u = 0; u < num_units(); ++u) {
    float* g = impl_->unit_grads[u];
    STRATA_CHECK(g, "zero_grads: unit ", u, " has no gradient memory bound");
    const auto [b, e] = unit_range(u);
    std::memset(g, 0, sizeof(float) * (e - b));
  }
}

// One block forward: x (N,C) -> a.res3 (N,C).
void block_forward(const GPTConfig& cfg, const Block& w, LayerActs& a, const float* x, int B,
                          int T) {
  const int64_t N = int64_t(B) * T;
  const int C = cfg.dim;
  const bool h = a.ln1_h != nullptr;  // bf16 compute
  layernorm_out(a.ln1, a.ln1_h, a.ln1_mean, a.ln1_rstd, x, w.ln1w, w.ln1b, N, C);
  linear_forward(h, a.qkv, act(a.ln1, a.ln1_h, C), w.qkvw, w.qkvb, N, C, 3 * C);
  k::attention_forward(a.atty, a.att_lse, a.qkv, B, T, C, cfg.heads, h);
  std::memcpy(a.res2, x, sizeof(float) * N * C);
  linear_forward(h, a.res2, act(a.atty, nullptr, C), w.projw, w.projb, N, C, C,
                 /*accumulate=*/true);
  layernorm_out(a.ln2, a.ln2_h, a.ln2_mean, a.ln2_rstd, a.res2, w.ln2w, w.ln2b, N, C);
  linear_forward(h, a.fch, act(a.ln2, a.ln2_h, C), w.fcw, w.fcb, N, C, 4 * C);
  if (h)
    k::gelu_forward(a.gelu_h, a.fch, N * 4 * C);
  else
    k::gelu_forward(a.fch_gelu, a.fch, N * 4 * C);
  std::memcpy(a.res3, a.res2, sizeof(float) * N * C);
  linear_forward(h, a.res3, act(a.fch_gelu, a.gelu_h, 4 * C), w.fcprojw, w.fcprojb, N, 4 * C, C,
                 /*accumulate=*/true);
}

// One block backward: dres (N,C) holds d loss / d res3 on entry and d loss / d x on exit.
// Gradients of the block's parameters accumulate into g.
void block_backward(const GPTConfig& cfg, const Block& w, const Block& g, const LayerActs& a,
                           const float* x, float* dres, float* dbuf_c, float* dbuf_4c, float* dqkv,
                           int B, int T) {
  const int64_t N = int64_t(B) * T;
  const int C = cfg.dim;
  // Activation-gradient scratch is overwritten (accumulate_dinp = false), not cleared first.
  const bool h = a.ln1_h != nullptr;  // bf16 compute
  linear_backward(h, dbuf_4c, g.fcprojw, g.fcprojb, dres, act(a.fch_gelu, a.gelu_h, 4 * C),
                  w.fcprojw, N, 4 * C, C);
  k::gelu_backward(dbuf_4c, a.fch, dbuf_4c, N * 4 * C);
  linear_backward(h, dbuf_c, g.fcw, g.fcb, dbuf_4c, act(a.ln2, a.ln2_h, C), w.fcw, N, C, 4 * C);
  k::layernorm_backward(dres, g.ln2w, g.ln2b, dbuf_c, a.res2, w.ln2w, a.ln2_mean, a.ln2_rstd, N, C);
  linear_backward(h, dbuf_c, g.projw, g.projb, dres, act(a.atty, nullptr, C), w.projw, N, C, C);
  k::attention_backward(dqkv, dbuf_c, a.qkv, a.atty, a.att_lse, B, T, C, cfg.heads, h);
  linear_backward(h, dbuf_c, g.qkvw, g.qkvb, dqkv, act(a.ln1, a.ln1_h, C), w.qkvw, N, C, 3 * C);
  k::layernorm_backward(dres, g.ln1w, g.ln1b, dbuf_c, x, w.ln1w, a.ln1_mean, a.ln1_rstd, N, C);
}

// Embedding, blocks and final norm: fills im.lnf for (B, T). Calls the forward hooks of
// units 0 .. L+1; the caller brackets the logits with unit 0's second pair.
static void trunk_forward(GPT::Impl& im, const GPTConfig& cfg, const int32_t* tokens, int B,
                          int T) {
  const int64_t N = int64_t(B) * T;
  const int C = cfg.dim, L = cfg.layers;
  PhaseState& phase = current_phase();
  phase.set_layer(-1);
  im.before(0, Pass::forward);
  if (N > 0) {
    UnitSpan s("forward", "embed");
    float* p0 = checked(im.unit_params[0], 0, "parameter");
    k::encoder_forward(im.encoded, tokens, p0 + im.view_rel[0], p0 + im.view_rel[1], B, T, C);
  }
  im.after(0, Pass::forward);
  for (int l = 0; l < L; ++l) {
    phase.set_layer(l);
    im.before(l + 1, Pass::forward);
    if (N > 0) {
      UnitSpan s("forward", "L", l);
      const Block w = block_views(im.unit_params[l + 1], im.view_rel, l);
      block_forward(cfg, w, im.layers[l], l == 0 ? im.encoded : im.layers[l - 1].res3, B, T);
    }
    im.after(l + 1, Pass::forward);
  }
  phase.set_layer(-1);
  im.before(L + 1, Pass::forward);
  if (N > 0) {
    UnitSpan s("forward", "ln_f");
    float* pf = checked(im.unit_params[L + 1], L + 1, "parameter");
    const int64_t* r = im.view_rel.data() + 2 + kViewsPerLayer * L;
    layernorm_out(im.lnf, im.lnf_h, im.lnf_mean, im.lnf_rstd,
                  L > 0 ? im.layers[L - 1].res3 : im.encoded, pf + r[0], pf + r[1], N, C);
  }
  im.after(L + 1, Pass::forward);
}

static void check_inputs(const GPTConfig& cfg, int max_batch, const int32_t* tokens,
                         const int32_t* targets, int B, int T) {
  STRATA_CHECK(B >= 0 && B <= max_batch, "batch ", B, " outside [0, ", max_batch,
               "] (the model's maximum micro-batch)");
  STRATA_CHECK(T >= 1 && T <= cfg.seq, "sequence length ", T, " outside [1, ", cfg.seq, "]");
  const int64_t N = int64_t(B) * T;
  STRATA_CHECK(N == 0 || tokens, "forward: tokens are null");
  for (int64_t n = 0; n < N; ++n) {
    STRATA_CHECK(tokens[n] >= 0 && tokens[n] < cfg.vocab, "token ", tokens[n], " at position ", n,
                 " outside [0, ", cfg.vocab, ")");
    if (targets)
      STRATA_CHECK(targets[n] >= 0 && targets[n] < cfg.vocab, "target ", targets[n],
                   " at position ", n, " outside [0, ", cfg.vocab, ")");
  }
}

double GPT::forward(const int32_t* tokens, const int32_t* targets, const float* weights, int B,
                    int T) {
  Impl& im = *impl_;
  STRATA_CHECK(B == 0 || targets, "forward: targets are null (use logits() for inference)");
  check_inputs(cfg_, max_batch_, tokens, targets, B, T);
  PhaseScope phase(PhaseKind::forward);
  const int64_t N = int64_t(B) * T;
  im.B = B;
  im.T = T;
  if (N > 0) {
    std::memcpy(im.tokens, tokens, sizeof(int32_t) * N);
    std::memcpy(im.targets, targets, sizeof(int32_t) * N);
    im.has_weights = weights != nullptr;
    if (weights) std::memcpy(im.weights, weights, sizeof(float) * N);
  }
  if (tp_) {
    const double loss = tp_forward(im, cfg_, *tp_, shard_);
    im.forward_done = true;
    im.logits_valid = false;  // vocabulary-sharded: logits() computes them again
    return loss;
  }
  trunk_forward(im, cfg_, im.tokens, B, T);
  double loss = 0.0;
  im.before(0, Pass::forward);
  if (N > 0) {
    UnitSpan s("forward", "logits");
    const float* wte = checked(im.unit_params[0], 0, "parameter") + im.view_rel[0];
    linear_forward(im.bf16, im.logits, act(im.lnf, im.lnf_h, cfg_.dim), wte, nullptr, N, cfg_.dim,
                   cfg_.padded_vocab);
    loss = k::crossentropy_forward(im.losses, im.ce_lse, im.logits, im.targets,
                                   im.has_weights ? im.weights : nullptr, N, cfg_.vocab,
                                   cfg_.padded_vocab);
  }
  im.after(0, Pass::forward);
  im.forward_done = true;
  im.logits_valid = true;
  return loss;
}

void GPT::backward(float scale) {
  Impl& im = *impl_;
  STRATA_CHECK(im.forward_done, "backward called without a forward with targets before it");
  im.forward_done = false;
  im.logits_valid = false;
  PhaseScope phase(PhaseKind::backward);
  const int B = im.B, T = im.T, C = cfg_.dim, L = cfg_.layers;
  const int64_t N = int64_t(B) * T;
  const std::vector<int64_t>& rel = im.view_rel;
  if (tp_) {
    tp_backward(im, cfg_, *tp_, shard_, scale);
    return;
  }

  im.before(0, Pass::backward);
  if (N > 0) {
    UnitSpan s("backward", "logits");
    const float* wte = checked(im.unit_params[0], 0, "parameter") + rel[0];
    float* dwte = checked(im.unit_grads[0], 0, "gradient") + rel[0];
    k::crossentropy_backward(im.logits, im.ce_lse, im.targets,
                             im.has_weights ? im.weights : nullptr, scale, N, cfg_.vocab,
                             cfg_.padded_vocab);
    linear_backward(im.bf16, im.dbuf_c, dwte, nullptr, im.logits, act(im.lnf, im.lnf_h, C), wte, N,
                    C, cfg_.padded_vocab);
  }
  im.before(L + 1, Pass::backward);
  if (N > 0) {
    UnitSpan s("backward", "ln_f");
    const float* pf = checked(im.unit_params[L + 1], L + 1, "parameter");
    float* gf = checked(im.unit_grads[L + 1], L + 1, "gradient");
    const int64_t* r = rel.data() + 2 + kViewsPerLayer * L;
    std::memset(im.dres, 0, sizeof(float) * N * C);
    k::layernorm_backward(im.dres, gf + r[0], gf + r[1], im.dbuf_c,
                          L > 0 ? im.layers[L - 1].res3 : im.encoded, pf + r[0], im.lnf_mean,
                          im.lnf_rstd, N, C);
  }
  im.after(L + 1, Pass::backward);
  PhaseState& ph = current_phase();
  for (int l = L - 1; l >= 0; --l) {
    ph.set_layer(l);
    im.before(l + 1, Pass::backward);
    if (N > 0) {
      UnitSpan s("backward", "L", l);
      const Block w = block_views(im.unit_params[l + 1], rel, l);
      const Block g = block_views(checked(im.unit_grads[l + 1], l + 1, "gradient"), rel, l);
      block_backward(cfg_, w, g, im.layers[l], l == 0 ? im.encoded : im.layers[l - 1].res3, im.dres,
                     im.dbuf_c, im.dbuf_4c, im.dqkv, B, T);
    }
    im.after(l + 1, Pass::backward);
  }
  ph.set_layer(-1);
  if (N > 0) {
    UnitSpan s("backward", "embed");
    float* g0 = checked(im.unit_grads[0], 0, "gradient");
    k::encoder_backward(g0 + rel[0], g0 + rel[1], im.dres, im.tokens, B, T, C);
  }
  im.after(0, Pass::backward);
}

// Sequence parallelism splits rows T ways; a prompt of any length is padded at its end (causal
// attention: padding changes no earlier position) and the rows are compacted back.
static const float* padded_tp_logits(GPT::Impl& im, const GPTConfig& cfg, TensorComm& tc,
                                     TpShard s, const int32_t* tokens, int B, int T) {
  int Tp = T;
  while (tc.sequence_parallel() && int64_t(B) * Tp % s.size != 0) ++Tp;
  STRATA_CHECK(Tp <= cfg.seq, "logits: ", T, " tokens padded to ", Tp,
               " for sequence parallelism exceed the position table (", cfg.seq, ")");
  for (int b = 0; b < B; ++b) {
    std::memcpy(im.tokens + int64_t(b) * Tp, tokens + int64_t(b) * T, sizeof(int32_t) * T);
    std::fill(im.tokens + int64_t(b) * Tp + T, im.tokens + int64_t(b + 1) * Tp, 0);
  }
  im.T = Tp;
  float* out = const_cast<float*>(tp_logits(im, cfg, tc, s));
  const int64_t Vp = cfg.padded_vocab;
  for (int b = 0; b < B && Tp != T; ++b)
    for (int t = 0; t < T; ++t)
      std::memmove(out + (int64_t(b) * T + t) * Vp, out + (int64_t(b) * Tp + t) * Vp,
                   sizeof(float) * Vp);
  im.T = T;
  return out;
}

const float* GPT::logits(const int32_t* tokens, int B, int T) {
  Impl& im = *impl_;
  if (!tokens) {
    STRATA_CHECK(im.logits_valid, "logits: no forward since the last backward");
    return im.logits;
  }
  check_inputs(cfg_, max_batch_, tokens, nullptr, B, T);
  PhaseScope phase(PhaseKind::forward);
  const int64_t N = int64_t(B) * T;
  im.forward_done = false;
  im.B = B;
  im.T = T;
  if (tp_) return padded_tp_logits(im, cfg_, *tp_, shard_, tokens, B, T);
  std::memcpy(im.tokens, tokens, sizeof(int32_t) * N);
  trunk_forward(im, cfg_, im.tokens, B, T);
  im.before(0, Pass::forward);
  if (N > 0) {
    UnitSpan s("forward", "logits");
    const float* wte = checked(im.unit_params[0], 0, "parameter") + im.view_rel[0];
    linear_forward(im.bf16, im.logits, act(im.lnf, im.lnf_h, cfg_.dim), wte, nullptr, N, cfg_.dim,
                   cfg_.padded_vocab);
  }
  im.after(0, Pass::forward);
  im.logits_valid = true;
  return im.logits;
}

}  // namespace strata::model
