#include "parallel/param_gatherer.h"

#include <algorithm>

#include "core/error.h"
#include "core/trace.h"
#include "parallel/region.h"
#include "parallel/precision.h"
#include "parallel/zero_comm.h"

namespace strata::parallel {

using model::Pass;

ParamGatherer::ParamGatherer(Region& region) : r_(region) {
  const int U = int(r_.units.size());
  const int t = r_.tied_unit0 ? 1 : 0;  // units with a slot of their own
  int64_t max_other = 0;
  for (int u = t; u < U; ++u) max_other = std::max(max_other, r_.units[u].size());
  const int others =
      r_.opts->reshard_after_forward ? std::min(r_.opts->prefetch + 1, U - t) : U - t;
  int64_t total = 0;
  if (t) {
    total = r_.units[0].size();
    slots_.push_back({0, -1});
  }
  for (int s = 0; s < others; ++s) {
    slots_.push_back({total, -1});
    total += max_other;
  }
  buf_ = Buffer(MemCategory::comm, size_t(total) * r_.wbytes);
  units_.resize(U);
  for (int u = 0; u < U; ++u) order_.push_back({u, Pass::forward});
  if (t) {
    order_.push_back({0, Pass::forward});
    order_.push_back({0, Pass::backward});
  }
  for (int u = U - 1; u >= t; --u) order_.push_back({u, Pass::backward});
}

bool ParamGatherer::own_slot(int unit) const { return r_.tied_unit0 && unit == 0; }
int ParamGatherer::first_shared_slot() const { return r_.tied_unit0 ? 1 : 0; }

void ParamGatherer::issue(int unit, int slot) {
  const Range r = r_.units[unit];
  const Range part = r_.layout.own_part(r);
  const int64_t from = part.empty() ? 0 : part.begin - r_.layout.own().begin;
  void* dst = elem_ptr(buf_.data(), slots_[slot].offset, r_.wdtype);
  units_[unit].work =
      gather_range_async(r_.pg, r_.layout, elem_ptr(r_.params.data(), from, r_.wdtype), dst, r,
                         r_.wdtype, cat(r_.tag, "params unit ", unit));
  slots_[slot].unit = unit;
  units_[unit].slot = slot;
  ++gathers_;
}

int ParamGatherer::free_slot(int unit) {
  if (own_slot(unit)) return slots_[0].unit == -1 ? 0 : -1;
  for (size_t s = size_t(first_shared_slot()); s < slots_.size(); ++s)
    if (slots_[s].unit == -1) return int(s);
  return -1;
}

void ParamGatherer::drop(int unit) {
  UnitState& st = units_[unit];
  if (st.slot < 0) return;
  if (st.work) {
    st.work->wait();
    st.work.reset();
  }
  slots_[st.slot].unit = -1;
  st.slot = -1;
  st.in_use = false;
}

void ParamGatherer::evict_for(int unit) {
  for (size_t s = size_t(first_shared_slot()); s < slots_.size(); ++s) {
    const int held = slots_[s].unit;
    if (held >= 0 && !units_[held].in_use) {
      drop(held);
      return;
    }
  }
  fail("internal: no parameter slot free for unit ", unit, " (", slots_.size() - first_shared_slot(),
       " slots all in use)");
}

void ParamGatherer::prefetch_from(size_t pos) {
  const int depth = r_.opts->prefetch;
  std::vector<int> seen;
  for (size_t j = pos; j < order_.size() && depth > 0; ++j) {
    const int v = order_[j].first;
    if (own_slot(v) || std::find(seen.begin(), seen.end(), v) != seen.end()) continue;
    seen.push_back(v);
    if (int(seen.size()) > depth) break;
    if (units_[v].slot >= 0) continue;
    const int s = free_slot(v);
    if (s < 0) break;
    issue(v, s);
  }
}

void* ParamGatherer::acquire(int unit, Pass pass) {
  const std::pair<int, Pass> use{unit, pass};
  auto it = std::find(order_.begin() + std::min(pos_, order_.size()), order_.end(), use);
  if (it == order_.end()) it = std::find(order_.begin(), order_.end(), use);
  STRATA_CHECK(it != order_.end(), "internal: unit ", unit, " is not in the model's order of use");
  pos_ = size_t(it - order_.begin()) + 1;
  UnitState& st = units_[unit];
  if (st.slot < 0) {
    int s = free_slot(unit);
    if (s < 0) {
      evict_for(unit);
      s = free_slot(unit);
    }
    issue(unit, s);
  }
  prefetch_from(pos_);
  if (st.work) {
    TraceSpan wait(tracer(), tracer().enabled() ? cat("wait ", r_.tag, "params unit ", unit) : "", "wait");
    st.work->wait();
    st.work.reset();
  }
  st.in_use = true;
  return elem_ptr(buf_.data(), slots_[st.slot].offset, r_.wdtype);
}

void ParamGatherer::release(int unit, Pass pass) {
  units_[unit].in_use = false;
  // Kept after forward: the tied unit 0, and the units backward needs first (dense: the last
  // block L and the final norm; experts: the last MoE block's experts).
  const int keep_from = int(units_.size()) - (r_.tied_unit0 ? 2 : 1);
  if (pass == Pass::backward) {
    drop(unit);
  } else if (!own_slot(unit) && unit < keep_from && r_.opts->reshard_after_forward) {
    drop(unit);
  }
}

void ParamGatherer::invalidate() {
  for (int u = 0; u < int(units_.size()); ++u) drop(u);
  pos_ = 0;
}

void ParamGatherer::prime() {
  pos_ = 0;
  if (r_.tied_unit0 && units_[0].slot < 0) issue(0, 0);
  prefetch_from(0);
}

}  // namespace strata::parallel
