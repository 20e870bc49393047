#include "core/memory.h"

#include <sys/mman.h>

#include <cstdint>
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

nlohmann::json MemoryTracker::to_json() const {
  nlohmann::json j;
  for (int i = 0; i < kNumMemCategories; ++i)
    j[mem_category_name(MemCategory(i))] = {{"current", cur_[i].load()}, {"peak", peak_[i].load()}};
  j["total"] = {{"current", total_.load()}, {"peak", peak_total_.load()}};
  return j;
}

// Never destroyed, like the tracer (core/trace.cc): buffers of threads and statics that
// outlive main's other static objects still count themselves out here.
MemoryTracker& memory_tracker() {
  static MemoryTracker* tracker = new MemoryTracker;
  return *tracker;
}

// Large buffers come straight from the kernel: its pages are already zero (no memset pass
// over memory nobody has touched yet), and 2 MiB alignment plus MADV_HUGEPAGE lets them be
// backed by huge pages, so filling 200 MB of activations takes ~100 page faults, not ~50,000
// (each costly under a hypervisor). Small buffers use the allocator.
static constexpr size_t kHugePage = size_t(2) << 20;

static size_t mapped_length(size_t bytes) { return (bytes + kHugePage - 1) / kHugePage * kHugePage; }

static void* map_zeroed(size_t bytes) {
  const size_t len = mapped_length(bytes);
  void* raw = mmap(nullptr, len + kHugePage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                   -1, 0);
  if (raw == MAP_FAILED) return nullptr;
  const uintptr_t start = reinterpret_cast<uintptr_t>(raw);
  const uintptr_t aligned = (start + kHugePage - 1) / kHugePage * kHugePage;
  if (aligned > start) munmap(raw, aligned - start);
  const uintptr_t end = start + len + kHugePage;
  if (end > aligned + len) munmap(reinterpret_cast<void*>(aligned + len), end - (aligned + len));
  void* p = reinterpret_cast<void*>(aligned);
  madvise(p, len, MADV_HUGEPAGE);  // advice only: without THP the pages are just small
  return p;
}

Buffer::Buffer(MemCategory c, size_t bytes) : bytes_(bytes), cat_(c) {
  if (bytes == 0) return;
  if (bytes >= kHugePage) {
    ptr_ = map_zeroed(bytes);
  } else {
    size_t rounded = align64(bytes);
    ptr_ = std::aligned_alloc(64, rounded);
    if (ptr_) std::memset(ptr_, 0, rounded);
  }
  if (!ptr_) fail("out of memory allocating ", bytes, " bytes for ", mem_category_name(c));
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
    if (bytes_ >= kHugePage) munmap(ptr_, mapped_length(bytes_));
    else std::free(ptr_);
    memory_tracker().sub(cat_, int64_t(bytes_));
  }
  ptr_ = nullptr;
  bytes_ = 0;
}

}  // namespace strata
