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
// 16C + 2*2 + NH floats per row and layer. Under bf16 compute ln1, ln2, qkv, the attention
// output, fc and gelu (14C), and the final ln_f, are stored in bf16 (2C + 2*2 + NH floats
// and 14C bf16 values per row and layer stay): the matmuls and attention tile products
// round their inputs to bf16 anyway, so for them nothing is lost; what reads a rounded value
// is the attention backward's D = rowsum(dO * O) and GELU's backward (its forward runs on the
// fp32 matmul output, computed into the dbuf_4c scratch first). Norm inputs (the residual
// stream), statistics, lse and logits stay fp32.
// Cost per token: forward ~2*(12*L*C^2 + C*Vp) GEMM flops + ~2*L*C*T attention flops
// (causal, T/2 keys on average), backward about twice that (plus the attention recompute).
// A tensor-parallel rank (model/shard.h) runs the passes of gpt_tp.cc instead, in the same
// compute precision and with the same bf16 buffers; the table, initialisation, units and
// hooks here serve both.
#include "model/gpt.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>

#include "comm/process_group.h"
#include "core/error.h"
#include "core/phase.h"
#include "core/rng.h"
#include "core/trace.h"
#include "kernels/kernels.h"
#include "model/context/gpt_cp.h"
#include "model/expert/moe.h"
#include "model/gpt_impl.h"
#include "model/shard.h"
#include "model/tensor/collectives.h"
#include "model/tensor/linear.h"

namespace strata::model {

namespace k = strata::kernels;

using tensor::act;
using tensor::linear_backward;
using tensor::linear_forward;

GPT::GPT(const GPTConfig& cfg, int max_batch, bool allocate_state, TensorComm* tp, DType compute,
         ContextComm* cp, comm::ProcessGroup* ep)
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
  if (cp && cp->size() > 1) cp_ = cp;  // one rank: no context parallelism
  impl_->cp = cp_;
  impl_->bf16 = compute_ == DType::bf16;
  STRATA_CHECK(!ep || ep->size() == 1 || cfg_.moe.enabled(), "expert parallelism needs --experts");
  if (ep && ep->size() > 1) experts_ = {ep->size(), ep->rank()};
  impl_->experts = experts_;
  table_ = build_param_table(cfg_, shard_, experts_);
  num_params_ = table_.back().offset + numel(table_.back().shape);
  for (size_t i = 0; i < table_.size(); ++i)
    if (table_[i].unit >= 1 && (i == 0 || table_[i - 1].unit != table_[i].unit))
      impl_->view0.push_back(int(i));
  STRATA_CHECK(num_params_ == local_num_params(cfg_, shard_, experts_),
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
  if (cfg_.moe.enabled()) {
    impl_->moe = std::make_shared<expert::MoE>(cfg_.moe, cfg_.layers, cfg_.dim);
    impl_->moe->set_tensor(tp_);  // each tp rank runs its slice of every expert
    if (experts_.size > 1) impl_->moe->set_group(ep);
  }

  ActShape a;
  const int cp_size = cp_ ? cp_->size() : 1;  // a cp rank keeps 1/C of each sequence
  a.N = int64_t(max_batch) * ((cfg_.seq + cp_size - 1) / cp_size);
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
  // Views are in unit order: unit 0 is views [0, 2), unit u >= 1 views [view0[u-1], view0[u])
  // (12 for a dense block, 9 for an MoE block, 2 for the final norm, 4 per held expert for an
  // expert unit), the last unit's up to the end of the table.
  const std::vector<int>& v0 = impl_->view0;
  const size_t first = unit == 0 ? 0 : size_t(v0[size_t(unit - 1)]);
  const size_t last =
      size_t(unit) < v0.size() ? size_t(v0[size_t(unit)]) - 1 : table_.size() - 1;
  return {table_[first].offset, table_[last].offset + numel(table_[last].shape)};
}

int64_t GPT::activation_bytes() const {
  return int64_t(impl_->acts_buf.bytes() + impl_->input_buf.bytes());
}

TensorLayout GPT::tensor_layout() const { return model::tensor_layout(cfg_, shard_, experts_); }

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

expert::MoE* GPT::moe() const { return impl_->moe.get(); }

void GPT::set_expert_group(comm::ProcessGroup* ep) {
  STRATA_CHECK(impl_->moe || !ep || ep->size() == 1, "expert parallelism needs --experts");
  const int P = ep ? ep->size() : 1;
  STRATA_CHECK(P == experts_.size && (P == 1 || ep->rank() == experts_.rank),
               "set_expert_group: the model holds the experts of rank ", experts_.rank, " of an ",
               "expert-parallel group of ", experts_.size, ", not of rank ", ep ? ep->rank() : 0,
               " of ", P, " (build the model with that group)");
  if (impl_->moe) impl_->moe->set_group(ep);
}

// Random stream of each view of an MoE model: its index in the one-process table ordered with
// each block's experts right after its router (the order before experts had units of their
// own), so an expert's values depend neither on the expert-parallel layout nor on the units.
static std::map<std::string, uint64_t> moe_init_streams(const GPTConfig& cfg, TpShard s) {
  const std::vector<ParamView> all = build_param_table(cfg, s);
  auto block_of = [](const std::string& name) { return name.substr(0, name.find(".mlp.")); };
  std::map<std::string, std::vector<const ParamView*>> experts;  // by block prefix "h.l"
  for (const ParamView& v : all)
    if (v.unit >= cfg.layers + 2) experts[block_of(v.name)].push_back(&v);
  std::map<std::string, uint64_t> stream;
  for (const ParamView& v : all) {
    if (v.unit >= cfg.layers + 2) continue;
    stream.emplace(v.name, stream.size());
    if (v.name.find(".mlp.router.") != std::string::npos)
      for (const ParamView* x : experts[block_of(v.name)]) stream.emplace(x->name, stream.size());
  }
  return stream;
}

void GPT::init(uint64_t seed) {
  if (impl_->moe) impl_->moe->set_seed(seed);
  const double resid_std = 0.02 / std::sqrt(2.0 * cfg_.layers);
  const std::vector<ShardedView> sharded = build_sharded_table(cfg_, shard_, experts_);
  const bool moe = cfg_.moe.enabled();
  const std::map<std::string, uint64_t> stream =
      moe ? moe_init_streams(cfg_, shard_) : std::map<std::string, uint64_t>{};
  for (size_t i = 0; i < sharded.size(); ++i) {
    const ParamView& v = sharded[i].view;
    const uint64_t si = moe ? stream.at(v.name) : uint64_t(i);
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
        const auto w = philox4x32(seed, si, uint64_t(e / 2));
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
// scratch (N, 4C): the fp32 matmul outputs that bf16 compute stores rounded.
void block_forward(const GPTConfig& cfg, const Block& w, LayerActs& a, const float* x, int B,
                   int T, float* scratch, ContextComm* cp, int layer, MoEBlock* moe) {
  const int64_t N = int64_t(B) * T;
  const int C = cfg.dim;
  const bool h = a.ln1_h != nullptr;  // bf16 compute
  layernorm_out(a.ln1, a.ln1_h, a.ln1_mean, a.ln1_rstd, x, w.ln1w, w.ln1b, N, C);
  linear_forward(h, gemm_out(a.qkv, scratch), act(a.ln1, a.ln1_h, C), w.qkvw, w.qkvb, N, C, 3 * C);
  store_qkv(a, scratch, N * 3 * C);
  if (cp)  // context parallel: qkv and the attention output stay fp32 (gpt_impl.h's carve)
    attention_forward(cp, layer, a.atty, a.att_lse, a.qkv, B, T, C, cfg.heads, h);
  else
    attention_out(a, B, T, C, cfg.heads);
  std::memcpy(a.res2, x, sizeof(float) * N * C);
  linear_forward(h, a.res2, act(a.atty, a.atty_h, C), w.projw, w.projb, N, C, C,
                 /*accumulate=*/true);
  layernorm_out(a.ln2, a.ln2_h, a.ln2_mean, a.ln2_rstd, a.res2, w.ln2w, w.ln2b, N, C);
  if (moe) {  // experts instead of the MLP (model/expert/moe.h)
    std::memcpy(a.res3, a.res2, sizeof(float) * N * C);
    moe_block_forward(*moe, a.ln2, a.ln2_h, a.res3, N, h);
    return;
  }
  linear_forward(h, gemm_out(a.fch, scratch), act(a.ln2, a.ln2_h, C), w.fcw, w.fcb, N, C, 4 * C);
  gelu_out(a, gemm_out(a.fch, scratch), N * 4 * C);
  std::memcpy(a.res3, a.res2, sizeof(float) * N * C);
  linear_forward(h, a.res3, act(a.fch_gelu, a.gelu_h, 4 * C), w.fcprojw, w.fcprojb, N, 4 * C, C,
                 /*accumulate=*/true);
}

// One block backward: dres (N,C) holds d loss / d res3 on entry and d loss / d x on exit.
// Gradients of the block's parameters accumulate into g.
void block_backward(const GPTConfig& cfg, const Block& w, const Block& g, const LayerActs& a,
                           const float* x, float* dres, float* dbuf_c, float* dbuf_4c, float* dqkv,
                           int B, int T, ContextComm* cp, int layer, MoEBlock* moe) {
  const int64_t N = int64_t(B) * T;
  const int C = cfg.dim;
  // Activation-gradient scratch is overwritten (accumulate_dinp = false), not cleared first.
  const bool h = a.ln1_h != nullptr;  // bf16 compute
  if (moe) {
    moe_block_backward(*moe, dres, dbuf_c, h);
  } else {
    linear_backward(h, dbuf_4c, g.fcprojw, g.fcprojb, dres, act(a.fch_gelu, a.gelu_h, 4 * C),
                    w.fcprojw, N, 4 * C, C);
    gelu_grad(dbuf_4c, a, N * 4 * C);
    linear_backward(h, dbuf_c, g.fcw, g.fcb, dbuf_4c, act(a.ln2, a.ln2_h, C), w.fcw, N, C, 4 * C);
  }
  k::layernorm_backward(dres, g.ln2w, g.ln2b, dbuf_c, a.res2, w.ln2w, a.ln2_mean, a.ln2_rstd, N, C);
  linear_backward(h, dbuf_c, g.projw, g.projb, dres, act(a.atty, a.atty_h, C), w.projw, N, C, C);
  if (cp)
    attention_backward(cp, layer, dqkv, dbuf_c, a.qkv, a.atty, a.att_lse, B, T, C, cfg.heads, h);
  else
    attention_grad(dqkv, dbuf_c, a, B, T, C, cfg.heads);
  linear_backward(h, dbuf_c, g.qkvw, g.qkvb, dqkv, act(a.ln1, a.ln1_h, C), w.qkvw, N, C, 3 * C);
  k::layernorm_backward(dres, g.ln1w, g.ln1b, dbuf_c, x, w.ln1w, a.ln1_mean, a.ln1_rstd, N, C);
}

// Embedding, blocks and final norm: fills im.lnf for (B, T). Calls the forward hooks of
// units 0 .. L+1; the caller brackets the logits with unit 0's second pair.
void trunk_forward(GPT::Impl& im, const GPTConfig& cfg, const int32_t* tokens, int B,
                          int T) {
  const int64_t N = int64_t(B) * T;
  const int C = cfg.dim, L = cfg.layers;
  im.hidden_valid = false;
  PhaseState& phase = current_phase();
  phase.set_layer(-1);
  im.before(0, Pass::forward);
  if (N > 0) {
    UnitSpan s("forward", "embed");
    float* p0 = checked(im.unit_params[0], 0, "parameter");
    if (im.cp)
      cp_embed_forward(im, *im.cp, p0 + im.view_rel[0], p0 + im.view_rel[1], C);
    else
      k::encoder_forward(im.encoded, tokens, p0 + im.view_rel[0], p0 + im.view_rel[1], B, T, C);
  }
  im.after(0, Pass::forward);
  for (int l = 0; l < L; ++l) {
    phase.set_layer(l);
    im.before(l + 1, Pass::forward);
    std::unique_ptr<MoEBlock> moe = moe_block(im, cfg, l, false, 0.0f);
    if (N > 0) {
      UnitSpan s("forward", "L", l);
      const Block w = block_views_at(im.unit_params[l + 1], im.view_rel, im.view0[l], l);
      block_forward(cfg, w, im.layers[l], l == 0 ? im.encoded : im.layers[l - 1].res3, B, T,
                    im.dbuf_4c, im.cp, l, moe.get());
    } else if (moe) {  // no tokens here, but this rank's experts may get some
      moe_block_forward(*moe, nullptr, nullptr, nullptr, 0, im.bf16);
    }
    moe_block_done(im, moe.get(), Pass::forward);
    im.after(l + 1, Pass::forward);
  }
  phase.set_layer(-1);
  im.before(L + 1, Pass::forward);
  if (N > 0) {
    UnitSpan s("forward", "ln_f");
    float* pf = checked(im.unit_params[L + 1], L + 1, "parameter");
    const int64_t* r = im.view_rel.data() + im.view0[L];
    layernorm_out(im.lnf, im.lnf_h, im.lnf_mean, im.lnf_rstd,
                  L > 0 ? im.layers[L - 1].res3 : im.encoded, pf + r[0], pf + r[1], N, C);
  }
  im.after(L + 1, Pass::forward);
}

void check_inputs(const GPTConfig& cfg, int max_batch, const int32_t* tokens,
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
                    int T, SampleIds ids) {
  Impl& im = *impl_;
  STRATA_CHECK(B == 0 || targets, "forward: targets are null (use logits() for inference)");
  check_inputs(cfg_, max_batch_, tokens, targets, B, T);
  PhaseScope phase(PhaseKind::forward);
  const int64_t N = int64_t(B) * T;
  im.B = B;
  im.T = T;
  if (cp_) {
    cp_take_inputs(im, *cp_, tokens, targets, weights, B, T);  // im.T: the local rows
  } else if (N > 0) {
    std::memcpy(im.tokens, tokens, sizeof(int32_t) * N);
    std::memcpy(im.targets, targets, sizeof(int32_t) * N);
    im.has_weights = weights != nullptr;
    if (weights) std::memcpy(im.weights, weights, sizeof(float) * N);
  }
  const TokenIdsScope named(im, ids, B);  // after cp_take_inputs: im.T holds the local rows
  if (tp_) {
    double loss = tp_forward(im, cfg_, *tp_, shard_);
    if (cp_) cp_->group().all_reduce(&loss, 1);  // the whole sequence's loss
    im.forward_done = true;
    im.logits_valid = false;  // vocabulary-sharded: logits() computes them again
    return loss;
  }
  trunk_forward(im, cfg_, im.tokens, B, im.T);
  double loss = 0.0;
  im.before(0, Pass::forward);
  const int64_t Nl = int64_t(B) * im.T;  // this rank's rows (N without context parallelism)
  if (Nl > 0) {
    UnitSpan s("forward", "logits");
    const float* wte = checked(im.unit_params[0], 0, "parameter") + im.view_rel[0];
    linear_forward(im.bf16, im.logits, act(im.lnf, im.lnf_h, cfg_.dim), wte, nullptr, Nl,
                   cfg_.dim, cfg_.padded_vocab);
    loss = k::crossentropy_forward(im.losses, im.ce_lse, im.logits, im.targets,
                                   im.has_weights ? im.weights : nullptr, Nl, cfg_.vocab,
                                   cfg_.padded_vocab);
  }
  im.after(0, Pass::forward);
  im.forward_done = true;
  im.logits_valid = !cp_;  // under cp they are the local rows only
  if (cp_) cp_->group().all_reduce(&loss, 1);  // the whole sequence's loss on every cp rank
  return loss;
}

// Backward of the final norm, the blocks and the embedding, from d loss / d lnf in
// im.dbuf_c (N, C): the hooks from before(L+1, B) through after(0, B).
void trunk_backward(GPT::Impl& im, const GPTConfig& cfg, int B, int T, float scale) {
  const int C = cfg.dim, L = cfg.layers;
  const int64_t N = int64_t(B) * T;
  const std::vector<int64_t>& rel = im.view_rel;
  im.before(L + 1, Pass::backward);
  if (N > 0) {
    UnitSpan s("backward", "ln_f");
    const float* pf = checked(im.unit_params[L + 1], L + 1, "parameter");
    float* gf = checked(im.unit_grads[L + 1], L + 1, "gradient");
    const int64_t* r = rel.data() + im.view0[L];
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
    std::unique_ptr<MoEBlock> moe = moe_block(im, cfg, l, true, scale);
    if (N > 0) {
      UnitSpan s("backward", "L", l);
      const Block w = block_views_at(im.unit_params[l + 1], rel, im.view0[l], l);
      const Block g =
          block_views_at(checked(im.unit_grads[l + 1], l + 1, "gradient"), rel, im.view0[l], l);
      block_backward(cfg, w, g, im.layers[l], l == 0 ? im.encoded : im.layers[l - 1].res3, im.dres,
                     im.dbuf_c, im.dbuf_4c, im.dqkv, B, T, im.cp, l, moe.get());
    } else if (moe) {  // this rank's experts may have received tokens
      moe_block_backward(*moe, nullptr, nullptr, im.bf16);
    }
    moe_block_done(im, moe.get(), Pass::backward);
    im.after(l + 1, Pass::backward);
  }
  ph.set_layer(-1);
  if (N > 0) {
    UnitSpan s("backward", "embed");
    float* g0 = checked(im.unit_grads[0], 0, "gradient");
    if (im.cp)
      cp_embed_backward(im, *im.cp, g0 + rel[0], g0 + rel[1], C);
    else
      k::encoder_backward(g0 + rel[0], g0 + rel[1], im.dres, im.tokens, B, T, C);
  }
  im.after(0, Pass::backward);
}

void GPT::backward(float scale) {
  Impl& im = *impl_;
  STRATA_CHECK(im.forward_done, "backward called without a forward with targets before it");
  im.forward_done = false;
  im.logits_valid = false;
  PhaseScope phase(PhaseKind::backward);
  const int B = im.B, T = im.T, C = cfg_.dim;
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
  trunk_backward(im, cfg_, B, T, scale);
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
  if (tp_ && cp_)  // each rank's chunks split over tp rows under sequence parallelism
    return cp_logits(im, cfg_, *cp_, tokens, B, T, tp_->sequence_parallel() ? shard_.size : 1,
                     [&](int) { return tp_logits(im, cfg_, *tp_, shard_); });
  if (tp_) return padded_tp_logits(im, cfg_, *tp_, shard_, tokens, B, T);
  // Logits of im.tokens (B, t): all of them, or a cp rank's rows.
  auto local_logits = [&](int t) -> const float* {
    const int64_t n = int64_t(B) * t;
    const bool training = im.moe && im.moe->training();
    if (im.moe) im.moe->set_training(false);  // inference: no router jitter
    trunk_forward(im, cfg_, im.tokens, B, t);
    if (im.moe) im.moe->set_training(training);
    im.before(0, Pass::forward);
    if (n > 0) {
      UnitSpan s("forward", "logits");
      const float* wte = checked(im.unit_params[0], 0, "parameter") + im.view_rel[0];
      linear_forward(im.bf16, im.logits, act(im.lnf, im.lnf_h, cfg_.dim), wte, nullptr, n,
                     cfg_.dim, cfg_.padded_vocab);
    }
    im.after(0, Pass::forward);
    return im.logits;
  };
  if (cp_) return cp_logits(im, cfg_, *cp_, tokens, B, T, 1, local_logits);
  std::memcpy(im.tokens, tokens, sizeof(int32_t) * N);
  local_logits(T);
  im.logits_valid = true;
  return im.logits;
}

}  // namespace strata::model
