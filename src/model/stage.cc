#include "model/stage.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <numeric>

#include "comm/process_group.h"
#include "core/error.h"
#include "core/rng.h"
#include "model/context/gpt_cp.h"
#include "model/expert/moe.h"
#include "model/part.h"
#include "model/shard.h"
#include "model/stage_cost.h"
#include "model/tensor/vocab.h"

namespace strata::model {

struct StageModel::Chunk {
  std::vector<Slot> slots;
};

StageModel::StageModel(const GPTConfig& cfg, std::vector<StageChunk> chunks,
                       std::vector<int> slots, int max_batch, DType compute,
                       bool split_backward, TensorComm* tp, ContextComm* cp, bool allocate_state,
                       comm::ProcessGroup* ep)
    : cfg_(cfg), chunks_(std::move(chunks)), compute_(compute), split_(split_backward),
      tc_(tp && tp->size() > 1 ? tp : nullptr), cc_(cp && cp->size() > 1 ? cp : nullptr),
      ep_(ep && ep->size() > 1 ? ep : nullptr) {
  cfg_.validate();
  STRATA_CHECK(compute == DType::f32 || compute == DType::bf16, "model compute dtype ",
               dtype_name(compute), " is neither float nor bfloat16");
  STRATA_CHECK(max_batch >= 0, "max batch must be >= 0 (got ", max_batch, ")");
  if (tc_) shard_ = {tc_->size(), tc_->rank()};
  STRATA_CHECK(!tc_ || tc_->kv_share() == cost::tp_kv_share(cfg_.kv(), tc_->size()),
               "internal: the tp communicator shares key/value heads over ",
               tc_ ? tc_->kv_share() : 1, " ranks, the model over ",
               tc_ ? cost::tp_kv_share(cfg_.kv(), tc_->size()) : 1);
  STRATA_CHECK_SETTING(!ep_ || cfg_.moe.enabled(), "expert parallelism needs ", setting("experts"));
  if (ep_) experts_ = {ep_->size(), ep_->rank()};
  const int L = cfg_.layers, U = L + 2 + cfg_.moe.moe_layers(L);  // global units
  STRATA_CHECK(!chunks_.empty() && slots.size() == chunks_.size(), "stage: ", chunks_.size(),
               " chunks but ", slots.size(), " slot counts");
  std::vector<bool> held(size_t(U), false);
  for (const StageChunk& ch : chunks_) {
    STRATA_CHECK(ch.begin >= 0 && ch.begin < ch.end && ch.end <= L, "stage: chunk [", ch.begin,
                 ", ", ch.end, ") is not a non-empty range of the ", L, " layers");
    for (int l = ch.begin; l < ch.end; ++l) {
      held[size_t(l + 1)] = true;
      if (cfg_.moe.is_moe_layer(l)) held[size_t(L + 2 + cfg_.moe.moe_index(l))] = true;
    }
    if (ch.embed || (ch.head && cfg_.tied())) held[0] = true;  // untied: lm_head is in L+1
    if (ch.head) held[size_t(L + 1)] = true;
  }
  // Global units and views (the one-process layout), then the held units packed in order.
  const std::vector<ParamView> global = build_param_table(cfg_, shard_, experts_);
  unit_global_begin_.assign(size_t(U), INT64_MAX);
  std::vector<int64_t> unit_end(size_t(U), 0);
  for (const ParamView& v : global) {
    unit_global_begin_[size_t(v.unit)] = std::min(unit_global_begin_[size_t(v.unit)], v.offset);
    unit_end[size_t(v.unit)] = std::max(unit_end[size_t(v.unit)], v.offset + numel(v.shape));
  }
  unit_begin_.assign(size_t(U), -1);
  for (int u = 0; u < U; ++u) {
    if (!held[size_t(u)]) continue;
    units_.push_back(u);
    unit_begin_[size_t(u)] = num_params_;
    num_params_ += unit_end[size_t(u)] - unit_global_begin_[size_t(u)];
  }
  // Expert units follow every dense one in unit order (model/gpt.h).
  first_expert_ = int(std::find_if(units_.begin(), units_.end(), [&](int u) { return u >= L + 2; }) -
                      units_.begin());
  for (ParamView v : global) {
    if (!held[size_t(v.unit)]) continue;
    v.offset = unit_begin_[size_t(v.unit)] + (v.offset - unit_global_begin_[size_t(v.unit)]);
    table_.push_back(std::move(v));
  }
  if (allocate_state) {
    params_ = Buffer(MemCategory::parameters, sizeof(float) * size_t(num_params_));
    grads_ = Buffer(MemCategory::gradients, sizeof(float) * size_t(num_params_));
  }

  // The passes: the held units bound to this stage's buffers.
  part_ = std::make_unique<Part>();
  Part& p = *part_;
  p.cfg = cfg_;
  if (tc_) p.tc = tc_;
  p.shard = shard_;
  p.experts = experts_;
  p.cp = cc_;
  p.bf16 = compute_ == DType::bf16;
  p.set_table(global);
  p.unit_params.assign(size_t(U), nullptr);
  p.unit_grads.assign(size_t(U), nullptr);
  if (cfg_.moe.enabled()) {  // routing state per block and slot: micro-batches in flight
    const int most = *std::max_element(slots.begin(), slots.end());
    p.moe = std::make_shared<expert::MoE>(cfg_.moe, L, cfg_.dim, most, cfg_.hidden(), cfg_.llama());
    p.moe->set_tensor(tc_);
    if (cc_) p.moe->set_context(&cc_->group());
    if (ep_) p.moe->set_group(ep_);
  }
  for (int i = 0; allocate_state && i < num_units(); ++i)
    bind_unit(i, params() + unit_range(i).first, grads() + unit_range(i).first);

  // Activations: every slot of every chunk, then the shared backward scratch.
  // Under cp a sequence's rows are its local ones, T / C.
  const int cpn = cc_ ? cc_->size() : 1;
  ActShape a;
  a.N = int64_t(max_batch) * ((cfg_.seq + cpn - 1) / cpn);
  a.n = tc_ && tc_->sequence_parallel() ? (a.N + shard_.size - 1) / shard_.size : a.N;
  a.T = shard_.size;
  a.Vr = vocab_slice(cfg_.padded_vocab, shard_).size();
  for (size_t c = 0; c < chunks_.size(); ++c) {
    STRATA_CHECK(slots[c] >= 1, "stage: chunk ", c, " needs at least one slot (got ", slots[c], ")");
    state_.push_back(std::make_unique<Chunk>());
    state_.back()->slots.resize(size_t(slots[c]));
  }
  const bool attn_f32 = !p.bf16 || cc_;
  auto carve_all = [&](float* base) {
    Carver cv{base};
    for (size_t c = 0; c < chunks_.size(); ++c)
      for (Slot& s : state_[c]->slots) carve_slot(cv, s, chunks_[c], cfg_, a, p.bf16, split_, attn_f32);
    p.carve_scratch(cv, a, chunks_, attn_f32);
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

std::pair<int64_t, int64_t> StageModel::global_range(int unit) const {
  STRATA_CHECK(holds(unit), "stage: unit ", unit, " is not held by this stage");
  return unit_range(local_of(unit));
}

int StageModel::local_of(int unit) const {
  const auto it = std::find(units_.begin(), units_.end(), unit);
  STRATA_CHECK(it != units_.end(), "stage: unit ", unit, " is not held by this stage");
  return int(it - units_.begin());
}

std::pair<int64_t, int64_t> StageModel::unit_range(int local) const {
  STRATA_CHECK(local >= 0 && local < num_units(), "stage: local unit ", local, " outside [0, ",
               num_units(), ")");
  const int64_t b = unit_begin_[size_t(units_[size_t(local)])];
  const int64_t e = local + 1 == num_units() ? num_params_ : unit_begin_[size_t(units_[size_t(local + 1)])];
  return {b, e};
}

std::vector<int> StageModel::chunk_starts() const {
  std::vector<int> out;
  for (const StageChunk& ch : chunks_) {
    const int first = local_of(ch.begin + 1);  // the chunk's first block
    if (first > 0 && !(ch.embed && first == 1)) out.push_back(first);
  }
  return out;
}

void StageModel::bind_unit(int local, float* params, float* grads) {
  STRATA_CHECK(local >= 0 && local < num_units(), "bind_unit: local unit ", local,
               " outside [0, ", num_units(), ")");
  part_->unit_params[size_t(units_[size_t(local)])] = params;
  part_->unit_grads[size_t(units_[size_t(local)])] = grads;
}

void StageModel::set_hooks(UnitHooks hooks) {
  if (!hooks.before_unit && !hooks.after_unit) {
    part_->hooks = {};
    return;
  }
  // The part reports global units; the stage's users number its held units.
  std::vector<int> local(part_->unit_params.size(), -1);
  for (int i = 0; i < num_units(); ++i) local[size_t(units_[size_t(i)])] = i;
  auto before = std::move(hooks.before_unit);
  auto after = std::move(hooks.after_unit);
  part_->hooks.before_unit = [before, local](int u, Pass p) {
    if (before) before(local[size_t(u)], p);
  };
  part_->hooks.after_unit = [after, local](int u, Pass p) {
    if (after) after(local[size_t(u)], p);
  };
}

std::pair<int64_t, int64_t> StageModel::wte_range() const {
  if (!holds(0)) return {0, 0};
  const int64_t b = unit_begin_[0] + part_->view_rel[0];
  return {b, b + vocab_slice(cfg_.padded_vocab, shard_).size() * cfg_.dim};
}

expert::MoE* StageModel::moe() const { return part_->moe.get(); }

TensorLayout StageModel::tensor_layout() const {
  const std::vector<ParamView> global = build_param_table(cfg_, shard_, experts_);
  const bool first = std::any_of(chunks_.begin(), chunks_.end(), [](auto& c) { return c.embed; });
  TensorLayout out;
  size_t view = 0;
  for (TensorPiece p : model::tensor_layout(cfg_, shard_, experts_)) {
    while (global[view].offset + numel(global[view].shape) <= p.local_offset) ++view;
    const int u = global[view].unit;
    if (!holds(u)) continue;
    p.local_offset = unit_begin_[size_t(u)] + p.local_offset - unit_global_begin_[size_t(u)];
    if (u == 0 && !first) p.primary = false;  // the first stage writes the embeddings
    out.push_back(std::move(p));
  }
  return out;
}

// Global element index of element q of a box (row-major in the box) of a 1-D or 2-D tensor.
static int64_t global_index(const TensorPiece& p, int64_t q) {
  if (p.extents.size() == 1) return p.offsets[0] + q;
  return (p.offsets[0] + q / p.extents[1]) * p.global_shape[1] + p.offsets[1] + q % p.extents[1];
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

void StageModel::init(uint64_t seed) {
  if (part_->moe) part_->moe->set_seed(seed);  // the router jitter's key
  const double resid_std = 0.02 / std::sqrt(2.0 * cfg_.layers);
  const std::vector<ShardedView> sharded = build_sharded_table(cfg_, shard_, experts_);
  const bool moe = cfg_.moe.enabled();
  const std::map<std::string, uint64_t> stream =
      moe ? moe_init_streams(cfg_, shard_) : std::map<std::string, uint64_t>{};
  for (size_t i = 0; i < sharded.size(); ++i) {
    const ParamView& v = sharded[i].view;
    if (!holds(v.unit)) continue;  // each view draws from its own stream: skipping is exact
    const uint64_t si = moe ? stream.at(v.name) : uint64_t(i);
    float* base = checked(part_->unit_params[size_t(v.unit)], v.unit, "parameter");
    base -= unit_global_begin_[size_t(v.unit)];  // indexed by one-process flat offset
    const std::string& name = v.name;
    auto ends_with = [&](const char* s) {
      const size_t k = std::strlen(s);
      return name.size() >= k && name.compare(name.size() - k, k, s) == 0;
    };
    // Llama (Hugging Face's initialisation): norms 1, every matrix N(0, 0.02).
    const bool ones = ends_with("ln_1.weight") || ends_with("ln_2.weight") ||
                      name == "ln_f.weight" || ends_with("layernorm.weight") ||
                      name == "norm.weight";
    const float stdv = float(ends_with("c_proj.weight") ? resid_std : 0.02);
    // Rows of wte (and an untied lm_head) past the real vocabulary stay zero: no token
    // selects them and their logits are ignored, so they never receive a gradient.
    const bool vocab_rows = name == "wte" || name == "embed_tokens.weight" || name == "lm_head.weight";
    const int64_t live = vocab_rows ? int64_t(cfg_.vocab) * cfg_.dim : INT64_MAX;
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

void StageModel::set_inputs(std::vector<MicroInput> micro, std::vector<SampleIds> ids) {
  inputs_ = std::move(micro);
  for (const MicroInput& in : inputs_)
    if (in.doc_start) check_doc_starts(in.doc_start, in.B, in.T);
  STRATA_CHECK(ids.empty() || ids.size() == inputs_.size(), "stage: ", ids.size(),
               " sample-id lists for ", inputs_.size(), " micro-batches");
  ids_.clear();
  if (part_->moe && !ids.empty()) {
    // Under cp a row's position is its global one (the cp layout's), as model::GPT keys it.
    const int T = inputs_.empty() ? 0 : inputs_[0].T;
    positions_ = cc_ ? cc_->layout(T).positions(cc_->rank()) : std::vector<int>{};
    for (size_t m = 0; m < inputs_.size(); ++m) {
      const MicroInput& in = inputs_[m];
      STRATA_CHECK(in.B == 0 || in.T == T, "stage: micro-batches of ", T, " and ", in.T, " tokens");
      ids_.push_back({ids[m].sample, cc_ ? positions_.data() : nullptr, in.B,
                      cc_ ? T / cc_->size() : T, ids[m].epoch});
    }
  }
  if (!cc_) return;
  // This cp rank's rows of every micro-batch, into storage the step keeps.
  int64_t id_count = 0, weights = 0;
  for (const MicroInput& in : inputs_) {
    id_count += 2 * int64_t(in.B) * in.T / cc_->size();
    if (in.weights) weights += int64_t(in.B) * in.T / cc_->size();
  }
  cp_ids_.resize(size_t(id_count));
  cp_weights_.resize(size_t(weights));
  int32_t* id = cp_ids_.data();
  float* w = cp_weights_.data();
  for (MicroInput& in : inputs_) {
    if (in.B == 0) continue;
    const int64_t n = int64_t(in.B) * in.T / cc_->size();
    const int Tl = cp_take_inputs(*cc_, in, id, id + n, in.weights ? w : nullptr);
    in.tokens = id;
    in.targets = id + n;
    id += 2 * n;
    if (in.weights) {
      in.weights = w;
      w += n;
    }
    in.T = Tl;
  }
}

int StageModel::slot_index(int chunk, int micro) const {
  return micro % int(state_[size_t(chunk)]->slots.size());
}

void StageModel::zero_grads() {
  for (int i = 0; i < num_units(); ++i) {
    float* g = checked(part_->unit_grads[size_t(units_[size_t(i)])], units_[size_t(i)], "gradient");
    const auto [b, e] = unit_range(i);
    std::memset(g, 0, sizeof(float) * size_t(e - b));
  }
}

int64_t StageModel::message_floats(int micro) const {
  STRATA_CHECK(micro >= 0 && micro < int(inputs_.size()), "stage: micro-batch ", micro,
               " outside the ", inputs_.size(), " inputs of this step");
  const MicroInput& in = inputs_[size_t(micro)];
  const int64_t N = int64_t(in.B) * in.T;
  return (tc_ ? tc_->local_rows(N) : N) * cfg_.dim;
}

Slot& StageModel::slot(int chunk, int micro) {
  STRATA_CHECK(chunk >= 0 && chunk < int(chunks_.size()), "stage: chunk ", chunk, " outside [0, ",
               chunks_.size(), ")");
  std::vector<Slot>& s = state_[size_t(chunk)]->slots;
  return s[size_t(micro) % s.size()];
}

float* StageModel::input(int chunk, int micro) { return slot(chunk, micro).x; }
const float* StageModel::output(int chunk, int micro) { return slot(chunk, micro).out(); }
float* StageModel::grad_input(int chunk, int micro) {
  return checked(slot(chunk, micro).gin, -1, "output-gradient (head chunk)");
}
const float* StageModel::grad_output(int chunk, int micro) {
  return checked(slot(chunk, micro).gout, -1, "input-gradient (embed chunk)");
}

double StageModel::forward(int chunk, int micro) {
  part_->ids = ids_.empty() || !ids_.at(size_t(micro)).sample ? nullptr : &ids_[size_t(micro)];
  const double loss = part_->forward(chunks_[size_t(chunk)], slot(chunk, micro),
                                     inputs_.at(size_t(micro)), slot_index(chunk, micro), Head::loss);
  part_->ids = nullptr;
  return loss;
}

void StageModel::backward(int chunk, int micro, float scale) {
  part_->backward(chunks_[size_t(chunk)], slot(chunk, micro), inputs_.at(size_t(micro)), scale,
                  slot_index(chunk, micro), /*split=*/false, Head::loss);
}

void StageModel::backward_input(int chunk, int micro, float scale) {
  STRATA_CHECK(split_, "stage: backward_input needs a model built with split_backward");
  part_->backward(chunks_[size_t(chunk)], slot(chunk, micro), inputs_.at(size_t(micro)), scale,
                  slot_index(chunk, micro), /*split=*/true, Head::loss);
}

void StageModel::backward_weight(int chunk, int micro) {
  STRATA_CHECK(split_, "stage: backward_weight needs a model built with split_backward");
  part_->backward_weight(chunks_[size_t(chunk)], slot(chunk, micro), inputs_.at(size_t(micro)),
                         slot_index(chunk, micro));
}

int64_t StageModel::activation_bytes() const { return int64_t(acts_.bytes()); }
int64_t StageModel::recompute_ns() const { return part_->recompute_ns; }

std::vector<StageChunk> split_layers(const GPTConfig& cfg, int seq, int stages, int virt,
                                     const std::vector<int>& split) {
  return split_layers(cfg, stages, virt, split, estimate_layer_costs(cfg, seq, false));
}

}  // namespace strata::model
