#include "model/stage.h"

#include <algorithm>
#include <cstring>
#include <numeric>

#include "core/error.h"
#include "kernels/kernels.h"
#include "model/context/gpt_cp.h"
#include "model/gpt_impl.h"
#include "model/shard.h"
#include "model/stage_cost.h"
#include "model/tensor/block.h"
#include "model/tensor/block_split.h"
#include "model/tensor/vocab.h"
#include "model/tensor/linear.h"

namespace strata::model {

namespace k = strata::kernels;
using tensor::act;
using tensor::linear_backward_input;
using tensor::linear_backward_weight;

// A block's linear layers' output gradients, kept between backward_input and
// backward_weight (model/tensor/block_split.h): fc_proj (N, C), fc after GELU (N, 4Cl), attn
// proj (N, C), qkv (N, 3Cl); Cl = C without tp.
using Stash = BlockStash;

struct StageModel::Slot {
  float* x = nullptr;  // (N, C) input: the received activation, or the embedding's output
  std::vector<LayerActs> layers;
  std::vector<Stash> stash;  // split backward only
  float *gin = nullptr, *gout = nullptr;  // (N, C) output / input gradients
  float *lnf = nullptr, *lnf_mean = nullptr, *lnf_rstd = nullptr;
  uint16_t* lnf_h = nullptr;
  float *logits = nullptr, *losses = nullptr, *lse = nullptr;
};

struct StageModel::Chunk {
  std::vector<Slot> slots;
};

namespace {

// Carves one slot of a chunk (base = nullptr counts the floats).
// a: rows N (micro-batch), n (residual stream), tp degree T and local vocabulary Vr.
// attn_f32: qkv and the attention output in fp32 even under bf16 (context parallelism).
void carve_slot(Carver& c, StageModel::Slot& s, const StageChunk& ch, const GPTConfig& cfg,
                const ActShape& a, bool bf16, bool split, bool attn_f32) {
  const int64_t C = cfg.dim, N = a.N, n = a.n, Cl = C / a.T;
  const bool f32 = !bf16;
  s.x = c.take(n * C);
  s.layers.resize(size_t(ch.end - ch.begin));
  for (LayerActs& l : s.layers) carve_layer(c, l, cfg, a, bf16, attn_f32);
  s.stash.resize(split ? s.layers.size() : 0);
  for (Stash& st : s.stash) {
    st.d3 = c.take(N * C);
    st.dfch = c.take(4 * N * Cl);
    st.d2 = c.take(N * C);
    st.dqkv = c.take(3 * N * Cl);
  }
  s.gin = c.take_if(n * C, !ch.head);
  s.gout = c.take_if(n * C, !ch.embed);
  if (!ch.head) return;
  s.lnf = c.take_if(n * C, f32);
  s.lnf_h = c.take_bf16(n * C, bf16);
  s.lnf_mean = c.take(n);
  s.lnf_rstd = c.take(n);
  s.logits = c.take(N * a.Vr);
  s.losses = c.take(N);
  s.lse = c.take(N);
}

}  // namespace

StageModel::StageModel(const GPTConfig& cfg, std::vector<StageChunk> chunks,
                       std::vector<int> slots, int max_batch, DType compute,
                       bool split_backward, TensorComm* tp, ContextComm* cp)
    : cfg_(cfg), chunks_(std::move(chunks)), compute_(compute), split_(split_backward),
      tc_(tp && tp->size() > 1 ? tp : nullptr), cc_(cp && cp->size() > 1 ? cp : nullptr) {
  cfg_.validate();
  if (tc_) shard_ = {tc_->size(), tc_->rank()};
  const int L = cfg_.layers;
  STRATA_CHECK(!chunks_.empty() && slots.size() == chunks_.size(), "stage: ", chunks_.size(),
               " chunks but ", slots.size(), " slot counts");
  std::vector<bool> held(size_t(L + 2), false);
  for (const StageChunk& ch : chunks_) {
    STRATA_CHECK(ch.begin >= 0 && ch.begin < ch.end && ch.end <= L, "stage: chunk [", ch.begin,
                 ", ", ch.end, ") is not a non-empty range of the ", L, " layers");
    for (int l = ch.begin; l < ch.end; ++l) held[size_t(l + 1)] = true;
    if (ch.embed || ch.head) held[0] = true;
    if (ch.head) held[size_t(L + 1)] = true;
  }
  // Global units and views (the one-process layout), then the held units packed in order.
  const std::vector<ParamView> global = build_param_table(cfg_, shard_);
  unit_global_begin_.assign(size_t(L + 2), INT64_MAX);
  std::vector<int64_t> unit_end(size_t(L + 2), 0);
  for (const ParamView& v : global) {
    unit_global_begin_[size_t(v.unit)] = std::min(unit_global_begin_[size_t(v.unit)], v.offset);
    unit_end[size_t(v.unit)] = std::max(unit_end[size_t(v.unit)], v.offset + numel(v.shape));
  }
  for (const ParamView& v : global) view_rel_.push_back(v.offset - unit_global_begin_[size_t(v.unit)]);
  unit_begin_.assign(size_t(L + 2), -1);
  for (int u = 0; u < L + 2; ++u) {
    if (!held[size_t(u)]) continue;
    units_.push_back(u);
    unit_begin_[size_t(u)] = num_params_;
    num_params_ += unit_end[size_t(u)] - unit_global_begin_[size_t(u)];
  }
  for (ParamView v : global) {
    if (!held[size_t(v.unit)]) continue;
    v.offset = unit_begin_[size_t(v.unit)] + (v.offset - unit_global_begin_[size_t(v.unit)]);
    table_.push_back(std::move(v));
  }
  params_ = Buffer(MemCategory::parameters, sizeof(float) * size_t(num_params_));
  grads_ = Buffer(MemCategory::gradients, sizeof(float) * size_t(num_params_));

  // Activations: every slot of every chunk, then the shared backward scratch.
  // Under cp a sequence's rows are its local ones, T / C.
  const int cpn = cc_ ? cc_->size() : 1;
  const int64_t N = int64_t(max_batch) * ((cfg_.seq + cpn - 1) / cpn), C = cfg_.dim;
  const bool bf16 = compute_ == DType::bf16;
  ActShape a;
  a.N = N;
  a.n = tc_ ? tc_->local_rows(N) : N;
  a.T = shard_.size;
  a.Vr = vocab_slice(cfg_.padded_vocab, shard_).size();
  const int64_t n = a.n, Cl = C / a.T;
  for (size_t c = 0; c < chunks_.size(); ++c) {
    STRATA_CHECK(slots[c] >= 1, "stage: chunk ", c, " needs at least one slot (got ", slots[c], ")");
    state_.push_back(std::make_unique<Chunk>());
    state_.back()->slots.resize(size_t(slots[c]));
  }
  auto carve_all = [&](float* base) {
    Carver cv{base};
    for (size_t c = 0; c < chunks_.size(); ++c)
      for (Slot& s : state_[c]->slots)
        carve_slot(cv, s, chunks_[c], cfg_, a, bf16, split_, !bf16 || cc_);
    dres_ = cv.take(n * C);
    dbuf_c_ = cv.take(n * C);
    dbuf_4c_ = cv.take(4 * N * Cl);
    dqkv_ = cv.take(3 * N * Cl);
    if (tc_) {
      full_a_ = cv.take(N * C);
      full_b_ = cv.take(N * C);
      rep_ = cv.take(int64_t(cfg_.seq) * C + 6 * C);
      ce_stats_ = cv.take(2 * N);
    }
    return cv.used;
  };
  const int64_t floats = carve_all(nullptr);
  acts_ = Buffer(MemCategory::activations, sizeof(float) * size_t(floats));
  carve_all(acts_.as<float>());
}

StageModel::~StageModel() = default;

bool StageModel::holds(int unit) const {
  return unit >= 0 && unit < int(unit_begin_.size()) && unit_begin_[size_t(unit)] >= 0;
}

std::pair<int64_t, int64_t> StageModel::unit_range(int unit) const {
  STRATA_CHECK(holds(unit), "stage: unit ", unit, " is not held by this stage");
  const auto it = std::find(units_.begin(), units_.end(), unit);
  const int64_t b = unit_begin_[size_t(unit)];
  const int64_t e = it + 1 == units_.end() ? num_params_ : unit_begin_[size_t(*(it + 1))];
  return {b, e};
}

std::pair<int64_t, int64_t> StageModel::wte_range() const {
  if (!holds(0)) return {0, 0};
  const int64_t b = unit_begin_[0] + view_rel_[0];
  return {b, b + vocab_slice(cfg_.padded_vocab, shard_).size() * cfg_.dim};
}

TensorLayout StageModel::tensor_layout() const {
  const std::vector<ParamView> global = build_param_table(cfg_, shard_);
  const bool first = std::any_of(chunks_.begin(), chunks_.end(), [](auto& c) { return c.embed; });
  TensorLayout out;
  size_t view = 0;
  for (TensorPiece p : model::tensor_layout(cfg_, shard_)) {
    while (global[view].offset + numel(global[view].shape) <= p.local_offset) ++view;
    const int u = global[view].unit;
    if (!holds(u)) continue;
    p.local_offset = unit_begin_[size_t(u)] + p.local_offset - unit_global_begin_[size_t(u)];
    if (u == 0 && !first) p.primary = false;  // the first stage writes the embeddings
    out.push_back(std::move(p));
  }
  return out;
}

float* StageModel::unit_params(int unit) { return params() + unit_range(unit).first; }
float* StageModel::unit_grads(int unit) { return grads() + unit_range(unit).first; }

void StageModel::init(uint64_t seed) {
  // model::GPT::init over a parameter-less model: the held units bound to this stage's
  // buffers, the others to one scratch unit (their values are drawn and dropped).
  GPT full(cfg_, 0, /*allocate_state=*/false, tc_);
  int64_t largest = 0;
  for (int u = 0; u < full.num_units(); ++u) {
    const auto [b, e] = full.unit_range(u);
    largest = std::max(largest, e - b);
  }
  std::vector<float> scratch(static_cast<size_t>(largest));
  for (int u = 0; u < full.num_units(); ++u) {
    if (holds(u))
      full.bind_unit(u, unit_params(u), unit_grads(u));
    else
      full.bind_unit(u, scratch.data(), scratch.data());
  }
  full.init(seed);
}

void StageModel::set_inputs(std::vector<MicroInput> micro) {
  inputs_ = std::move(micro);
  if (!cc_) return;
  // This cp rank's rows of every micro-batch, into storage the step keeps.
  int64_t ids = 0, weights = 0;
  for (const MicroInput& in : inputs_) {
    ids += 2 * int64_t(in.B) * in.T / cc_->size();
    if (in.weights) weights += int64_t(in.B) * in.T / cc_->size();
  }
  cp_ids_.resize(size_t(ids));
  cp_weights_.resize(size_t(weights));
  int32_t* id = cp_ids_.data();
  float* w = cp_weights_.data();
  for (MicroInput& in : inputs_) {
    if (in.B == 0) continue;
    const SeqLayout L = cc_->layout(in.T);
    STRATA_CHECK(in.T % (cc_->size() * L.chunks_per_rank()) == 0, "context parallelism over ",
                 cc_->size(), " ranks (", cp_chunks_name(L.kind), ") cannot split a sequence of ",
                 in.T, " tokens");
    const int64_t n = int64_t(in.B) * L.local_len();
    L.take(id, in.tokens, in.B, cc_->rank(), 1);
    L.take(id + n, in.targets, in.B, cc_->rank(), 1);
    in.tokens = id;
    in.targets = id + n;
    id += 2 * n;
    if (in.weights) {
      L.take(w, in.weights, in.B, cc_->rank(), 1);
      in.weights = w;
      w += n;
    }
    in.T = L.local_len();
  }
}

int StageModel::cp_key(int layer, int chunk, int micro) const {
  const int slots = int(state_[size_t(chunk)]->slots.size());
  return layer + cfg_.layers * (micro % slots);
}

void StageModel::zero_grads() { std::memset(grads(), 0, sizeof(float) * size_t(num_params_)); }

int64_t StageModel::message_floats(int micro) const {
  STRATA_CHECK(micro >= 0 && micro < int(inputs_.size()), "stage: micro-batch ", micro,
               " outside the ", inputs_.size(), " inputs of this step");
  const MicroInput& in = inputs_[size_t(micro)];
  const int64_t N = int64_t(in.B) * in.T;
  return (tc_ ? tc_->local_rows(N) : N) * cfg_.dim;
}

StageModel::Slot& StageModel::slot(int chunk, int micro) {
  STRATA_CHECK(chunk >= 0 && chunk < int(chunks_.size()), "stage: chunk ", chunk, " outside [0, ",
               chunks_.size(), ")");
  std::vector<Slot>& s = state_[size_t(chunk)]->slots;
  return s[size_t(micro) % s.size()];
}

float* StageModel::input(int chunk, int micro) { return slot(chunk, micro).x; }
const float* StageModel::output(int chunk, int micro) { return slot(chunk, micro).layers.back().res3; }
float* StageModel::grad_input(int chunk, int micro) {
  return checked(slot(chunk, micro).gin, -1, "output-gradient (head chunk)");
}
const float* StageModel::grad_output(int chunk, int micro) {
  return checked(slot(chunk, micro).gout, -1, "input-gradient (embed chunk)");
}

double StageModel::forward(int chunk, int micro) {
  if (tc_) return tp_forward(chunk, micro);
  const StageChunk& ch = chunks_[size_t(chunk)];
  Slot& s = slot(chunk, micro);
  const MicroInput& in = inputs_.at(size_t(micro));
  const int B = in.B, T = in.T, C = cfg_.dim;
  const int64_t N = int64_t(B) * T;
  if (N == 0) return 0;
  const bool bf16 = compute_ == DType::bf16;
  float* p0 = ch.embed || ch.head ? unit_params(0) : nullptr;
  if (ch.embed) {
    UnitSpan sp("forward", "embed");
    if (cc_)  // the local rows at their global positions
      cp_encoder_forward(*cc_, s.x, in.tokens, p0 + view_rel_[0], p0 + view_rel_[1], B, T, C);
    else
      k::encoder_forward(s.x, in.tokens, p0 + view_rel_[0], p0 + view_rel_[1], B, T, C);
  }
  const float* x = s.x;
  for (int l = ch.begin; l < ch.end; ++l) {
    UnitSpan sp("forward", "L", l);
    LayerActs& a = s.layers[size_t(l - ch.begin)];
    block_forward(cfg_, block_views(unit_params(l + 1), view_rel_, l), a, x, B, T, dbuf_4c_, cc_,
                  cp_key(l, chunk, micro));
    x = a.res3;
  }
  if (!ch.head) return 0;
  UnitSpan sp("forward", "head");
  const int L = cfg_.layers;
  const float* pf = unit_params(L + 1);
  const int64_t* r = view_rel_.data() + 2 + kViewsPerLayer * L;
  layernorm_out(s.lnf, s.lnf_h, s.lnf_mean, s.lnf_rstd, x, pf + r[0], pf + r[1], N, C);
  tensor::linear_forward(bf16, s.logits, act(s.lnf, s.lnf_h, C), p0 + view_rel_[0], nullptr, N, C,
                         cfg_.padded_vocab);
  return k::crossentropy_forward(s.losses, s.lse, s.logits, in.targets, in.weights, N, cfg_.vocab,
                                 cfg_.padded_vocab);
}

namespace {

// block_backward (gpt.cc) without the linear layers' weight gradients: those products'
// output gradients go to the stash instead. dres: d res3 on entry, d x on exit.
// cp, key: the attention over the cp group (ContextComm::backward's layer key), or none.
void block_backward_input(const GPTConfig& cfg, const Block& w, const Block& g, const LayerActs& a,
                          const Stash& st, const float* x, float* dres, float* dbuf_c, int B,
                          int T, ContextComm* cp, int key) {
  const int64_t N = int64_t(B) * T;
  const int C = cfg.dim;
  const bool h = a.ln1_h != nullptr;
  std::memcpy(st.d3, dres, sizeof(float) * size_t(N * C));
  linear_backward_input(h, st.dfch, dres, w.fcprojw, N, 4 * C, C);
  gelu_grad(st.dfch, a, N * 4 * C);
  linear_backward_input(h, dbuf_c, st.dfch, w.fcw, N, C, 4 * C);
  k::layernorm_backward(dres, g.ln2w, g.ln2b, dbuf_c, a.res2, w.ln2w, a.ln2_mean, a.ln2_rstd, N, C);
  std::memcpy(st.d2, dres, sizeof(float) * size_t(N * C));
  linear_backward_input(h, dbuf_c, dres, w.projw, N, C, C);
  if (cp)
    attention_backward(cp, key, st.dqkv, dbuf_c, a.qkv, a.atty, a.att_lse, B, T, C, cfg.heads, h);
  else
    attention_grad(st.dqkv, dbuf_c, a, B, T, C, cfg.heads);
  linear_backward_input(h, dbuf_c, st.dqkv, w.qkvw, N, C, 3 * C);
  k::layernorm_backward(dres, g.ln1w, g.ln1b, dbuf_c, x, w.ln1w, a.ln1_mean, a.ln1_rstd, N, C);
}

void block_backward_weight(const GPTConfig& cfg, const Block& g, const LayerActs& a,
                           const Stash& st, int64_t N) {
  const int C = cfg.dim;
  const bool h = a.ln1_h != nullptr;
  linear_backward_weight(h, g.fcprojw, g.fcprojb, st.d3, act(a.fch_gelu, a.gelu_h, 4 * C), N,
                         4 * C, C);
  linear_backward_weight(h, g.fcw, g.fcb, st.dfch, act(a.ln2, a.ln2_h, C), N, C, 4 * C);
  linear_backward_weight(h, g.projw, g.projb, st.d2, act(a.atty, a.atty_h, C), N, C, C);
  linear_backward_weight(h, g.qkvw, g.qkvb, st.dqkv, act(a.ln1, a.ln1_h, C), N, C, 3 * C);
}

}  // namespace

void StageModel::backward(int chunk, int micro, float scale) {
  if (tc_) return tp_backward(chunk, micro, scale, false);
  run_backward(chunk, micro, scale, false);
}

void StageModel::backward_input(int chunk, int micro, float scale) {
  STRATA_CHECK(split_, "stage: backward_input needs a model built with split_backward");
  if (tc_) return tp_backward(chunk, micro, scale, true);
  run_backward(chunk, micro, scale, true);
}

void StageModel::backward_weight(int chunk, int micro) {
  STRATA_CHECK(split_, "stage: backward_weight needs a model built with split_backward");
  if (tc_) return tp_backward_weight(chunk, micro);
  const StageChunk& ch = chunks_[size_t(chunk)];
  Slot& s = slot(chunk, micro);
  const MicroInput& in = inputs_.at(size_t(micro));
  const int64_t N = int64_t(in.B) * in.T;
  const int C = cfg_.dim;
  if (N == 0) return;
  if (ch.head) {
    UnitSpan sp("weight", "head");
    linear_backward_weight(compute_ == DType::bf16, unit_grads(0) + view_rel_[0], nullptr,
                           s.logits, act(s.lnf, s.lnf_h, C), N, C, cfg_.padded_vocab);
  }
  for (int l = ch.end - 1; l >= ch.begin; --l) {
    UnitSpan sp("weight", "L", l);
    const size_t i = size_t(l - ch.begin);
    block_backward_weight(cfg_, block_views(unit_grads(l + 1), view_rel_, l), s.layers[i],
                          s.stash[i], N);
  }
}

// Loss gradient through the logits and the final norm into dres_ (split: the logits' weight
// gradient is left for backward_weight, which reads the logits' gradient kept in the slot).
void StageModel::head_input_grad(Slot& s, const MicroInput& in, float scale, bool split) {
  const int64_t N = int64_t(in.B) * in.T;
  const int C = cfg_.dim, L = cfg_.layers;
  const bool bf16 = compute_ == DType::bf16;
  UnitSpan sp("backward", "head");
  const float* wte = unit_params(0) + view_rel_[0];
  k::crossentropy_backward(s.logits, s.lse, in.targets, in.weights, scale, N, cfg_.vocab,
                           cfg_.padded_vocab);
  if (split)
    linear_backward_input(bf16, dbuf_c_, s.logits, wte, N, C, cfg_.padded_vocab);
  else
    tensor::linear_backward(bf16, dbuf_c_, unit_grads(0) + view_rel_[0], nullptr, s.logits,
                            act(s.lnf, s.lnf_h, C), wte, N, C, cfg_.padded_vocab);
  const float* pf = unit_params(L + 1);
  float* gf = unit_grads(L + 1);
  const int64_t* r = view_rel_.data() + 2 + kViewsPerLayer * L;
  std::memset(dres_, 0, sizeof(float) * size_t(N * C));
  k::layernorm_backward(dres_, gf + r[0], gf + r[1], dbuf_c_, s.layers.back().res3, pf + r[0],
                        s.lnf_mean, s.lnf_rstd, N, C);
}

void StageModel::run_backward(int chunk, int micro, float scale, bool split) {
  const StageChunk& ch = chunks_[size_t(chunk)];
  Slot& s = slot(chunk, micro);
  const MicroInput& in = inputs_.at(size_t(micro));
  const int B = in.B, T = in.T, C = cfg_.dim;
  const int64_t N = int64_t(B) * T;
  if (N == 0) return;
  if (ch.head)
    head_input_grad(s, in, scale, split);
  else
    std::memcpy(dres_, s.gin, sizeof(float) * size_t(N * C));
  for (int l = ch.end - 1; l >= ch.begin; --l) {
    UnitSpan sp("backward", "L", l);
    const size_t i = size_t(l - ch.begin);
    const Block w = block_views(unit_params(l + 1), view_rel_, l);
    const Block g = block_views(unit_grads(l + 1), view_rel_, l);
    const float* x = i == 0 ? s.x : s.layers[i - 1].res3;
    if (split)
      block_backward_input(cfg_, w, g, s.layers[i], s.stash[i], x, dres_, dbuf_c_, B, T, cc_,
                           cp_key(l, chunk, micro));
    else
      block_backward(cfg_, w, g, s.layers[i], x, dres_, dbuf_c_, dbuf_4c_, dqkv_, B, T, cc_,
                     cp_key(l, chunk, micro));
  }
  if (ch.embed) {
    UnitSpan sp("backward", "embed");
    float* g0 = unit_grads(0);
    if (cc_)
      cp_encoder_backward(*cc_, g0 + view_rel_[0], g0 + view_rel_[1], dres_, in.tokens, B, T, C);
    else
      k::encoder_backward(g0 + view_rel_[0], g0 + view_rel_[1], dres_, in.tokens, B, T, C);
  } else {
    std::memcpy(s.gout, dres_, sizeof(float) * size_t(N * C));
  }
}

// The tensor-parallel passes (model/tensor/block.h), the embedding and logits vocab-parallel
// as in gpt_tp.cc; every tp rank of the stage runs the same actions in the same order.
double StageModel::tp_forward(int chunk, int micro) {
  const StageChunk& ch = chunks_[size_t(chunk)];
  Slot& s = slot(chunk, micro);
  const MicroInput& in = inputs_.at(size_t(micro));
  const TpDims d = tp_dims(cfg_, *tc_, shard_, in.B, in.T);
  if (d.N == 0) return 0;
  TensorComm& tc = *tc_;
  const bool bf16 = compute_ == DType::bf16;
  float* p0 = ch.embed || ch.head ? unit_params(0) : nullptr;
  if (ch.embed) {
    UnitSpan sp("forward", "embed");
    const float* wpe = p0 + view_rel_[1];
    if (cc_) wpe = cp_local_wpe(rep_, *cc_, wpe, d.T, d.C);  // the local rows' positions
    tensor::embedding_forward(tc, s.x, in.tokens, p0 + view_rel_[0], d.v0, d.Vr, wpe, full_a_, d.B,
                              d.T, d.C);
  }
  const float* x = s.x;
  for (int l = ch.begin; l < ch.end; ++l) {
    UnitSpan sp("forward", "L", l);
    LayerActs& a = s.layers[size_t(l - ch.begin)];
    tp_block_forward(tc, d, block_views(unit_params(l + 1), view_rel_, l), a, x, full_a_, full_b_,
                     dbuf_4c_, cc_, cp_key(l, chunk, micro));
    x = a.res3;
  }
  if (!ch.head) return 0;
  UnitSpan sp("forward", "head");
  const float* pf = unit_params(cfg_.layers + 1);
  const int64_t* r = view_rel_.data() + 2 + kViewsPerLayer * cfg_.layers;
  layernorm_out(s.lnf, s.lnf_h, s.lnf_mean, s.lnf_rstd, x, pf + r[0], pf + r[1], d.n, d.C);
  tensor::column_forward(tc, bf16, s.logits, act(s.lnf, s.lnf_h, d.C), p0 + view_rel_[0], nullptr,
                         full_a_, full_b_, d.N, d.C, int(d.Vr));
  return tensor::crossentropy_forward(tc, s.losses, s.lse, s.logits, in.targets, in.weights,
                                      ce_stats_, d.N, d.v0, d.Vr, cfg_.vocab);
}

// split: zero-bubble's input pass (model/tensor/block_split.h); the logits' and the linear
// layers' weight gradients are left to tp_backward_weight, which reads the logits' gradient
// kept in the slot and the blocks' stashes.
void StageModel::tp_backward(int chunk, int micro, float scale, bool split) {
  const StageChunk& ch = chunks_[size_t(chunk)];
  Slot& s = slot(chunk, micro);
  const MicroInput& in = inputs_.at(size_t(micro));
  const TpDims d = tp_dims(cfg_, *tc_, shard_, in.B, in.T);
  if (d.N == 0) return;
  TensorComm& tc = *tc_;
  const int C = d.C;
  const TpScratch scr = tp_scratch();
  if (ch.head) {
    UnitSpan sp("backward", "head");
    const int L = cfg_.layers;
    tensor::crossentropy_backward(s.logits, s.lse, in.targets, in.weights, scale, d.N, d.v0, d.Vr,
                                  cfg_.vocab);
    const bool bf16 = compute_ == DType::bf16;
    const float* wte = unit_params(0) + view_rel_[0];
    if (split)
      tensor::column_backward_input(tc, bf16, dbuf_c_, s.logits, wte, full_b_, d.N, C, int(d.Vr));
    else
      tensor::column_backward(tc, bf16, dbuf_c_, unit_grads(0) + view_rel_[0], nullptr, s.logits,
                              act(s.lnf, s.lnf_h, C), wte, full_a_, full_b_, d.N, C, int(d.Vr));
    const int64_t* r = view_rel_.data() + 2 + kViewsPerLayer * L;
    float* gf = unit_grads(L + 1);
    tp_final_norm_backward(tc, d, scr, unit_params(L + 1) + r[0], gf + r[0], gf + r[1],
                           s.layers.back().res3, s.lnf_mean, s.lnf_rstd);
  } else {
    std::memcpy(dres_, s.gin, sizeof(float) * size_t(d.n * C));
  }
  for (int l = ch.end - 1; l >= ch.begin; --l) {
    UnitSpan sp("backward", "L", l);
    const size_t i = size_t(l - ch.begin);
    const Block w = block_views(unit_params(l + 1), view_rel_, l);
    const Block g = block_views(unit_grads(l + 1), view_rel_, l);
    const float* x = i == 0 ? s.x : s.layers[i - 1].res3;
    if (split)
      tp_block_backward_input(tc, d, scr, w, g, s.layers[i], x, s.stash[i],
                              cp_key(l, chunk, micro));
    else
      tp_block_backward(tc, d, scr, w, g, s.layers[i], x, cp_key(l, chunk, micro));
  }
  if (ch.embed) {
    UnitSpan sp("backward", "embed");
    float* g0 = unit_grads(0);
    const float* dwpe = tp_embedding_backward(tc, d, scr, g0 + view_rel_[0], in.tokens);
    float* gwpe = g0 + view_rel_[1];
    if (cc_)  // rows of this rank's positions
      cp_add_wpe_grad(gwpe, *cc_, dwpe, d.T, C);
    else
      for (int64_t e = 0; e < int64_t(d.T) * C; ++e) gwpe[e] += dwpe[e];
  } else {
    std::memcpy(s.gout, dres_, sizeof(float) * size_t(d.n * C));
  }
}

TpDims StageModel::tp_dims_of(int micro) const {
  const MicroInput& in = inputs_.at(size_t(micro));
  return tp_dims(cfg_, *tc_, shard_, in.B, in.T);
}

TpScratch StageModel::tp_scratch() const {
  return {dres_, dbuf_c_, dbuf_4c_, dqkv_, full_a_, full_b_, rep_, cc_};
}

void StageModel::tp_backward_weight(int chunk, int micro) {
  const StageChunk& ch = chunks_[size_t(chunk)];
  Slot& s = slot(chunk, micro);
  const TpDims d = tp_dims_of(micro);
  if (d.N == 0) return;
  TensorComm& tc = *tc_;
  const bool bf16 = compute_ == DType::bf16;
  if (ch.head) {  // dwte (Vr, C) += dlogits^T @ f(lnf): lnf all-gathered again under SP
    UnitSpan sp("weight", "head");
    tensor::column_backward_weight(tc, bf16, unit_grads(0) + view_rel_[0], nullptr, s.logits,
                                   act(s.lnf, s.lnf_h, d.C), full_a_, full_b_, d.N, d.C,
                                   int(d.Vr));
  }
  const TpScratch scr = tp_scratch();
  for (int l = ch.end - 1; l >= ch.begin; --l) {
    UnitSpan sp("weight", "L", l);
    const size_t i = size_t(l - ch.begin);
    tp_block_backward_weight(tc, d, scr, block_views(unit_grads(l + 1), view_rel_, l),
                             s.layers[i], s.stash[i]);
  }
}

int64_t StageModel::activation_bytes() const { return int64_t(acts_.bytes()); }

std::vector<StageChunk> split_layers(const GPTConfig& cfg, int seq, int stages, int virt,
                                     const std::vector<int>& split) {
  return split_layers(cfg, stages, virt, split, estimate_layer_costs(cfg, seq, false));
}

}  // namespace strata::model
