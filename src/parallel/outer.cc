#include "parallel/outer.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "comm/process_group.h"
#include "comm/work.h"
#include "core/error.h"
#include "core/memory.h"
#include "core/timer.h"
#include "core/trace.h"

namespace strata::parallel {

GroupData parse_group_data(const std::string& s) {
  if (s == "split") return GroupData::split;
  if (s == "same") return GroupData::same;
  throw Error(cat("group data '", s, "' must be split or same"));
}

const char* group_data_name(GroupData d) { return d == GroupData::same ? "same" : "split"; }

std::string OuterOptions::describe() const {
  return cat(groups, " replica group", groups == 1 ? "" : "s", ", sync every ", steps_per_sync(), " steps",
             fragments > 1 ? cat(" in ", fragments, " staggered fragments") : "",
             overlap > 0 ? cat(", merged ", overlap, overlap == 1 ? " step" : " steps", " later (mix ", mix, ")") : "",
             ", outer lr ", lr,
             ", momentum ", momentum, " (Nesterov)",
             dtype != OuterDType::fp32 ? cat(", sent as ", outer_dtype_name(dtype), error_feedback ? " with error feedback" : "")
                                       : "",
             data == GroupData::same ? ", every group the same data" : "");
}

void OuterOptions::check(int max_fragments, const std::string& fragments_bound, int H) const {
  STRATA_CHECK_SETTING(std::isfinite(lr) && lr > 0, setting("outer-lr"),
                       " must be positive and finite (got ", lr, ")");
  STRATA_CHECK_SETTING(std::isfinite(momentum) && momentum >= 0 && momentum < 1,
                       setting("outer-momentum"), " must be in [0, 1) (got ", momentum, ")");
  STRATA_CHECK_SETTING(mix >= 0 && mix <= 1, setting("outer-mix"), " must be in [0, 1] (got ", mix,
                       ")");
  STRATA_CHECK_SETTING(fragments >= 1 && fragments <= max_fragments, setting("fragments"),
                       " must be in [1, ", max_fragments, "] (", fragments_bound, "; got ",
                       fragments, ")");
  STRATA_CHECK_SETTING(overlap >= 0, setting("outer-overlap"), " must not be negative (got ",
                       overlap, ")");
  STRATA_CHECK_SETTING(!error_feedback || dtype != OuterDType::fp32,
                       setting("outer-error-feedback"), " corrects the rounding of ",
                       setting("outer-dtype"),
                       " bf16, int8 or int4; fp32 sends the parameters as they are");
  if (H <= 0) return;
  STRATA_CHECK_SETTING(fragments <= H, setting("fragments"), " ", fragments,
                       " cannot be staggered over ", setting("inner-steps"), " ", H,
                       " (at most one fragment per step)");
  STRATA_CHECK_SETTING(overlap < H, setting("outer-overlap"), " must be in [0, ",
                       setting("inner-steps"), " ", H, ") (got ", overlap, ")");
}

std::vector<FlatRanges> fragment_ranges(const TensorLayout& layout, int fragments) {
  STRATA_CHECK(fragments >= 1, "fragment_ranges: ", fragments, " fragments");
  std::vector<FlatRanges> out(static_cast<size_t>(fragments));
  for (const TensorPiece& p : layout) {
    int f = 0;
    if (p.name.rfind("h.", 0) == 0) f = std::atoi(p.name.c_str() + 2) % fragments;
    FlatRanges& r = out[size_t(f)];
    const int64_t b = p.local_offset, e = b + p.numel();
    if (!r.empty() && r.back().second == b) {
      r.back().second = e;
    } else {
      r.push_back({b, e});
    }
  }
  return out;
}

// The k-th "params" state of the inner engine, over the range this rank's optimizer updates.
struct OuterSyncEngine::Slice {
  int64_t begin = 0, end = 0;              // flat indices (the state's index space)
  int64_t write_begin = 0, write_end = 0;  // what this rank writes of the params (checkpoints)
  std::vector<float> global, momentum;
  std::vector<float> sent;      // with an overlap: what this rank sent in exchanges in flight
  std::vector<float> residual;  // with error feedback: what the encoding rounded away
};

// One fragment's exchange: the elements of the fragment in this rank's slices, what was sent
// and what came back.
struct OuterSyncEngine::Exchange {
  int fragment = 0;
  int64_t started = 0;  // the step after which it started
  struct Span {
    size_t slice;
    int64_t begin, end;
  };
  std::vector<Span> spans;
  int64_t n = 0;
  std::vector<float> values;        // fp32: the parameters, summed over groups in place
  std::vector<uint8_t> send, recv;  // otherwise: this group's encoded Δ, and every group's
  comm::WorkPtr work;
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
                                 comm::ProcessGroup* across, int group, int64_t last_step,
                                 std::vector<FlatRanges> fragments, std::vector<int> present)
    : inner_(std::move(inner)), opts_(o), across_(across), group_(group), present_(std::move(present)),
      last_step_(last_step), fragments_(std::move(fragments)) {
  STRATA_CHECK(inner_, "outer sync: no inner engine");
  const int H = o.steps_per_sync();
  STRATA_CHECK(o.groups >= 1 && H >= 1, "outer sync: groups ", o.groups, " and steps per sync ", H,
               " must be at least 1");
  STRATA_CHECK(std::isfinite(o.lr) && o.lr > 0, "outer sync: learning rate ", o.lr, " must be positive");
  STRATA_CHECK(o.momentum >= 0 && o.momentum < 1, "outer sync: momentum ", o.momentum, " must be in [0, 1)");
  if (present_.empty())
    for (int g = 0; g < o.groups; ++g) present_.push_back(g);
  std::sort(present_.begin(), present_.end());
  const int n = int(present_.size());
  STRATA_CHECK(n <= o.groups && std::count(present_.begin(), present_.end(), group) == 1, "outer sync: group ", group,
               " of ", o.groups, " is not one of the ", n, " taking part");
  STRATA_CHECK(n == 1 || (across_ && across_->size() == n && present_[size_t(across_->rank())] == group),
               "outer sync: ", n, " groups need a group across them of that size, in their order");
  STRATA_CHECK(o.fragments >= 1 && o.fragments <= H, "outer sync: ", o.fragments, " fragments in rounds of ", H,
               " steps");
  STRATA_CHECK(o.overlap >= 0 && o.overlap < H, "outer sync: an overlap of ", o.overlap,
               " steps must be below the round's ", H);
  STRATA_CHECK(o.mix >= 0 && o.mix <= 1, "outer sync: mix ", o.mix, " must be in [0, 1]");
  if (fragments_.empty()) fragments_.assign(1, FlatRanges{{0, INT64_MAX}});
  STRATA_CHECK(int(fragments_.size()) == o.fragments, "outer sync: ", fragments_.size(), " fragment range lists for ",
               o.fragments, " fragments");
  for (const StateShard& s : params_states(*inner_)) {
    STRATA_CHECK(s.dtype == DType::f32, "outer sync: the inner engine's parameters must be fp32");
    Slice sl;
    std::tie(sl.begin, sl.end) = updated_range(s, inner_->zero_stage());
    sl.write_begin = s.write_begin;
    sl.write_end = s.write_end;
    sl.global.assign(at(s, sl.begin), at(s, sl.end));  // every group starts from the same seed
    sl.momentum.assign(sl.global.size(), 0.0f);
    if (o.overlap > 0) sl.sent.assign(sl.global.size(), 0.0f);
    if (o.error_feedback && o.dtype != OuterDType::fp32) sl.residual.assign(sl.global.size(), 0.0f);
    slices_.push_back(std::move(sl));
  }
  memory_tracker().add(MemCategory::optimizer, state_bytes());  // the outer optimizer's states
}

OuterSyncEngine::~OuterSyncEngine() {
  for (auto& x : pending_)
    if (x->work) x->work->wait();  // buffers must outlive the collective
  memory_tracker().sub(MemCategory::optimizer, state_bytes());
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

int64_t OuterSyncEngine::start_step_before(int fragment, int64_t step) const {
  const int64_t H = opts_.steps_per_sync(), o = opts_.offset_of(fragment);
  if (step < o) return 0;
  const int64_t t = o + (step - o) / H * H;  // the last t <= step with t % H == o
  return t > 0 ? t : 0;                      // step 0 starts nothing
}

void OuterSyncEngine::after_step() {
  const int64_t step = inner_->step_count();
  const int64_t t0 = now_ns(), blocked0 = comm::thread_blocked_ns();
  stats_.bytes_last = 0;
  stats_.started_last = 0;
  bool changed = false;
  // Exchanges whose τ steps have passed are merged.
  for (size_t i = 0; i < pending_.size();) {
    if (pending_[i]->started + opts_.overlap <= step || step == last_step_) {
      finish(*pending_[i], step == last_step_);
      pending_.erase(pending_.begin() + long(i));
      changed = true;
    } else {
      ++i;
    }
  }
  // Fragments whose offset in the round this step is start their exchange (merged at once
  // without an overlap); the last step starts every fragment and merges it in full (the run
  // ends on θ).
  for (int f = 0; f < opts_.fragments; ++f) {
    if (step != last_step_ && start_step_before(f, step) != step) continue;
    start(f, step);
    ++stats_.started_last;
    if (opts_.overlap == 0 || step == last_step_) {
      finish(*pending_.back(), true);
      pending_.pop_back();
      changed = true;
    }
  }
  // The working copies (bf16, gathered shards) follow the new weights.
  if (changed) inner_->state_loaded(step);
  stats_.bytes_sent += stats_.bytes_last;
  const bool worked = changed || stats_.started_last > 0;
  stats_.ns_last = worked ? now_ns() - t0 : 0;
  stats_.wait_ns_last = worked ? comm::thread_blocked_ns() - blocked0 : 0;
}

void OuterSyncEngine::start(int fragment, int64_t step, bool again) {
  TraceSpan span(tracer(), "outer sync start", "comm");
  auto x = std::make_unique<Exchange>();
  x->fragment = fragment;
  x->started = step;
  const std::vector<StateShard> params = params_states(*inner_);
  STRATA_CHECK(params.size() == slices_.size(), "outer sync: the inner engine's parameter states changed");
  for (size_t k = 0; k < slices_.size(); ++k)
    for (const auto& [b, e] : fragments_[size_t(fragment)]) {
      const int64_t lo = std::max(b, slices_[k].begin), hi = std::min(e, slices_[k].end);
      if (lo < hi) x->spans.push_back({k, lo, hi}), x->n += hi - lo;
    }
  // What this group sends: its parameters (fp32), or its outer gradient θ - x (encoded), plus
  // with error feedback what the last encoding of these values rounded away. With an overlap
  // what is sent is kept ("outer.sent"): a resume starts the exchange again from it.
  const bool fp32 = opts_.dtype == OuterDType::fp32;
  std::vector<float> values(size_t(x->n));
  int64_t j = 0;
  for (const auto& sp : x->spans) {
    Slice& sl = slices_[sp.slice];
    const int64_t len = sp.end - sp.begin, off = sp.begin - sl.begin;
    float* v = values.data() + j;
    if (again) {
      std::copy(sl.sent.begin() + off, sl.sent.begin() + off + len, v);
    } else {
      const float* p = at(params[sp.slice], sp.begin);
      const float* g = sl.global.data() + off;
      if (fp32) {
        std::copy(p, p + len, v);
      } else if (sl.residual.empty()) {
        for (int64_t i = 0; i < len; ++i) v[i] = g[i] - p[i];
      } else {
        for (int64_t i = 0; i < len; ++i) v[i] = g[i] - p[i] + sl.residual[size_t(off + i)];
      }
      if (!sl.sent.empty()) std::copy(v, v + len, sl.sent.begin() + off);
    }
    j += len;
  }
  const int groups = int(present_.size());
  const bool across = across_ && groups > 1;
  if (opts_.dtype == OuterDType::fp32) {
    x->values = std::move(values);
    if (across) x->work = across_->all_reduce_async(x->values.data(), x->values.data(), size_t(x->n), DType::f32,
                                                    comm::ReduceOp::sum);
    stats_.bytes_last += across ? x->n * int64_t(sizeof(float)) : 0;
  } else {
    const int64_t bytes = encoded_bytes(x->n, opts_.dtype);
    x->send.resize(size_t(bytes));
    encode(values.data(), x->n, opts_.dtype, x->send.data());
    if (opts_.error_feedback && !again) {  // the residual: what the codes leave out
      std::vector<float> back(size_t(x->n), 0.0f);
      decode_add(x->send.data(), x->n, opts_.dtype, 1.0f, back.data());
      int64_t k = 0;
      for (const auto& sp : x->spans) {
        Slice& sl = slices_[sp.slice];
        for (int64_t i = sp.begin; i < sp.end; ++i, ++k) sl.residual[size_t(i - sl.begin)] = values[size_t(k)] - back[size_t(k)];
      }
    }
    x->recv.resize(size_t(bytes) * size_t(groups));
    if (across) {
      x->work = across_->all_gather_async(x->send.data(), x->recv.data(), size_t(bytes), DType::u8);
    } else {
      std::copy(x->send.begin(), x->send.end(), x->recv.begin());
    }
    stats_.bytes_last += across ? bytes : 0;
  }
  pending_.push_back(std::move(x));
}

void OuterSyncEngine::finish(Exchange& x, bool replace) {
  TraceSpan span(tracer(), "outer sync", "comm");
  if (x.work) x.work->wait();
  const std::vector<StateShard> params = params_states(*inner_);
  const float lr = float(opts_.lr), mu = float(opts_.momentum), keep = float(1.0 - opts_.lr);
  const float alpha = replace || opts_.overlap == 0 ? 0.0f : float(opts_.mix);
  const int groups = int(present_.size());
  const float inv = 1.0f / float(groups);
  // fp32: the groups' mean parameters; otherwise the mean outer gradient, decoded in group order.
  std::vector<float> mean(size_t(x.n), 0.0f);
  if (opts_.dtype == OuterDType::fp32) {
    for (int64_t i = 0; i < x.n; ++i) mean[size_t(i)] = groups > 1 ? x.values[size_t(i)] * inv : x.values[size_t(i)];
  } else {
    const int64_t bytes = int64_t(x.send.size());
    for (int g = 0; g < groups; ++g) decode_add(x.recv.data() + g * bytes, x.n, opts_.dtype, inv, mean.data());
  }
  int64_t j = 0;
  for (const auto& sp : x.spans) {
    Slice& sl = slices_[sp.slice];
    float* p = at(params[sp.slice], sp.begin);
    float* g = sl.global.data() + (sp.begin - sl.begin);
    float* m = sl.momentum.data() + (sp.begin - sl.begin);
    const float* avg = mean.data() + j;
    const int64_t len = sp.end - sp.begin;
    if (opts_.dtype == OuterDType::fp32) {
      for (int64_t i = 0; i < len; ++i) {
        const float delta = g[i] - avg[i];
        m[i] = mu * m[i] + delta;
        g[i] = avg[i] + keep * delta - lr * mu * m[i];
      }
    } else {
      for (int64_t i = 0; i < len; ++i) {  // avg holds the mean Δ
        m[i] = mu * m[i] + avg[i];
        g[i] = g[i] - lr * (avg[i] + mu * m[i]);
      }
    }
    for (int64_t i = 0; i < len; ++i) p[i] = alpha == 0.0f ? g[i] : alpha * p[i] + (1.0f - alpha) * g[i];
    j += len;
  }
  ++stats_.syncs;
}

void OuterSyncEngine::state_loaded(int64_t step_count) {
  inner_->state_loaded(step_count);
  for (auto& x : pending_)
    if (x->work) x->work->wait();
  pending_.clear();
  if (opts_.overlap == 0 || step_count >= last_step_) return;
  // Exchanges in flight at the saved step start again from what their groups sent (kept in
  // "outer.sent").
  for (int f = 0; f < opts_.fragments; ++f) {
    const int64_t t = start_step_before(f, step_count);
    if (t > 0 && step_count < t + opts_.overlap) {
      start(f, t, true);
      stats_.bytes_sent += stats_.bytes_last;  // sent again: traffic of this attempt, in no step's record
      stats_.bytes_last = 0;
    }
  }
}

std::vector<StateShard> OuterSyncEngine::state_shards() {
  std::vector<StateShard> own = inner_->state_shards();
  for (Slice& sl : slices_) {
    if (!sl.sent.empty()) own.push_back({"outer.sent", DType::f32, sl.begin, sl.end, sl.write_begin, sl.write_end, sl.sent.data()});
    if (!sl.residual.empty())
      own.push_back({"outer.residual", DType::f32, sl.begin, sl.end, sl.write_begin, sl.write_end, sl.residual.data()});
  }
  std::vector<StateShard> out;
  for (const StateShard& s : own) {
    if (opts_.groups == 1) {
      out.push_back(s);
      continue;
    }
    // Every rank names every present group's states (a checkpoint's states are the same on
    // every rank); it holds and writes its own group's only.
    for (int g : present_) {
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
    // Every group holds the same global state; the first present group writes it.
    const bool writes = group_ == present_.front();
    const int64_t wb = writes ? sl.write_begin : sl.begin, we = writes ? sl.write_end : sl.begin;
    out.push_back({"outer.params", DType::f32, sl.begin, sl.end, wb, we, sl.global.data()});
    out.push_back({"outer.momentum", DType::f32, sl.begin, sl.end, wb, we, sl.momentum.data()});
  }
  return out;
}

int64_t OuterSyncEngine::state_bytes() const {
  int64_t b = 0;
  for (const Slice& sl : slices_)
    b += int64_t(sizeof(float)) * int64_t(sl.global.size() + sl.momentum.size() + sl.sent.size() + sl.residual.size());
  return b;
}

}  // namespace strata::parallel
