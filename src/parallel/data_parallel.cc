#include "parallel/data_parallel.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "core/trace.h"
#include "kernels/adamw.h"
#include "nlohmann/json.hpp"
#include "parallel/grad_reducer.h"
#include "parallel/param_gatherer.h"
#include "parallel/precision.h"
#include "parallel/zero_comm.h"
#include "model/tensor/collectives.h"

namespace strata::parallel {

using model::Pass;

nlohmann::json MemoryReport::to_json() const {
  return {{"parameters", parameters},
          {"gradients", gradients},
          {"optimizer", optimizer},
          {"activations", activations},
          {"comm", comm},
          {"model_states", model_states()},
          {"total", total()}};
}

DataParallelEngine::DataParallelEngine(model::GPT& model, comm::ProcessGroup& group,
                                       const DataParallelOptions& opts, const OptimConfig& optim,
                                       uint64_t seed)
    : model_(model),
      pg_(group),
      opts_(opts),
      optim_(optim),
      layout_(model.num_params(), group.size(), group.rank()),
      bf16_(opts.precision == Precision::bf16),
      wdtype_(bf16_ ? DType::bf16 : DType::f32),
      wbytes_(int(dtype_size(wdtype_))) {
  opts_.validate();
  STRATA_CHECK(model.params() == nullptr && model.grads() == nullptr,
               "the data-parallel engine owns the parameter and gradient buffers: build the model "
               "with allocate_state = false (parallel::model_owns_state)");
  for (int u = 0; u < model.num_units(); ++u) {
    const auto [b, e] = model.unit_range(u);
    units_.push_back({b, e});
  }
  // At stages 2-3 bucket buffers are the gradient memory those stages keep, and they hold
  // 3 buckets at once: no bucket there is larger than a layer, whatever the cap.
  int64_t cap = bucket_cap_elems(opts_.bucket_mb, wbytes_);
  if (opts_.stage >= 2) {
    int64_t max_block = 1;
    for (size_t u = 1; u < units_.size(); ++u) max_block = std::max(max_block, units_[u].size());
    cap = std::min(cap, max_block);
  }
  buckets_ = plan_buckets(units_, cap);
  opt_range_ = opts_.stage == 0 ? Range{0, layout_.psi()} : layout_.own();
  decay_ = model::decay_ranges(model.param_table(), opt_range_.begin, opt_range_.end);
  if (model.tensor_comm() && model.tensor_comm()->rank() != 0)
    for (const model::ParamView& v : model.param_table())
      if (v.replicated) replicated_.push_back({v.offset, v.offset + numel(v.shape)});
  allocate_state();
  reducer_ = std::make_unique<GradReducer>(*this);
  if (opts_.stage == 3) gatherer_ = std::make_unique<ParamGatherer>(*this);
  init_params(seed);
  model_.set_hooks(
      {[this](int u, Pass p) { before_unit(u, p); }, [this](int u, Pass p) { after_unit(u, p); }});
}

DataParallelEngine::~DataParallelEngine() {
  // Collectives in flight read engine buffers: let them finish before the buffers go.
  try {
    if (reducer_) reducer_->wait_all();
    if (gatherer_) gatherer_->invalidate();
  } catch (...) {
  }
  model_.set_hooks({});
}

void DataParallelEngine::allocate_state() {
  const int64_t psi = layout_.psi(), S = layout_.shard_elems();
  const int64_t full_or_shard_p = opts_.stage >= 3 ? S : psi;
  const int64_t full_or_shard_g = opts_.stage >= 2 ? S : psi;
  const int64_t opt = opts_.stage >= 1 ? S : psi;
  params_ = Buffer(MemCategory::parameters, size_t(full_or_shard_p) * wbytes_);
  grads_ = Buffer(MemCategory::gradients, size_t(full_or_shard_g) * wbytes_);
  if (bf16_) master_ = Buffer(MemCategory::optimizer, size_t(opt) * sizeof(float));
  exp_avg_ = Buffer(MemCategory::optimizer, size_t(opt) * sizeof(float));
  exp_avg_sq_ = Buffer(MemCategory::optimizer, size_t(opt) * sizeof(float));
  if (bf16_) {
    // fp32 compute scratch: slot 0 for unit 0, slot 1 for any other unit.
    int64_t other = 0;
    for (size_t u = 1; u < units_.size(); ++u) other = std::max(other, units_[u].size());
    const int64_t n0 = units_[0].size();
    scratch_ = Buffer(MemCategory::activations, size_t(2 * (n0 + other)) * sizeof(float));
    float* p = scratch_.as<float>();
    scratch_params_[0] = p;
    scratch_grads_[0] = p + n0;
    scratch_params_[1] = p + 2 * n0;
    scratch_grads_[1] = p + 2 * n0 + other;
  }
}

// GPT-2 initialisation is defined on the full flat buffer; ranks that keep less compute it
// in a temporary fp32 buffer (category other, freed before training) and keep their part.
void DataParallelEngine::init_params(uint64_t seed) {
  const int64_t psi = layout_.psi();
  // Full fp32 weights exist already as the fp32 parameters (stages 0-2) or the bf16 master
  // (stage 0); otherwise a temporary holds them.
  Buffer tmp;
  float* full = nullptr;
  if (!bf16_ && opts_.stage < 3) {
    full = params_.as<float>();
  } else if (bf16_ && opts_.stage == 0) {
    full = master_.as<float>();
  } else {
    tmp = Buffer(MemCategory::other, size_t(psi) * sizeof(float));
    full = tmp.as<float>();
  }
  for (size_t u = 0; u < units_.size(); ++u)
    model_.bind_unit(int(u), full + units_[u].begin, nullptr);
  model_.init(seed);
  const Range own = layout_.own();
  if (bf16_ && full != master_.as<float>())
    std::memcpy(master_.data(), full + opt_range_.begin, sizeof(float) * opt_range_.size());
  if (bf16_ && opts_.stage < 3) narrow(params_.data(), full, psi, wdtype_);
  if (opts_.stage == 3) narrow(params_.data(), full + own.begin, own.size(), wdtype_);
  ++params_version_;
  // Units whose memory never moves are bound once; the others are bound by the hooks.
  for (size_t u = 0; u < units_.size(); ++u) {
    const int unit = int(u);
    if (!bf16_ && opts_.stage <= 1)
      model_.bind_unit(unit, params_.as<float>() + units_[u].begin,
                       grads_.as<float>() + units_[u].begin);
    else if (!bf16_ && opts_.stage == 2)
      model_.bind_unit(unit, params_.as<float>() + units_[u].begin, nullptr);
    else
      model_.bind_unit(unit, nullptr, nullptr);
  }
}

// ---- hooks ----------------------------------------------------------------------------------

float* DataParallelEngine::fp32_params_for(int unit) {
  const void* src = nullptr;
  if (gatherer_) {
    src = gatherer_->acquire(unit, current_pass_);
  } else {
    src = elem_ptr(params_.data(), units_[unit].begin, wdtype_);
  }
  if (!bf16_) return static_cast<float*>(const_cast<void*>(src));
  const int slot = unit == 0 ? 0 : 1;
  if (scratch_unit_[slot] != unit || scratch_version_[slot] != params_version_) {
    widen(scratch_params_[slot], src, units_[unit].size(), wdtype_);
    scratch_unit_[slot] = unit;
    scratch_version_[slot] = params_version_;
  }
  return scratch_params_[slot];
}

float* DataParallelEngine::fp32_grads_for(int unit) {
  if (bf16_) {
    float* g = scratch_grads_[unit == 0 ? 0 : 1];
    std::memset(g, 0, sizeof(float) * units_[unit].size());
    return g;
  }
  return static_cast<float*>(reducer_->unit_grads(unit));
}

void DataParallelEngine::before_unit(int unit, Pass pass) {
  current_pass_ = pass;
  if (!bf16_ && opts_.stage <= 1) return;  // bound once, in place
  float* p = fp32_params_for(unit);
  float* g = nullptr;
  if (pass == Pass::backward)
    g = fp32_grads_for(unit);
  else if (bf16_)
    g = scratch_grads_[unit == 0 ? 0 : 1];
  model_.bind_unit(unit, p, g);
}

void DataParallelEngine::after_unit(int unit, Pass pass) {
  if (pass == Pass::backward) {
    if (bf16_)
      add_f32_into(reducer_->unit_grads(unit), scratch_grads_[unit == 0 ? 0 : 1],
                   units_[unit].size(), wdtype_);
    reducer_->unit_done(unit);
  }
  if (gatherer_) gatherer_->release(unit, pass);
}

// ---- step -----------------------------------------------------------------------------------

void DataParallelEngine::begin_step() {
  if (model_.tensor_comm()) tp_bytes_at_step_begin_ = model_.tensor_comm()->bytes();
  reducer_->begin_step();
  std::memset(grads_.data(), 0, grads_.bytes());
}

void DataParallelEngine::begin_micro(int micro, int num_micro) {
  reducer_->begin_micro(micro, num_micro);
}

void DataParallelEngine::end_backward() {
  reducer_->finish();
  if (model_.tensor_comm())
    tp_bytes_last_step_ = model_.tensor_comm()->bytes() - tp_bytes_at_step_begin_;
}

int64_t DataParallelEngine::grad_reduce_bytes_last_step() const {
  return reducer_->bytes_this_step();
}

// Sum of squares of g (the gradients of [b, e)) without the replicated views, whose squares
// tp rank 0 counts (replicated_ is sorted and empty on rank 0).
static double sum_squares_counted(const float* g, int64_t b, int64_t e,
                                  const std::vector<Range>& replicated) {
  double sum = 0;
  int64_t at = b;
  for (const Range& r : replicated) {
    if (r.end <= at) continue;
    if (r.begin >= e) break;
    if (r.begin > at) sum += kernels::sum_squares(g + (at - b), r.begin - at);
    at = std::max(at, r.end);
  }
  if (at < e) sum += kernels::sum_squares(g + (at - b), e - at);
  return sum;
}

// Gradient of global element i of opt_range_, in the working dtype.
static const void* grad_at(const Buffer& grads, int stage, int64_t i, int64_t own_begin, DType t) {
  return elem_ptr(grads.data(), stage >= 2 ? i - own_begin : i, t);
}

// Runs fn(begin, end, fp32 grads of [begin, end)) over opt_range_ in pieces no longer than
// the scratch (bf16) or in one piece (fp32).
template <typename Fn>
static void for_grad_chunks(Range r, const Buffer& grads, int stage, int64_t own_begin, DType t,
                            float* scratch, int64_t chunk, Fn&& fn) {
  for (int64_t b = r.begin; b < r.end;) {
    const int64_t e = t == DType::f32 ? r.end : std::min(r.end, b + chunk);
    const void* g = grad_at(grads, stage, b, own_begin, t);
    if (t == DType::f32) {
      fn(b, e, static_cast<const float*>(g));
    } else {
      widen(scratch, g, e - b, t);
      fn(b, e, scratch);
    }
    b = e;
  }
}

double DataParallelEngine::local_grad_sum_squares() {
  double sum = 0;
  const int64_t chunk = bf16_ ? units_[0].size() : 0;
  for_grad_chunks(
      opt_range_, grads_, opts_.stage, layout_.own().begin, wdtype_, scratch_grads_[0], chunk,
      [&](int64_t b, int64_t e, const float* g) { sum += sum_squares_counted(g, b, e, replicated_); });
  return sum;
}

void DataParallelEngine::apply_adamw(float lr, float grad_scale) {
  const kernels::AdamWStep s = adamw_step(optim_, lr, steps_ + 1, grad_scale);
  const int64_t lo = opt_range_.begin, own_begin = layout_.own().begin;
  float* weights =
      bf16_ ? master_.as<float>() - lo : params_.as<float>() - (opts_.stage >= 3 ? own_begin : 0);
  float* m = exp_avg_.as<float>() - lo;
  float* v = exp_avg_sq_.as<float>() - lo;
  const int64_t chunk = bf16_ ? units_[0].size() : 0;
  for (const model::DecayRange& d : decay_) {
    for_grad_chunks({d.begin, d.end}, grads_, opts_.stage, own_begin, wdtype_, scratch_grads_[0],
                    chunk, [&](int64_t b, int64_t e, const float* g) {
                      kernels::adamw_update(weights + b, g, m + b, v + b, e - b, d.decay, s);
                    });
  }
}

// Working parameters from the optimizer's weights: bf16 rounding, then (stages 1-2) every
// rank's updated shard gathered into the full buffer; stage 3 drops gathered units.
void DataParallelEngine::refresh_working_params() {
  ++params_version_;
  const Range own = layout_.own();
  if (bf16_) {
    const int64_t at = opts_.stage >= 3 ? 0 : opt_range_.begin;
    narrow(elem_ptr(params_.data(), at, wdtype_), master_.as<float>(), opt_range_.size(), wdtype_);
  }
  if (opts_.stage == 1 || opts_.stage == 2) {
    const Range all{0, layout_.psi()};
    gather_range_async(pg_, layout_, elem_ptr(params_.data(), own.begin, wdtype_), params_.data(),
                       all, wdtype_, "params all")
        ->wait();
  }
  if (gatherer_) {
    gatherer_->invalidate();
    gatherer_->prime();
  }
}

const float* DataParallelEngine::full_params() const {
  return opts_.stage < 3 && !bf16_ ? params_.as<float>() : nullptr;
}

float DataParallelEngine::step(float lr, double extra_sum_sq, float* clip) {
  STRATA_CHECK(reducer_->idle(), "step: end_backward() must be called before step()");
  double sum_sq;
  {
    TraceSpan span(tracer(), "optimizer", "compute");
    sum_sq = local_grad_sum_squares();
  }
  // Stage 0 ranks hold identical full gradients; sharded stages add their shards' sums.
  if (opts_.stage >= 1) sum_sq = sum_over_ranks(pg_, sum_sq);
  if (model_.tensor_comm())  // async: on the tp group's own thread (and trace track)
    model_.tensor_comm()->group().all_reduce_async(&sum_sq, 1)->wait();
  sum_sq += extra_sum_sq;
  const float scale = kernels::clip_scale(sum_sq, optim_.grad_clip);
  if (clip) *clip = scale;
  {
    TraceSpan span(tracer(), "optimizer", "compute");
    apply_adamw(lr, scale);
  }
  ++steps_;
  refresh_working_params();
  return float(std::sqrt(sum_sq));
}

// ---- accounting and checkpoints -------------------------------------------------------------

MemoryReport DataParallelEngine::memory_report() const {
  MemoryReport r;
  r.parameters = int64_t(params_.bytes());
  r.gradients = int64_t(grads_.bytes());
  r.optimizer = int64_t(master_.bytes() + exp_avg_.bytes() + exp_avg_sq_.bytes());
  r.activations = int64_t(scratch_.bytes());
  r.comm = reducer_->buffer_bytes() + (gatherer_ ? gatherer_->buffer_bytes() : 0);
  return r;
}

std::vector<StateShard> DataParallelEngine::state_shards() {
  const Range own = layout_.own();
  std::vector<StateShard> out;
  if (bf16_) {
    out.push_back({"params", DType::f32, opt_range_.begin, opt_range_.end, own.begin, own.end,
                   master_.data()});
  } else {
    const Range held = opts_.stage >= 3 ? own : Range{0, layout_.psi()};
    out.push_back({"params", DType::f32, held.begin, held.end, own.begin, own.end, params_.data()});
  }
  out.push_back({"exp_avg", DType::f32, opt_range_.begin, opt_range_.end, own.begin, own.end,
                 exp_avg_.data()});
  out.push_back({"exp_avg_sq", DType::f32, opt_range_.begin, opt_range_.end, own.begin, own.end,
                 exp_avg_sq_.data()});
  return out;
}

void DataParallelEngine::state_loaded(int64_t step_count) {
  STRATA_CHECK(step_count >= 0, "state_loaded: step count ", step_count, " must be >= 0");
  STRATA_CHECK(reducer_->idle(), "state_loaded: gradient collectives still in flight");
  steps_ = step_count;
  refresh_working_params();
}

std::vector<float> DataParallelEngine::gather_full_params() {
  const int64_t psi = layout_.psi();
  std::vector<float> full(size_t(psi), 0.0f);
  const float* weights = bf16_ ? master_.as<float>() : params_.as<float>();
  if (opts_.stage == 0 || (!bf16_ && opts_.stage <= 2)) {
    std::memcpy(full.data(), weights, sizeof(float) * psi);
    return full;
  }
  // Sharded optimizer weights (bf16 master shard, or fp32 stage-3 parameter shard).
  pg_.all_gather_v(weights, full.data(), layout_.split_counts({0, psi}), DType::f32);
  return full;
}

std::unique_ptr<DataParallelEngine> make_data_parallel_engine(model::GPT& model,
                                                              comm::ProcessGroup& group,
                                                              const DataParallelOptions& opts,
                                                              const OptimConfig& optim,
                                                              uint64_t seed) {
  return std::make_unique<DataParallelEngine>(model, group, opts, optim, seed);
}

}  // namespace strata::parallel
