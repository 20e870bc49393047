// GPT over the flat parameter and gradient buffers: the table, initialisation, units and
// hooks, and the passes of the one part it is (model/part.h: the chunk [0, L) with the
// embedding and the head, one activation slot), whatever its tensor-, context- or
// expert-parallel group.
//
// Terms: B batch, T time, C channels, NH heads, Vp padded vocabulary, N = B*T rows.
// Every matmul folds (B, T) into N rows so BLAS sees one large GEMM per layer and pass.
// Activations for (max_batch, seq) are allocated once; a call with smaller (B, T) uses the
// first N rows of each. Per block and row the part keeps 16C + 2*2 + NH floats (model/block.h;
// under bf16 compute 2C + 2*2 + NH floats and 14C bf16 values), plus the embedding's output,
// the final norm's, the logits (N, Vp) and the losses.
// Cost per token: forward ~2*(12*L*C^2 + C*Vp) GEMM flops + ~2*L*C*T attention flops
// (causal, T/2 keys on average), backward about twice that (plus the attention recompute).
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
#include "model/tensor/vocab.h"

namespace strata::model {

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
  Impl& im = *impl_;
  im.cfg = cfg_;
  if (tp_) im.tc = tp_;
  im.shard = shard_;
  im.cp = cp_;
  im.bf16 = compute_ == DType::bf16;
  STRATA_CHECK(!ep || ep->size() == 1 || cfg_.moe.enabled(), "expert parallelism needs --experts");
  if (ep && ep->size() > 1) experts_ = {ep->size(), ep->rank()};
  impl_->experts = experts_;
  table_ = build_param_table(cfg_, shard_, experts_);
  num_params_ = table_.back().offset + numel(table_.back().shape);
  im.set_table(table_);
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
  im.whole = {0, cfg_.layers, true, true};
  // Context-parallel attention (ring, Ulysses) reads and writes fp32 qkv and outputs.
  const bool attn_f32 = !im.bf16 || cp_ != nullptr;
  auto carve = [&](float* base) {
    Carver c{base};
    carve_slot(c, im.slot, im.whole, cfg_, a, im.bf16, /*split=*/false, attn_f32);
    im.carve_scratch(c, a);
    return c.used;
  };
  im.acts_buf = Buffer(MemCategory::activations, sizeof(float) * size_t(carve(nullptr)));
  carve(im.acts_buf.as<float>());
  const int64_t N = a.N;
  im.input_buf = Buffer(MemCategory::activations, (2 * sizeof(int32_t) + sizeof(float)) * N);
  im.tokens = im.input_buf.as<int32_t>();
  im.targets = im.tokens + N;
  im.weights = reinterpret_cast<float*>(im.targets + N);
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
  im.has_weights = weights != nullptr;
  if (cp_) {
    im.T = cp_take_inputs(*cp_, {tokens, targets, weights, B, T}, im.tokens, im.targets,
                          im.weights);  // the local rows
  } else if (N > 0) {
    std::memcpy(im.tokens, tokens, sizeof(int32_t) * N);
    std::memcpy(im.targets, targets, sizeof(int32_t) * N);
    if (weights) std::memcpy(im.weights, weights, sizeof(float) * N);
  }
  im.hidden_valid = false;
  const TokenIdsScope named(im, ids, B);  // after the cp rows: im.T holds the local rows
  double loss = im.forward(im.whole, im.slot, im.input(), 0, Head::loss);
  im.forward_done = true;
  im.logits_valid = !cp_ && !tp_;  // under cp the local rows only; under tp vocabulary-sharded
  if (cp_) cp_->group().all_reduce(&loss, 1);  // the whole sequence's loss on every cp rank
  return loss;
}

void GPT::backward(float scale) {
  Impl& im = *impl_;
  STRATA_CHECK(im.forward_done, "backward called without a forward with targets before it");
  im.forward_done = false;
  im.logits_valid = false;
  PhaseScope phase(PhaseKind::backward);
  im.backward(im.whole, im.slot, im.input(), scale, 0, /*split=*/false, Head::loss);
}

namespace {

// The tensor-parallel logits (N, Vr) of every rank gathered, columns in vocabulary order,
// into (N, Vp) in scratch (inference only: sampling).
const float* gather_vocab(GPT::Impl& im, TensorComm& tc, TpShard s, int64_t N) {
  const int64_t Vp = im.cfg.padded_vocab;
  const size_t need = sizeof(float) * size_t(2 * N * Vp);
  if (im.logits_full.bytes() < need) im.logits_full = Buffer(MemCategory::activations, need);
  float* blocks = im.logits_full.as<float>();
  float* out = blocks + N * Vp;
  std::vector<size_t> counts(size_t(s.size));
  for (int r = 0; r < s.size; ++r) counts[size_t(r)] = size_t(N * vocab_slice(Vp, {s.size, r}).size());
  if (N > 0) tc.group().all_gather_v_async(im.slot.logits, blocks, counts, DType::f32)->wait();
  const float* src = blocks;
  for (int r = 0; r < s.size; ++r) {
    const VocabSlice vs = vocab_slice(Vp, {s.size, r});
    for (int64_t row = 0; row < N; ++row)
      std::memcpy(out + row * Vp + vs.begin, src + row * vs.size(), sizeof(float) * vs.size());
    src += N * vs.size();
  }
  return out;
}

}  // namespace

const float* GPT::logits(const int32_t* tokens, int B, int T) {
  Impl& im = *impl_;
  if (!tokens) {
    STRATA_CHECK(im.logits_valid, "logits: no forward since the last backward");
    return im.slot.logits;
  }
  check_inputs(cfg_, max_batch_, tokens, nullptr, B, T);
  PhaseScope phase(PhaseKind::forward);
  im.forward_done = false;
  im.hidden_valid = false;
  im.B = B;
  im.T = T;
  // Logits (B, t, Vp) of im.tokens (B, t): this rank's rows, gathered over the vocabulary
  // under tp.
  auto local_logits = [&](int t) -> const float* {
    im.T = t;
    const bool training = im.moe && im.moe->training();
    if (im.moe) im.moe->set_training(false);  // inference: no router jitter
    im.forward(im.whole, im.slot, {im.tokens, nullptr, nullptr, B, t}, 0, Head::logits);
    if (im.moe) im.moe->set_training(training);
    return tp_ ? gather_vocab(im, *tp_, shard_, int64_t(B) * t) : im.slot.logits;
  };
  // Sequence parallelism splits rows over tp: a prompt is padded at its end (causal
  // attention: padding changes no earlier position) to rows it can split.
  const int multiple = tp_ && tp_->sequence_parallel() ? shard_.size : 1;
  const float* out;
  if (cp_) {
    out = cp_logits(*cp_, cfg_.seq, cfg_.padded_vocab, im.logits_full, im.tokens, tokens, B, T,
                    multiple, local_logits);
  } else {
    int Tp = T;
    while (int64_t(B) * Tp % multiple != 0) ++Tp;
    STRATA_CHECK(Tp <= cfg_.seq, "logits: ", T, " tokens padded to ", Tp,
                 " for sequence parallelism exceed the position table (", cfg_.seq, ")");
    for (int b = 0; b < B; ++b) {
      std::memcpy(im.tokens + int64_t(b) * Tp, tokens + int64_t(b) * T, sizeof(int32_t) * T);
      std::fill(im.tokens + int64_t(b) * Tp + T, im.tokens + int64_t(b + 1) * Tp, 0);
    }
    float* o = const_cast<float*>(local_logits(Tp));
    const int64_t Vp = cfg_.padded_vocab;
    for (int b = 0; b < B && Tp != T; ++b)
      for (int t = 0; t < T; ++t)
        std::memmove(o + (int64_t(b) * T + t) * Vp, o + (int64_t(b) * Tp + t) * Vp,
                     sizeof(float) * Vp);
    out = o;
  }
  im.T = T;
  im.logits_valid = !cp_ && !tp_;
  return out;
}

TokenIdsScope::TokenIdsScope(GPT::Impl& im, const SampleIds& ids, int B) : im(im) {
  if (!im.moe || !ids.sample) return;
  im.token_positions.clear();
  if (im.cp) {
    const SeqLayout layout = im.cp->layout(im.T * im.cp->size());
    for (int t = 0; t < im.T; ++t) im.token_positions.push_back(layout.position(im.cp->rank(), t));
  }
  im.token_ids = {ids.sample, im.cp ? im.token_positions.data() : nullptr, B, im.T, ids.epoch};
  im.ids = &im.token_ids;
}

TokenIdsScope::~TokenIdsScope() { im.ids = nullptr; }

}  // namespace strata::model
