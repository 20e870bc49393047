#include "parallel/grad_reducer.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "core/trace.h"
#include "parallel/region.h"
#include "parallel/precision.h"
#include "parallel/zero_comm.h"

namespace strata::parallel {

GradReducer::GradReducer(Region& region) : r_(region) {
  const int nb = int(r_.buckets.size());
  bucket_of_unit_.assign(r_.units.size(), -1);
  for (int k = 0; k < nb; ++k)
    for (int u = r_.buckets[k].last_unit; u <= r_.buckets[k].first_unit; ++u)
      bucket_of_unit_[u] = k;
  pending_.assign(nb, 0);
  cycles_.assign(nb, 0);
  launched_step_.assign(nb, false);
  launched_.assign(nb, false);
  work_.resize(nb);
  acquired_.assign(r_.units.size(), false);
  if (r_.opts->stage >= 2) {
    int64_t max_other = 0;
    for (int k = 0; k + 1 < nb; ++k) max_other = std::max(max_other, r_.buckets[k].range.size());
    const int rotating = std::min(2, nb - 1);
    slot_offset_.push_back(0);
    int64_t total = r_.buckets[nb - 1].range.size();
    for (int s = 0; s < rotating; ++s) {
      slot_offset_.push_back(total);
      total += max_other;
    }
    slot_owner_.assign(slot_offset_.size(), -1);
    staging_ = Buffer(MemCategory::comm, size_t(total) * r_.wbytes);
  }
  rdtype_ = r_.opts->reduce() == Precision::bf16 ? DType::bf16 : DType::f32;
  if (rdtype_ != r_.wdtype) {
    const int64_t n = r_.opts->stage <= 1 ? r_.layout.psi()
                                          : int64_t(staging_.bytes()) / r_.wbytes;
    wire_ = Buffer(MemCategory::comm, size_t(n) * dtype_size(rdtype_));
  }
  begin_step();
}

void* GradReducer::wire_data(int bucket) const {
  const int64_t at = r_.opts->stage <= 1 ? r_.buckets[bucket].range.begin
                                         : slot_offset_[slot_of(bucket)];
  return elem_ptr(wire_.data(), at, rdtype_);
}

int GradReducer::slot_of(int bucket) const {
  const int nb = int(r_.buckets.size());
  if (bucket == nb - 1) return 0;
  return 1 + bucket % (int(slot_offset_.size()) - 1);
}

char* GradReducer::slot_data(int slot) const {
  return elem_ptr(staging_.data(), slot_offset_[slot], r_.wdtype);
}

bool GradReducer::idle() const {
  return std::none_of(launched_.begin(), launched_.end(), [](bool b) { return b; });
}

void GradReducer::begin_step() {
  STRATA_CHECK(idle(),
               "begin_step: gradient collectives of the last step are still in flight "
               "(end_backward was not called)");
  num_micro_ = 1;
  for (size_t k = 0; k < pending_.size(); ++k) {
    pending_[k] = bucket_units(int(k));
    cycles_[k] = 0;
    launched_step_[k] = false;
  }
  std::fill(acquired_.begin(), acquired_.end(), false);
  bytes_step_ = 0;
}

int GradReducer::bucket_units(int k) const {
  const Bucket& b = r_.buckets[size_t(k)];
  return b.first_unit - b.last_unit + 1;
}

void GradReducer::begin_micro(int micro, int num_micro) {
  STRATA_CHECK(num_micro >= 1 && micro >= 0 && micro < num_micro, "begin_micro(", micro, ", ",
               num_micro, "): micro-batch index out of range");
  num_micro_ = num_micro;
  if (micro > 0) close_partial_cycles();
}

void* GradReducer::unit_grads(int unit) {
  const Range ur = r_.units[unit];
  if (r_.opts->stage <= 1) return elem_ptr(r_.grads.data(), ur.begin, r_.wdtype);
  const int k = bucket_of_unit_[unit];
  const int s = slot_of(k);
  char* p = slot_data(s) + (ur.begin - r_.buckets[k].range.begin) * r_.wbytes;
  if (!acquired_[unit]) {
    int owner = slot_owner_[s];
    if (owner >= 0 && launched_[owner]) {
      complete(owner);  // an older bucket's collective still reads this buffer
      owner = -1;
    }
    STRATA_CHECK(owner == -1 || owner == k, "internal: bucket buffer ", s, " held by bucket ",
                 owner, " while bucket ", k, " needs it");
    slot_owner_[s] = k;
    std::memset(p, 0, size_t(ur.size()) * r_.wbytes);
    acquired_[unit] = true;
  }
  return p;
}

void GradReducer::unit_done(int unit) {
  const int k = bucket_of_unit_[unit];
  STRATA_CHECK(pending_[k] > 0, "internal: unit ", unit,
               " finished backward twice in one pass of its bucket");
  if (--pending_[k] == 0) end_cycle(k);
}

// One pass of bucket k's units is complete: stages 2-3 reduce every pass; stages 0-1 only
// the last of the step's micro-batches (the gradients accumulated in place until then).
void GradReducer::end_cycle(int k) {
  ++cycles_[k];
  if (r_.opts->stage >= 2 || cycles_[k] == num_micro_) {
    launch(k);
    launched_step_[k] = true;
  }
  pending_[k] = bucket_units(k);
  const Bucket& b = r_.buckets[size_t(k)];
  for (int u = b.last_unit; u <= b.first_unit; ++u) acquired_[size_t(u)] = false;
}

void GradReducer::launch(int k) {
  const Bucket& b = r_.buckets[k];
  void* data = r_.opts->stage <= 1 ? elem_ptr(r_.grads.data(), b.range.begin, r_.wdtype)
                                   : slot_data(slot_of(k));
  launched_[k] = true;
  if (r_.pg.size() == 1) return;  // nothing to reduce: the sum over one rank is its gradient
  if (rdtype_ != r_.wdtype) {
    void* wire = wire_data(k);
    convert(wire, rdtype_, data, r_.wdtype, b.range.size());
    data = wire;
  }
  work_[k] = reduce_range_async(r_.pg, r_.layout, data, b.range, rdtype_,
                                /*scatter=*/r_.opts->stage >= 1, cat(r_.tag, "grad bucket ", k));
  bytes_step_ += b.range.size() * int64_t(dtype_size(rdtype_));
}

// The reduced result of bucket k back from the wire buffer into its working-dtype home: the
// whole range after an all-reduce, this rank's part after a reduce-scatter.
void GradReducer::unwire(int k) {
  const Bucket& b = r_.buckets[k];
  void* home = r_.opts->stage <= 1 ? elem_ptr(r_.grads.data(), b.range.begin, r_.wdtype)
                                   : slot_data(slot_of(k));
  const int64_t off = r_.opts->stage == 0 ? 0 : r_.layout.own_offset_in(b.range);
  const int64_t n = r_.opts->stage == 0 ? b.range.size() : r_.layout.own_part(b.range).size();
  convert(elem_ptr(home, off, r_.wdtype), r_.wdtype, elem_ptr(wire_data(k), off, rdtype_),
          rdtype_, n);
}

void GradReducer::complete(int k) {
  if (!launched_[k]) return;
  launched_[k] = false;
  if (work_[k]) {
    {
      TraceSpan wait(tracer(), tracer().enabled() ? cat("wait ", r_.tag, "grad bucket ", k) : "",
                     "wait");
      work_[k]->wait();
    }
    work_[k].reset();
    if (rdtype_ != r_.wdtype) unwire(k);
  }
  if (r_.opts->stage <= 1) return;
  const Bucket& b = r_.buckets[k];
  const Range part = r_.layout.own_part(b.range);
  if (!part.empty()) {
    const char* src = slot_data(slot_of(k)) + r_.layout.own_offset_in(b.range) * r_.wbytes;
    add_into(elem_ptr(r_.grads.data(), part.begin - r_.layout.own().begin, r_.wdtype), src,
             part.size(), r_.wdtype);
  }
  slot_owner_[slot_of(k)] = -1;
}

// A rank whose hooks did not report some units of a pass (it skipped a micro-batch) still
// issues the buckets' collectives, in bucket order, so every rank's sequence matches.
void GradReducer::close_partial_cycles() {
  for (size_t k = 0; k < pending_.size(); ++k) {
    if (pending_[k] == bucket_units(int(k))) continue;
    const Bucket& b = r_.buckets[k];
    if (r_.opts->stage >= 2)
      for (int u = b.last_unit; u <= b.first_unit; ++u) unit_grads(u);
    end_cycle(int(k));
  }
}

void GradReducer::wait_all() {
  for (size_t k = 0; k < work_.size(); ++k)
    if (work_[k]) work_[k]->wait();
}

void GradReducer::finish() {
  close_partial_cycles();
  // A bucket no pass reported this step still reduces once (its zero gradients), as every
  // other rank's does.
  for (size_t k = 0; k < pending_.size(); ++k) {
    const bool due = r_.opts->stage <= 1 ? !launched_step_[k] : cycles_[k] == 0;
    if (!due) continue;
    const Bucket& b = r_.buckets[k];
    if (r_.opts->stage >= 2)
      for (int u = b.last_unit; u <= b.first_unit; ++u) unit_grads(u);
    end_cycle(int(k));
    launched_step_[k] = true;
    if (!launched_[k]) launch(int(k));
  }
  for (size_t k = 0; k < work_.size(); ++k) complete(int(k));
  // A second end_backward without backward communicates nothing.
  std::fill(launched_step_.begin(), launched_step_.end(), true);
  std::fill(cycles_.begin(), cycles_.end(), 1);
}

}  // namespace strata::parallel
