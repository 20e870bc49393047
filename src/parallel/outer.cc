#include "parallel/outer.h"

#include <cmath>

#include "comm/process_group.h"
#include "core/error.h"
#include "core/trace.h"

namespace strata::parallel {

GroupData parse_group_data(const std::string& s) {
  if (s == "split") return GroupData::split;
  if (s == "same") return GroupData::same;
  throw Error(cat("group data '", s, "' must be split or same"));
}

const char* group_data_name(GroupData d) { return d == GroupData::same ? "same" : "split"; }

std::string OuterOptions::describe() const {
  return cat(groups, " replica group", groups == 1 ? "" : "s", ", sync every ", steps_per_sync(), " steps, outer lr ",
             lr, ", momentum ", momentum, " (Nesterov)", data == GroupData::same ? ", every group the same data" : "");
}

// The k-th "params" state of the inner engine, over the range this rank's optimizer updates.
struct OuterSyncEngine::Slice {
  int64_t begin = 0, end = 0;              // flat indices (the state's index space)
  int64_t write_begin = 0, write_end = 0;  // what this rank writes of the params (checkpoints)
  std::vector<float> global, momentum, mean;
};

namespace {

// The "params" states of an engine, in order.
std::vector<StateShard> params_states(StepEngine& e) {
  std::vector<StateShard> out;
  for (const StateShard& s : e.state_shards())
    if (s.name == "params") out.push_back(s);
  return out;
}

// The part of a "params" state this rank's optimizer updates: all it holds at ZeRO 0, its own
// shard (the range it writes) under ZeRO 1-3.
std::pair<int64_t, int64_t> updated_range(const StateShard& s, int zero_stage) {
  return zero_stage == 0 ? std::pair{s.begin, s.end} : std::pair{s.write_begin, s.write_end};
}

float* at(const StateShard& s, int64_t i) { return static_cast<float*>(s.data) + (i - s.begin); }

}  // namespace

OuterSyncEngine::OuterSyncEngine(std::unique_ptr<StepEngine> inner, const OuterOptions& o,
                                 comm::ProcessGroup* across, int group, int64_t last_step)
    : inner_(std::move(inner)), opts_(o), across_(across), group_(group), last_step_(last_step) {
  STRATA_CHECK(inner_, "outer sync: no inner engine");
  STRATA_CHECK(o.groups >= 1 && o.steps_per_sync() >= 1, "outer sync: groups ", o.groups, " and steps per sync ",
               o.steps_per_sync(), " must be at least 1");
  STRATA_CHECK(std::isfinite(o.lr) && o.lr > 0, "outer sync: learning rate ", o.lr, " must be positive");
  STRATA_CHECK(o.momentum >= 0 && o.momentum < 1, "outer sync: momentum ", o.momentum, " must be in [0, 1)");
  STRATA_CHECK(o.groups == 1 || (across_ && across_->size() == o.groups), "outer sync: ", o.groups,
               " groups need a group across them of that size");
  STRATA_CHECK(group >= 0 && group < o.groups, "outer sync: group ", group, " of ", o.groups);
  for (const StateShard& s : params_states(*inner_)) {
    STRATA_CHECK(s.dtype == DType::f32, "outer sync: the inner engine's parameters must be fp32");
    Slice sl;
    std::tie(sl.begin, sl.end) = updated_range(s, inner_->zero_stage());
    sl.write_begin = s.write_begin;
    sl.write_end = s.write_end;
    sl.global.assign(at(s, sl.begin), at(s, sl.end));  // every group starts from the same seed
    sl.momentum.assign(sl.global.size(), 0.0f);
    sl.mean.resize(sl.global.size());
    slices_.push_back(std::move(sl));
  }
}

OuterSyncEngine::~OuterSyncEngine() = default;

bool OuterSyncEngine::syncs_after(int64_t step) const {
  return step > 0 && (step % opts_.steps_per_sync() == 0 || step == last_step_);
}

float OuterSyncEngine::step(float lr) {
  const float norm = inner_->step(lr);
  after_step();
  return norm;
}

float OuterSyncEngine::step_if(float lr, const std::function<bool(float norm)>& accept) {
  // A refused step still advances the count in every group, so the groups meet together.
  const float norm = inner_->step_if(lr, accept);
  after_step();
  return norm;
}

void OuterSyncEngine::after_step() {
  stats_.bytes_last = 0;
  if (syncs_after(inner_->step_count())) sync();
}

void OuterSyncEngine::sync() {
  TraceSpan span(tracer(), "outer sync", "comm");
  const std::vector<StateShard> params = params_states(*inner_);
  STRATA_CHECK(params.size() == slices_.size(), "outer sync: the inner engine's parameter states changed");
  const float lr = float(opts_.lr), mu = float(opts_.momentum), keep = float(1.0 - opts_.lr);
  const float inv = 1.0f / float(opts_.groups);
  for (size_t k = 0; k < slices_.size(); ++k) {
    Slice& sl = slices_[k];
    const int64_t n = sl.end - sl.begin;
    float* x = at(params[k], sl.begin);
    std::copy(x, x + n, sl.mean.begin());
    if (across_ && opts_.groups > 1) {
      across_->all_reduce(sl.mean.data(), size_t(n));
      stats_.bytes_last += n * int64_t(sizeof(float));
      for (int64_t i = 0; i < n; ++i) sl.mean[size_t(i)] *= inv;
    }
    float* g = sl.global.data();
    float* m = sl.momentum.data();
    const float* avg = sl.mean.data();
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) {
      const float delta = g[i] - avg[i];
      m[i] = mu * m[i] + delta;
      g[i] = avg[i] + keep * delta - lr * mu * m[i];
      x[i] = g[i];
    }
  }
  // The working copies (bf16, gathered shards) follow the new weights.
  inner_->state_loaded(inner_->step_count());
  stats_.bytes_sent += stats_.bytes_last;
  ++stats_.syncs;
}

std::vector<StateShard> OuterSyncEngine::state_shards() {
  std::vector<StateShard> out;
  for (const StateShard& s : inner_->state_shards()) {
    if (opts_.groups == 1) {
      out.push_back(s);
      continue;
    }
    // Every rank names every group's states (a checkpoint's states are the same on every
    // rank); it holds and writes its own group's only.
    for (int g = 0; g < opts_.groups; ++g) {
      StateShard named = s;
      named.name = cat("group", g, ".", s.name);
      if (g != group_) {
        named.end = named.write_begin = named.write_end = named.begin;
        named.data = nullptr;
      }
      out.push_back(named);
    }
  }
  for (Slice& sl : slices_) {
    // Every group holds the same global state; group 0 writes it.
    const int64_t wb = group_ == 0 ? sl.write_begin : sl.begin, we = group_ == 0 ? sl.write_end : sl.begin;
    out.push_back({"outer.params", DType::f32, sl.begin, sl.end, wb, we, sl.global.data()});
    out.push_back({"outer.momentum", DType::f32, sl.begin, sl.end, wb, we, sl.momentum.data()});
  }
  return out;
}

int64_t OuterSyncEngine::state_bytes() const {
  int64_t b = 0;
  for (const Slice& sl : slices_) b += int64_t(sizeof(float)) * int64_t(sl.global.size() + sl.momentum.size());
  return b;
}

}  // namespace strata::parallel
