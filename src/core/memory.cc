#include "core/memory.h"

#include <cstdlib>
#include <cstring>
#include <new>

#include "core/error.h"
#include "nlohmann/json.hpp"

namespace strata {

const char* mem_category_name(MemCategory c) {
  switch (c) {
    case MemCategory::parameters: return "parameters";
    case MemCategory::gradients: return "gradients";
    case MemCategory::optimizer: return "optimizer";
    case MemCategory::activations: return "activations";
    case MemCategory::comm: return "comm";
    case MemCategory::other: return "other";
  }
  return "?";
}

static void raise_peak(std::atomic<int64_t>& peak, int64_t v) {
  int64_t p = peak.load();
  while (v > p && !peak.compare_exchange_weak(p, v)) {
  }
}

void MemoryTracker::add(MemCategory c, int64_t bytes) {
  raise_peak(peak_[int(c)], cur_[int(c)].fetch_add(bytes) + bytes);
  raise_peak(peak_total_, total_.fetch_add(bytes) + bytes);
}

void MemoryTracker::sub(MemCategory c, int64_t bytes) {
  cur_[int(c)].fetch_sub(bytes);
  total_.fetch_sub(bytes);
}

void MemoryTracker::reset_peaks() {
  for (int i = 0; i < kNumMemCategories; ++i) peak_[i] = cur_[i].load();
  peak_total_ = total_.load();
}

nlohmann::json MemoryTracker::to_json() const {
  nlohmann::json j;
  for (int i = 0; i < kNumMemCategories; ++i)
    j[mem_category_name(MemCategory(i))] = {{"current", cur_[i].load()}, {"peak", peak_[i].load()}};
  j["total"] = {{"current", total_.load()}, {"peak", peak_total_.load()}};
  return j;
}

MemoryTracker& memory_tracker() {
  static MemoryTracker tracker;
  return tracker;
}

Buffer::Buffer(MemCategory c, size_t bytes) : bytes_(bytes), cat_(c) {
  if (bytes == 0) return;
  size_t rounded = (bytes + 63) / 64 * 64;
  ptr_ = std::aligned_alloc(64, rounded);
  if (!ptr_) fail("out of memory allocating ", bytes, " bytes for ", mem_category_name(c));
  std::memset(ptr_, 0, rounded);
  memory_tracker().add(c, int64_t(bytes));
}

Buffer& Buffer::operator=(Buffer&& o) noexcept {
  if (this != &o) {
    release();
    ptr_ = o.ptr_;
    bytes_ = o.bytes_;
    cat_ = o.cat_;
    o.ptr_ = nullptr;
    o.bytes_ = 0;
  }
  return *this;
}

void Buffer::release() {
  if (ptr_) {
    std::free(ptr_);
    memory_tracker().sub(cat_, int64_t(bytes_));
  }
  ptr_ = nullptr;
  bytes_ = 0;
}

}  // namespace strata
