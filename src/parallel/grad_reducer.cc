#include "parallel/grad_reducer.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "core/trace.h"
#include "parallel/data_parallel.h"
#include "parallel/precision.h"
#include "parallel/zero_comm.h"

namespace strata::parallel {

GradReducer::GradReducer(DataParallelEngine& engine) : e_(engine) {
  const int nb = int(e_.buckets_.size());
  bucket_of_unit_.assign(e_.units_.size(), -1);
  for (int k = 0; k < nb; ++k)
    for (int u = e_.buckets_[k].last_unit; u <= e_.buckets_[k].first_unit; ++u)
      bucket_of_unit_[u] = k;
  pending_.assign(nb, 0);
  launched_.assign(nb, false);
  work_.resize(nb);
  acquired_.assign(e_.units_.size(), false);
  if (e_.opts_.stage >= 2) {
    int64_t max_other = 0;
    for (int k = 0; k + 1 < nb; ++k) max_other = std::max(max_other, e_.buckets_[k].range.size());
    const int rotating = std::min(2, nb - 1);
    slot_offset_.push_back(0);
    int64_t total = e_.buckets_[nb - 1].range.size();
    for (int s = 0; s < rotating; ++s) {
      slot_offset_.push_back(total);
      total += max_other;
    }
    slot_owner_.assign(slot_offset_.size(), -1);
    staging_ = Buffer(MemCategory::comm, size_t(total) * e_.wbytes_);
  }
  rdtype_ = e_.opts_.reduce() == Precision::bf16 ? DType::bf16 : DType::f32;
  if (rdtype_ != e_.wdtype_) {
    const int64_t n = e_.opts_.stage <= 1 ? e_.layout_.psi()
                                          : int64_t(staging_.bytes()) / e_.wbytes_;
    wire_ = Buffer(MemCategory::comm, size_t(n) * dtype_size(rdtype_));
  }
  begin_step();
}

void* GradReducer::wire_data(int bucket) const {
  const int64_t at = e_.opts_.stage <= 1 ? e_.buckets_[bucket].range.begin
                                         : slot_offset_[slot_of(bucket)];
  return elem_ptr(wire_.data(), at, rdtype_);
}

int GradReducer::slot_of(int bucket) const {
  const int nb = int(e_.buckets_.size());
  if (bucket == nb - 1) return 0;
  return 1 + bucket % (int(slot_offset_.size()) - 1);
}

char* GradReducer::slot_data(int slot) const {
  return elem_ptr(staging_.data(), slot_offset_[slot], e_.wdtype_);
}

bool GradReducer::idle() const {
  return std::none_of(launched_.begin(), launched_.end(), [](bool b) { return b; });
}

void GradReducer::begin_step() {
  STRATA_CHECK(idle(),
               "begin_step: gradient collectives of the last step are still in flight "
               "(end_backward was not called)");
  begin_micro(0, 1);
  bytes_step_ = 0;
}

void GradReducer::begin_micro(int micro, int num_micro) {
  STRATA_CHECK(num_micro >= 1 && micro >= 0 && micro < num_micro, "begin_micro(", micro, ", ",
               num_micro, "): micro-batch index out of range");
  if (micro > 0 && communicate_) finish_micro_launches();
  communicate_ = e_.opts_.stage >= 2 || micro == num_micro - 1;
  for (size_t k = 0; k < pending_.size(); ++k) {
    const Bucket& b = e_.buckets_[k];
    pending_[k] = b.first_unit - b.last_unit + 1;
  }
  std::fill(acquired_.begin(), acquired_.end(), false);
}

void* GradReducer::unit_grads(int unit) {
  const Range ur = e_.units_[unit];
  if (e_.opts_.stage <= 1) return elem_ptr(e_.grads_.data(), ur.begin, e_.wdtype_);
  const int k = bucket_of_unit_[unit];
  const int s = slot_of(k);
  char* p = slot_data(s) + (ur.begin - e_.buckets_[k].range.begin) * e_.wbytes_;
  if (!acquired_[unit]) {
    int owner = slot_owner_[s];
    if (owner >= 0 && launched_[owner]) {
      complete(owner);  // an older bucket's collective still reads this buffer
      owner = -1;
    }
    STRATA_CHECK(owner == -1 || owner == k, "internal: bucket buffer ", s, " held by bucket ",
                 owner, " while bucket ", k, " needs it");
    slot_owner_[s] = k;
    std::memset(p, 0, size_t(ur.size()) * e_.wbytes_);
    acquired_[unit] = true;
  }
  return p;
}

void GradReducer::unit_done(int unit) {
  const int k = bucket_of_unit_[unit];
  STRATA_CHECK(pending_[k] > 0, "internal: unit ", unit,
               " finished backward twice in a micro-batch");
  if (--pending_[k] == 0 && communicate_) launch(k);
}

void GradReducer::launch(int k) {
  const Bucket& b = e_.buckets_[k];
  void* data = e_.opts_.stage <= 1 ? elem_ptr(e_.grads_.data(), b.range.begin, e_.wdtype_)
                                   : slot_data(slot_of(k));
  if (rdtype_ != e_.wdtype_) {
    void* wire = wire_data(k);
    convert(wire, rdtype_, data, e_.wdtype_, b.range.size());
    data = wire;
  }
  work_[k] = reduce_range_async(e_.pg_, e_.layout_, data, b.range, rdtype_,
                                /*scatter=*/e_.opts_.stage >= 1, cat("grad bucket ", k));
  bytes_step_ += b.range.size() * int64_t(dtype_size(rdtype_));
  launched_[k] = true;
}

// The reduced result of bucket k back from the wire buffer into its working-dtype home: the
// whole range after an all-reduce, this rank's part after a reduce-scatter.
void GradReducer::unwire(int k) {
  const Bucket& b = e_.buckets_[k];
  void* home = e_.opts_.stage <= 1 ? elem_ptr(e_.grads_.data(), b.range.begin, e_.wdtype_)
                                   : slot_data(slot_of(k));
  const int64_t off = e_.opts_.stage == 0 ? 0 : e_.layout_.own_offset_in(b.range);
  const int64_t n = e_.opts_.stage == 0 ? b.range.size() : e_.layout_.own_part(b.range).size();
  convert(elem_ptr(home, off, e_.wdtype_), e_.wdtype_, elem_ptr(wire_data(k), off, rdtype_),
          rdtype_, n);
}

void GradReducer::complete(int k) {
  if (!launched_[k]) return;
  {
    TraceSpan wait(tracer(), tracer().enabled() ? cat("wait grad bucket ", k) : "", "wait");
    work_[k]->wait();
  }
  work_[k].reset();
  launched_[k] = false;
  if (rdtype_ != e_.wdtype_) unwire(k);
  if (e_.opts_.stage <= 1) return;
  const Bucket& b = e_.buckets_[k];
  const Range part = e_.layout_.own_part(b.range);
  if (!part.empty()) {
    const char* src = slot_data(slot_of(k)) + e_.layout_.own_offset_in(b.range) * e_.wbytes_;
    add_into(elem_ptr(e_.grads_.data(), part.begin - e_.layout_.own().begin, e_.wdtype_), src,
             part.size(), e_.wdtype_);
  }
  slot_owner_[slot_of(k)] = -1;
}

// A rank whose hooks did not report some units (it skipped a micro-batch) still issues the
// buckets' collectives, in bucket order, so every rank's sequence of collectives matches.
void GradReducer::finish_micro_launches() {
  for (size_t k = 0; k < pending_.size(); ++k) {
    if (pending_[k] == 0) continue;
    const Bucket& b = e_.buckets_[k];
    if (e_.opts_.stage >= 2)
      for (int u = b.last_unit; u <= b.first_unit; ++u) unit_grads(u);
    pending_[k] = 0;
    launch(int(k));
  }
}

void GradReducer::wait_all() {
  for (size_t k = 0; k < work_.size(); ++k)
    if (work_[k]) work_[k]->wait();
}

void GradReducer::finish() {
  if (communicate_) finish_micro_launches();
  for (size_t k = 0; k < work_.size(); ++k) complete(int(k));
  communicate_ = false;  // a second end_backward without backward communicates nothing
}

}  // namespace strata::parallel
