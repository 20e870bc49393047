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

Region::Region(comm::ProcessGroup& group, int64_t psi, int64_t base, int first_unit,
               bool tied_unit0)
    : pg(group), layout(psi, group.size(), group.rank()), base(base), first_unit(first_unit),
      tied_unit0(tied_unit0) {}
Region::~Region() = default;

DataParallelEngine::DataParallelEngine(model::ModelPart& model, comm::ProcessGroup& group,
                                       const DataParallelOptions& opts, const OptimConfig& optim,
                                       uint64_t seed, ExpertGroups experts, StageGroups stage)
    : model_(model),
      opts_(opts),
      optim_(optim),
      expert_groups_(experts),
      stage_groups_(stage),
      bf16_(opts.precision == Precision::bf16),
      wdtype_(bf16_ ? DType::bf16 : DType::f32),
      wbytes_(int(dtype_size(wdtype_))) {
  opts_.validate();
  STRATA_CHECK(model.params() == nullptr && model.grads() == nullptr,
               "the data-parallel engine owns the parameter and gradient buffers: build the model "
               "with allocate_state = false (parallel::model_owns_state)");
  const int P = experts.ep ? experts.ep->size() : 1;
  STRATA_CHECK(model.expert_shard().size == P,
               "the model holds the experts of an expert-parallel group of ",
               model.expert_shard().size, " but the engine was given one of ", P);
  STRATA_CHECK(P == 1 || experts.edp, "expert parallelism needs the expert-data-parallel group");
  if (optim.kind == OptimizerKind::muon && model.tensor_comm())
    for (const model::ParamView& v : model.param_table())
      STRATA_CHECK_SETTING(!is_muon_view(v) || !v.replicated, setting("optimizer"),
                           " muon: ", v.name,
                           " is replicated over tensor-parallel ranks (key/value heads shared by "
                           "several ranks): Muon "
                           "gathers a matrix from equal slices; use ",
                           setting("tp"), " at most ", setting("kv-heads"), ", or AdamW");
  const int x = model.first_expert_unit(), U = model.num_units(), dense = std::min(x, U);
  const bool tied = model.tied_unit0();
  STRATA_CHECK(!stage.embed || (tied && !bf16_), "internal: the tied embedding of a pipeline ",
               "stage needs unit 0 and fp32 working parameters");
  if (stage.embed) {  // unit 0 alone, so its shards match the other end's
    add_region(group, 0, 1, true, "embed ", false);
    if (dense > 1) add_region(group, 1, dense, false, "", false);
  } else {
    add_region(group, 0, dense, tied, "", false);
  }
  if (U > x) add_region(experts.edp ? *experts.edp : group, x, U, false, "expert ", true);
  allocate_scratch();
  allocate_muon();
  init_params(seed);
  model_.set_hooks(
      {[this](int u, Pass p) { before_unit(u, p); }, [this](int u, Pass p) { after_unit(u, p); }});
}

// Units [first_unit, end_unit) of the model as a region over `group` (parallel/region.h).
void DataParallelEngine::add_region(comm::ProcessGroup& group, int first_unit, int end_unit,
                                    bool tied, const char* tag, bool experts) {
  const int64_t base = model_.unit_range(first_unit).first;
  const int64_t psi = model_.unit_range(end_unit - 1).second - base;
  auto r = std::make_unique<Region>(group, psi, base, first_unit, tied);
  r->tag = tag;
  r->experts = experts;
  r->opts = &opts_;
  r->wdtype = wdtype_;
  r->wbytes = wbytes_;
  for (int u = first_unit; u < end_unit; ++u) {
    const auto [b, e] = model_.unit_range(u);
    r->units.push_back({b - base, e - base});
  }
  // At stages 2-3 bucket buffers are the gradient memory those stages keep, and they hold
  // 3 buckets at once: no bucket there is larger than a layer, whatever the cap.
  int64_t cap = bucket_cap_elems(opts_.bucket_mb, wbytes_);
  if (opts_.stage >= 2) {
    int64_t max_block = 1;
    for (size_t u = tied ? 1 : 0; u < r->units.size(); ++u)
      max_block = std::max(max_block, r->units[u].size());
    cap = std::min(cap, max_block);
  }
  std::vector<int> breaks;  // the part's chunk starts, in region units
  for (int u : model_.chunk_starts())
    if (u > first_unit && u < end_unit) breaks.push_back(u - first_unit);
  r->buckets = plan_buckets(r->units, cap, breaks);
  r->opt_range = opts_.stage == 0 ? Range{0, psi} : r->layout.own();
  for (const model::DecayRange& d : model::decay_ranges(
           model_.param_table(), base + r->opt_range.begin, base + r->opt_range.end))
    r->decay.push_back({d.begin - base, d.end - base, d.decay});
  plan_optimizer(*r);
  if (model_.tensor_comm())
    for (const model::ParamView& v : model_.param_table())
      if (!v.primary && v.offset >= base && v.offset < base + psi)
        r->replicated.push_back({v.offset - base, v.offset - base + numel(v.shape)});
  allocate_state(*r);
  r->reducer = std::make_unique<GradReducer>(*r);
  if (opts_.stage == 3) r->gatherer = std::make_unique<ParamGatherer>(*r);
  regions_.push_back(std::move(r));
}

DataParallelEngine::~DataParallelEngine() {
  // Collectives in flight read engine buffers: let them finish before the buffers go.
  try {
    for (auto& r : regions_) {
      if (r->reducer) r->reducer->wait_all();
      if (r->gatherer) r->gatherer->invalidate();
    }
  } catch (...) {
  }
  model_.set_hooks({});
}

void DataParallelEngine::allocate_state(Region& r) {
  const int64_t psi = r.layout.psi(), S = r.layout.shard_elems();
  const int64_t full_or_shard_p = opts_.stage >= 3 ? S : psi;
  const int64_t full_or_shard_g = opts_.stage >= 2 ? S : psi;
  const int64_t opt = opts_.stage >= 1 ? S : psi;
  r.params = Buffer(MemCategory::parameters, size_t(full_or_shard_p) * wbytes_);
  r.grads = Buffer(MemCategory::gradients, size_t(full_or_shard_g) * wbytes_);
  if (bf16_) r.master = Buffer(MemCategory::optimizer, size_t(opt) * sizeof(float));
  r.exp_avg = Buffer(MemCategory::optimizer, size_t(opt) * sizeof(float));
  // Muon's matrices have no second moment: AdamW's runs only.
  int64_t v = optim_.kind == OptimizerKind::adamw ? opt : 0;
  if (optim_.kind == OptimizerKind::muon)
    for (const Region::AdamRun& a : r.adam) v += a.end - a.begin;
  r.exp_avg_sq = Buffer(MemCategory::optimizer, size_t(v) * sizeof(float));
}

// Which elements of opt_range AdamW updates and where their second moments live, and the
// Muon matrices of the region with their owners.
void DataParallelEngine::plan_optimizer(Region& r) {
  const int64_t lo = r.opt_range.begin;
  if (optim_.kind == OptimizerKind::adamw) {
    for (const model::DecayRange& d : r.decay) r.adam.push_back({d.begin, d.end, d.decay, d.begin - lo});
    return;
  }
  const int64_t psi = r.layout.psi();
  for (const MuonMatrix& m : muon_matrices(model_))
    if (m.begin >= r.base && m.end() <= r.base + psi) {
      MuonMatrix x = m;
      x.begin -= r.base;
      // The part's unit holding it: a pipeline stage's table keeps the one-process unit numbers.
      const auto in = std::find_if(r.units.begin(), r.units.end(),
                                   [&](const Range& u) { return u.begin <= x.begin && x.end() <= u.end; });
      STRATA_CHECK(in != r.units.end(), "internal: Muon matrix at ", m.begin, " lies in no unit of its region");
      x.unit = r.first_unit + int(in - r.units.begin());
      r.muon.push_back(x);
    }
  r.muon_owner = muon_owners(r.muon, opts_.stage == 0 ? 1 : r.pg.size(), optim_.muon.ns_steps);
  int64_t v = 0;
  size_t k = 0;  // the first matrix that may still cut a decay run
  for (const model::DecayRange& d : r.decay) {
    for (int64_t at = d.begin; at < d.end;) {
      while (k < r.muon.size() && r.muon[k].end() <= at) ++k;
      const int64_t stop = k < r.muon.size() ? std::min(d.end, std::max(at, r.muon[k].begin)) : d.end;
      if (stop > at) {
        r.adam.push_back({at, stop, d.decay, v});
        v += stop - at;
        at = stop;
      } else {
        at = std::min(d.end, r.muon[k].end());  // inside a matrix
      }
    }
  }
}

// bf16: fp32 compute scratch, slot 0 for dense unit 0, slot 1 for any other dense unit,
// slot 2 for an expert unit (an MoE block uses its block's unit and its experts at once).
void DataParallelEngine::allocate_scratch() {
  if (!bf16_) return;
  int64_t n[3] = {0, 0, 0};
  for (const auto& r : regions_)  // expert units are in the dense region when ep is 1
    for (int u = 0; u < r->num_units(); ++u) {
      int64_t& m = n[scratch_slot(*r, u)];
      m = std::max(m, r->units[size_t(u)].size());
    }
  scratch_ = Buffer(MemCategory::activations, size_t(2 * (n[0] + n[1] + n[2])) * sizeof(float));
  float* p = scratch_.as<float>();
  for (int s = 0; s < 3; ++s) {
    scratch_params_[s] = p;
    scratch_grads_[s] = p + n[s];
    p += 2 * n[s];
  }
}

// Muon's buffers: stage 0 one matrix (its momentum, orthogonalised in place), stages 1-3
// two units (one gathering while the other is orthogonalised); and Newton-Schulz scratch.
void DataParallelEngine::allocate_muon() {
  int64_t buffer = 0, scratch = 0, whole = 0;
  for (const auto& r : regions_)
    for (const MuonMatrix& m : r->muon) {
      buffer = std::max(buffer, opts_.stage == 0 ? m.size() : 2 * r->units[size_t(m.unit - r->first_unit)].size());
      scratch = std::max(scratch, kernels::ns5_scratch_elems(m.full_rows(), m.full_cols()));
      if (m.tp_axis >= 0) whole = std::max(whole, 2 * m.size() * m.tp);  // gathered slices, assembled
    }
  if (buffer == 0) return;
  scratch += whole;
  muon_buffer_ = Buffer(opts_.stage == 0 ? MemCategory::activations : MemCategory::comm, size_t(buffer) * sizeof(float));
  muon_scratch_ = Buffer(MemCategory::activations, size_t(scratch) * sizeof(float));
}

// GPT-2 initialisation is defined on the full flat buffer; a region that keeps less computes
// it in a temporary fp32 buffer (category other, freed before training) and keeps its part.
void DataParallelEngine::init_params(uint64_t seed) {
  std::vector<Buffer> tmp(regions_.size());
  std::vector<float*> full(regions_.size());
  for (size_t i = 0; i < regions_.size(); ++i) {
    Region& r = *regions_[i];
    // Full fp32 weights exist already as the fp32 parameters (stages 0-2) or the bf16 master
    // (stage 0); otherwise a temporary holds them.
    if (!bf16_ && opts_.stage < 3) {
      full[i] = r.params.as<float>();
    } else if (bf16_ && opts_.stage == 0) {
      full[i] = r.master.as<float>();
    } else {
      tmp[i] = Buffer(MemCategory::other, size_t(r.layout.psi()) * sizeof(float));
      full[i] = tmp[i].as<float>();
    }
    for (int u = 0; u < r.num_units(); ++u)
      model_.bind_unit(r.first_unit + u, full[i] + r.units[u].begin, nullptr);
  }
  model_.init(seed);
  for (size_t i = 0; i < regions_.size(); ++i) {
    Region& r = *regions_[i];
    const Range own = r.layout.own();
    if (bf16_ && full[i] != r.master.as<float>())
      std::memcpy(r.master.data(), full[i] + r.opt_range.begin,
                  sizeof(float) * r.opt_range.size());
    if (bf16_ && opts_.stage < 3) narrow(r.params.data(), full[i], r.layout.psi(), wdtype_);
    if (opts_.stage == 3) narrow(r.params.data(), full[i] + own.begin, own.size(), wdtype_);
    // Units whose memory never moves are bound once; the others are bound by the hooks.
    for (int u = 0; u < r.num_units(); ++u) {
      const int unit = r.first_unit + u;
      if (!bf16_ && opts_.stage <= 1)
        model_.bind_unit(unit, r.params.as<float>() + r.units[u].begin,
                         r.grads.as<float>() + r.units[u].begin);
      else if (!bf16_ && opts_.stage == 2)
        model_.bind_unit(unit, r.params.as<float>() + r.units[u].begin, nullptr);
      else
        model_.bind_unit(unit, nullptr, nullptr);
    }
  }
  ++params_version_;
}

// ---- hooks ----------------------------------------------------------------------------------

const Region* DataParallelEngine::expert_region() const {
  for (const auto& r : regions_)
    if (r->experts) return r.get();
  return nullptr;
}

Region& DataParallelEngine::region_of(int unit, int* local) {
  for (auto& r : regions_)
    if (r->has_unit(unit)) {
      *local = unit - r->first_unit;
      return *r;
    }
  fail("internal: unit ", unit, " belongs to no region of the data-parallel engine");
}

int DataParallelEngine::scratch_slot(const Region& r, int local) const {
  const int unit = r.first_unit + local;
  if (unit >= model_.first_expert_unit()) return 2;
  return unit == 0 ? 0 : 1;  // unit 0: the tied embedding, used at both ends of a pass
}

float* DataParallelEngine::fp32_params_for(Region& r, int local) {
  const void* src = nullptr;
  if (r.gatherer) {
    src = r.gatherer->acquire(local, current_pass_);
  } else {
    src = elem_ptr(r.params.data(), r.units[local].begin, wdtype_);
  }
  if (!bf16_) return static_cast<float*>(const_cast<void*>(src));
  const int slot = scratch_slot(r, local), unit = r.first_unit + local;
  if (scratch_unit_[slot] != unit || scratch_version_[slot] != params_version_) {
    widen(scratch_params_[slot], src, r.units[local].size(), wdtype_);
    scratch_unit_[slot] = unit;
    scratch_version_[slot] = params_version_;
  }
  return scratch_params_[slot];
}

float* DataParallelEngine::fp32_grads_for(Region& r, int local) {
  if (bf16_) {
    float* g = scratch_grads_[scratch_slot(r, local)];
    std::memset(g, 0, sizeof(float) * r.units[local].size());
    return g;
  }
  return static_cast<float*>(r.reducer->unit_grads(local));
}

void DataParallelEngine::before_unit(int unit, Pass pass) {
  current_pass_ = pass;
  if (!bf16_ && opts_.stage <= 1) return;  // bound once, in place
  int local = 0;
  Region& r = region_of(unit, &local);
  float* p = fp32_params_for(r, local);
  float* g = nullptr;
  if (pass == Pass::backward)
    g = fp32_grads_for(r, local);
  else if (bf16_)
    g = scratch_grads_[scratch_slot(r, local)];
  model_.bind_unit(unit, p, g);
}

void DataParallelEngine::after_unit(int unit, Pass pass) {
  int local = 0;
  Region& r = region_of(unit, &local);
  if (pass == Pass::backward) {
    if (bf16_)
      add_f32_into(r.reducer->unit_grads(local), scratch_grads_[scratch_slot(r, local)],
                   r.units[local].size(), wdtype_);
    r.reducer->unit_done(local);
  }
  if (r.gatherer) r.gatherer->release(local, pass);
}

// ---- step -----------------------------------------------------------------------------------

void DataParallelEngine::begin_step() {
  if (model_.tensor_comm()) tp_bytes_at_step_begin_ = model_.tensor_comm()->bytes();
  for (auto& r : regions_) {
    r->reducer->begin_step();
    std::memset(r->grads.data(), 0, r->grads.bytes());
  }
}

void DataParallelEngine::begin_micro(int micro, int num_micro) {
  for (auto& r : regions_) r->reducer->begin_micro(micro, num_micro);
}

void DataParallelEngine::end_backward() {
  for (auto& r : regions_) r->reducer->finish();
  tie_embedding();
  if (model_.tensor_comm())
    tp_bytes_last_step_ = model_.tensor_comm()->bytes() - tp_bytes_at_step_begin_;
}

// The first and last pipeline stage each hold unit 0 with its share of the gradient (the
// embedding's, the logits'): the sum over the two, of this rank's part of the region (all of
// it at stage 0; its shard at stages 1-3, which lines up on both ends).
void DataParallelEngine::tie_embedding() {
  if (!stage_groups_.embed) return;
  Region& r = *regions_[0];
  const Range own = r.layout.own();
  float* g = r.grads.as<float>();
  int64_t n = r.layout.psi();
  if (opts_.stage == 1) g += own.begin;
  if (opts_.stage >= 1) n = own.size();
  TraceSpan span(tracer(), "embed tie", "comm");
  if (n > 0) stage_groups_.embed->all_reduce(g, size_t(n));
}

int64_t DataParallelEngine::grad_reduce_bytes_last_step(const Region& r) const {
  return r.reducer->bytes_this_step();
}

int64_t DataParallelEngine::grad_reduce_bytes_last_step() const {
  int64_t n = 0;
  for (const auto& r : regions_) n += grad_reduce_bytes_last_step(*r);
  return n;
}

int64_t DataParallelEngine::num_buckets() const {
  int64_t n = 0;
  for (const auto& r : regions_) n += int64_t(r->buckets.size());
  return n;
}

// Sum of squares of g (the gradients of [b, e)) without the replicated views another tp rank
// counts (`replicated` is sorted; empty on tp rank 0).
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

// Gradient of region element i of opt_range, in the working dtype.
static const void* grad_at(const Region& r, int64_t i) {
  return elem_ptr(r.grads.data(), r.stage() >= 2 ? i - r.layout.own().begin : i, r.wdtype);
}

// Runs fn(begin, end, fp32 grads of [begin, end)) over `range` of region r in pieces no
// longer than the scratch (bf16) or in one piece (fp32).
template <typename Fn>
static void for_grad_chunks(const Region& r, Range range, float* scratch, int64_t chunk, Fn&& fn) {
  for (int64_t b = range.begin; b < range.end;) {
    const int64_t e = r.wdtype == DType::f32 ? range.end : std::min(range.end, b + chunk);
    const void* g = grad_at(r, b);
    if (r.wdtype == DType::f32) {
      fn(b, e, static_cast<const float*>(g));
    } else {
      widen(scratch, g, e - b, r.wdtype);
      fn(b, e, scratch);
    }
    b = e;
  }
}

double DataParallelEngine::local_grad_sum_squares(Region& r) {
  double sum = 0;
  const int64_t chunk = bf16_ ? regions_[0]->units[0].size() : 0;
  for_grad_chunks(r, r.opt_range, scratch_grads_[0], chunk,
                  [&](int64_t b, int64_t e, const float* g) {
                    sum += sum_squares_counted(g, b, e, r.replicated);
                  });
  return sum;
}

float* DataParallelEngine::optimizer_weights(Region& r) {
  // Indexed by region coordinates of opt_range.
  return bf16_ ? r.master.as<float>() - r.opt_range.begin
               : r.params.as<float>() - (opts_.stage >= 3 ? r.layout.own().begin : 0);
}

void DataParallelEngine::apply_adamw(Region& r, float lr, float grad_scale) {
  const kernels::AdamWStep s = adamw_step(optim_, lr, steps_ + 1, grad_scale);
  const int64_t lo = r.opt_range.begin;
  float* weights = optimizer_weights(r);
  float* m = r.exp_avg.as<float>() - lo;
  float* v = r.exp_avg_sq.as<float>();
  const int64_t chunk = bf16_ ? regions_[0]->units[0].size() : 0;
  for (const Region::AdamRun& a : r.adam) {
    for_grad_chunks(r, {a.begin, a.end}, scratch_grads_[0], chunk,
                    [&](int64_t b, int64_t e, const float* g) {
                      kernels::adamw_update(weights + b, g, m + b, v + a.v_at + (b - a.begin), e - b, a.decay, s);
                    });
  }
}

// Muon on the region's matrices. Stage 0: every rank holds every gradient, and orthogonalises
// every matrix itself (DDP's duplicated optimizer step; no bytes move). Stages 1-3, unit by
// unit: each rank writes the Nesterov momentum of its shard's part of the unit's matrices
// into a unit-sized buffer, an all-gather assembles them, each matrix's owner orthogonalises
// it in place (every other element zeroed), and a reduce-scatter (sum: one rank contributes
// each element, so the sum is exact) hands each rank its part of the result. The gather of
// the next unit is in flight while this one's matrices are orthogonalised.
void DataParallelEngine::apply_muon(Region& r, float lr, float grad_scale) {
  const kernels::MuonStep s = muon_step(optim_, lr, grad_scale);
  const int64_t lo = r.opt_range.begin;
  float* weights = optimizer_weights(r);
  float* mom = r.exp_avg.as<float>() - lo;
  const int64_t chunk = bf16_ ? regions_[0]->units[0].size() : 0;
  // u of [b, e) (opt_range) into dst (dst[0] is element b).
  auto momentum = [&](Range x, float* dst) {
    for_grad_chunks(r, x, scratch_grads_[0], chunk, [&](int64_t b, int64_t e, const float* g) {
      kernels::muon_momentum(g, mom + b, dst + (b - x.begin), e - b, s);
    });
  };
  if (opts_.stage == 0) {
    float* u = muon_buffer_.as<float>();
    for (const MuonMatrix& m : r.muon) {
      momentum({m.begin, m.end()}, u);
      orthogonalise(m, u, s.ns_steps);
      kernels::muon_apply(weights + m.begin, u, m.size(), m.full_rows(), m.full_cols(), m.decay, s);
    }
    return;
  }
  // The units holding matrices, each with its matrices [first, last).
  struct UnitWork {
    Range range;
    size_t first, last;
  };
  std::vector<UnitWork> units;
  for (size_t i = 0; i < r.muon.size(); ++i) {
    const int local = r.muon[i].unit - r.first_unit;
    if (units.empty() || units.back().range.begin != r.units[size_t(local)].begin)
      units.push_back({r.units[size_t(local)], i, i + 1});
    else
      units.back().last = i + 1;
  }
  const int me = r.pg.rank();
  const Range own = r.layout.own();
  const int64_t half = int64_t(muon_buffer_.bytes() / sizeof(float) / 2);
  auto buffer = [&](size_t k) { return muon_buffer_.as<float>() + int64_t(k % 2) * half; };
  auto gather = [&](size_t k) {
    const UnitWork& w = units[k];
    float* G = buffer(k);
    const Range part = intersect(w.range, own);
    float* mine = G + r.layout.own_offset_in(w.range);
    std::memset(mine, 0, sizeof(float) * size_t(part.size()));
    for (size_t i = w.first; i < w.last; ++i) {
      const Range x = intersect({r.muon[i].begin, r.muon[i].end()}, part);
      if (!x.empty()) momentum(x, G + (x.begin - w.range.begin));
    }
    muon_bytes_last_step_ += w.range.size() * int64_t(sizeof(float));
    return gather_range_async(r.pg, r.layout, mine, G, w.range, DType::f32, cat(r.tag, "muon gather"));
  };
  comm::WorkPtr next = units.empty() ? nullptr : gather(0);
  for (size_t k = 0; k < units.size(); ++k) {
    const UnitWork& w = units[k];
    float* G = buffer(k);
    next->wait();
    if (k + 1 < units.size()) next = gather(k + 1);
    int64_t at = w.range.begin;  // zero what this rank does not orthogonalise
    for (size_t i = w.first; i < w.last; ++i) {
      const MuonMatrix& m = r.muon[i];
      if (r.muon_owner[i] != me) continue;
      std::memset(G + (at - w.range.begin), 0, sizeof(float) * size_t(m.begin - at));
      orthogonalise(m, G + (m.begin - w.range.begin), s.ns_steps);
      at = m.end();
    }
    std::memset(G + (at - w.range.begin), 0, sizeof(float) * size_t(w.range.end - at));
    muon_bytes_last_step_ += w.range.size() * int64_t(sizeof(float));
    reduce_range_async(r.pg, r.layout, G, w.range, DType::f32, true, cat(r.tag, "muon scatter"))->wait();
    const Range part = intersect(w.range, own);
    for (size_t i = w.first; i < w.last; ++i) {
      const MuonMatrix& m = r.muon[i];
      const Range x = intersect({m.begin, m.end()}, part);
      if (!x.empty())
        kernels::muon_apply(weights + x.begin, G + (x.begin - w.range.begin), x.size(), m.full_rows(), m.full_cols(),
                            m.decay, s);
    }
  }
}

// u (this rank's slice of matrix m) orthogonalised in place. A matrix split over the tp group
// is gathered whole from its slices (every tp rank of the group owns the same matrices, as the
// ranks' shapes are equal), orthogonalised whole by each of them, and each keeps its slice.
void DataParallelEngine::orthogonalise(const MuonMatrix& m, float* u, int ns_steps) {
  float* ns = muon_scratch_.as<float>();
  if (m.tp_axis < 0) {
    kernels::orthogonalise_ns5(u, m.rows, m.cols, ns_steps, ns);
    return;
  }
  comm::ProcessGroup& tp = model_.tensor_comm()->group();
  const int T = m.tp, t = tp.rank();
  const int64_t n = m.size();
  float* gathered = ns + kernels::ns5_scratch_elems(m.full_rows(), m.full_cols());
  float* whole = gathered + n * T;
  tp.all_gather_async(u, gathered, size_t(n), DType::f32)->wait();
  muon_bytes_last_step_ += n * T * int64_t(sizeof(float));
  const int R = m.full_rows(), C = m.full_cols();
  if (m.tp_axis == 0) {  // row slices in rank order: already the whole matrix
    std::memcpy(whole, gathered, sizeof(float) * size_t(n * T));
  } else {  // column slices: rank r's (rows x cols) goes to columns [r cols, (r + 1) cols)
    for (int r = 0; r < T; ++r)
      for (int i = 0; i < m.rows; ++i)
        std::memcpy(whole + int64_t(i) * C + int64_t(r) * m.cols, gathered + r * n + int64_t(i) * m.cols,
                    sizeof(float) * size_t(m.cols));
  }
  kernels::orthogonalise_ns5(whole, R, C, ns_steps, ns);
  if (m.tp_axis == 0) {
    std::memcpy(u, whole + int64_t(t) * n, sizeof(float) * size_t(n));
  } else {
    for (int i = 0; i < m.rows; ++i)
      std::memcpy(u + int64_t(i) * m.cols, whole + int64_t(i) * C + int64_t(t) * m.cols, sizeof(float) * size_t(m.cols));
  }
}

// Working parameters from the optimizer's weights: bf16 rounding, then (stages 1-2) every
// rank's updated shard gathered into the full buffer; stage 3 drops gathered units.
void DataParallelEngine::refresh_working_params(Region& r) {
  const Range own = r.layout.own();
  if (bf16_) {
    const int64_t at = opts_.stage >= 3 ? 0 : r.opt_range.begin;
    narrow(elem_ptr(r.params.data(), at, wdtype_), r.master.as<float>(), r.opt_range.size(),
           wdtype_);
  }
  if (opts_.stage == 1 || opts_.stage == 2) {
    const Range all{0, r.layout.psi()};
    gather_range_async(r.pg, r.layout, elem_ptr(r.params.data(), own.begin, wdtype_),
                       r.params.data(), all, wdtype_, cat(r.tag, "params all"))
        ->wait();
  }
  if (r.gatherer) {
    r.gatherer->invalidate();
    r.gatherer->prime();
  }
}

const float* DataParallelEngine::full_params() const {
  return opts_.stage < 3 && !bf16_ && regions_.size() == 1 ? regions_[0]->params.as<float>()
                                                           : nullptr;
}

float DataParallelEngine::step(float lr, double extra_sum_sq, float* clip,
                               const std::function<bool(float norm)>* accept) {
  for (auto& r : regions_)
    STRATA_CHECK(r->reducer->idle(), "step: end_backward() must be called before step()");
  double dense_sq = 0, expert_sq = 0;
  {
    TraceSpan span(tracer(), "optimizer", "compute");
    for (auto& r : regions_) {
      if (r->experts)
        expert_sq += local_grad_sum_squares(*r);
      else if (stage_groups_.counts_unit0 || !r->tied_unit0)  // a last stage's unit 0: no
        dense_sq += local_grad_sum_squares(*r);
    }
  }
  // Stage 0 ranks of a group hold identical full gradients; sharded stages add their shards'
  // sums, the expert shards with the dense ones (the edp groups partition every expert).
  double sum_sq = dense_sq + expert_sq;
  if (opts_.stage >= 1) {
    sum_sq = sum_over_ranks(regions_[0]->pg, sum_sq);
  } else if (expert_groups_.ep && expert_groups_.ep->size() > 1) {
    sum_sq = dense_sq + sum_over_ranks(*expert_groups_.ep, expert_sq);
  }
  if (model_.tensor_comm())  // async: on the tp group's own thread (and trace track)
    model_.tensor_comm()->group().all_reduce_async(&sum_sq, 1)->wait();
  if (stage_groups_.pp) stage_groups_.pp->all_reduce(&sum_sq, 1);  // every stage's squares
  sum_sq += extra_sum_sq;
  const float norm = float(std::sqrt(sum_sq));
  if (accept && *accept && !(*accept)(norm)) {  // a skipped step: nothing changes
    ++steps_;
    return norm;
  }
  const float scale = kernels::clip_scale(sum_sq, optim_.grad_clip);
  if (clip) *clip = scale;
  {
    TraceSpan span(tracer(), "optimizer", "compute");
    for (auto& r : regions_) apply_adamw(*r, lr, scale);
  }
  muon_bytes_last_step_ = 0;
  for (auto& r : regions_)
    if (!r->muon.empty()) apply_muon(*r, lr, scale);
  ++steps_;
  ++params_version_;
  for (auto& r : regions_) refresh_working_params(*r);
  return norm;
}

// ---- accounting and checkpoints -------------------------------------------------------------

MemoryReport DataParallelEngine::memory_report(const Region& r) const {
  MemoryReport m;
  m.parameters = int64_t(r.params.bytes());
  m.gradients = int64_t(r.grads.bytes());
  m.optimizer = int64_t(r.master.bytes() + r.exp_avg.bytes() + r.exp_avg_sq.bytes());
  m.comm = r.reducer->buffer_bytes() + (r.gatherer ? r.gatherer->buffer_bytes() : 0);
  return m;
}

MemoryReport DataParallelEngine::memory_report() const {
  MemoryReport m;
  for (const auto& r : regions_) {
    const MemoryReport x = memory_report(*r);
    m.parameters += x.parameters;
    m.gradients += x.gradients;
    m.optimizer += x.optimizer;
    m.comm += x.comm;
  }
  m.activations = int64_t(scratch_.bytes() + muon_scratch_.bytes());
  (opts_.stage == 0 ? m.activations : m.comm) += int64_t(muon_buffer_.bytes());
  return m;
}

// Per region, in the rank's flat coordinates: the dense states written across the dense
// group, the expert states across edp (each expert-parallel rank writes its own experts).
std::vector<StateShard> DataParallelEngine::state_shards() {
  std::vector<StateShard> out;
  for (auto& rp : regions_) {
    Region& r = *rp;
    const int64_t b = r.base;
    const Range own = r.layout.own(), opt = r.opt_range;
    if (bf16_) {
      out.push_back({"params", DType::f32, b + opt.begin, b + opt.end, b + own.begin,
                     b + own.end, r.master.data()});
    } else {
      const Range held = opts_.stage >= 3 ? own : Range{0, r.layout.psi()};
      out.push_back({"params", DType::f32, b + held.begin, b + held.end, b + own.begin,
                     b + own.end, r.params.data()});
    }
    out.push_back({"exp_avg", DType::f32, b + opt.begin, b + opt.end, b + own.begin, b + own.end,
                   r.exp_avg.data()});
    if (optim_.kind == OptimizerKind::adamw) {
      out.push_back({"exp_avg_sq", DType::f32, b + opt.begin, b + opt.end, b + own.begin,
                     b + own.end, r.exp_avg_sq.data()});
      continue;
    }
    for (const Region::AdamRun& a : r.adam) {  // Muon: AdamW's tensors only
      const Range w = intersect({a.begin, a.end}, own);
      StateShard sh{"exp_avg_sq", DType::f32, b + a.begin, b + a.end, b + (w.empty() ? a.begin : w.begin),
                    b + (w.empty() ? a.begin : w.end), r.exp_avg_sq.as<float>() + a.v_at};
      sh.partial = true;
      out.push_back(sh);
    }
  }
  return out;
}

void DataParallelEngine::state_loaded(int64_t step_count) {
  STRATA_CHECK(step_count >= 0, "state_loaded: step count ", step_count, " must be >= 0");
  for (auto& r : regions_)
    STRATA_CHECK(r->reducer->idle(), "state_loaded: gradient collectives still in flight");
  steps_ = step_count;
  ++params_version_;
  for (auto& r : regions_) refresh_working_params(*r);
}

std::vector<float> DataParallelEngine::gather_full_params() {
  std::vector<float> full(size_t(model_.num_params()), 0.0f);
  for (auto& rp : regions_) {
    Region& r = *rp;
    const int64_t psi = r.layout.psi();
    float* dst = full.data() + r.base;
    const float* weights = bf16_ ? r.master.as<float>() : r.params.as<float>();
    if (opts_.stage == 0 || (!bf16_ && opts_.stage <= 2)) {
      std::memcpy(dst, weights, sizeof(float) * psi);
      continue;
    }
    // Sharded optimizer weights (bf16 master shard, or fp32 stage-3 parameter shard).
    r.pg.all_gather_v(weights, dst, r.layout.split_counts({0, psi}), DType::f32);
  }
  return full;
}

std::unique_ptr<DataParallelEngine> make_data_parallel_engine(model::ModelPart& model,
                                                              comm::ProcessGroup& group,
                                                              const DataParallelOptions& opts,
                                                              const OptimConfig& optim,
                                                              uint64_t seed,
                                                              ExpertGroups experts) {
  return std::make_unique<DataParallelEngine>(model, group, opts, optim, seed, experts);
}

}  // namespace strata::parallel
