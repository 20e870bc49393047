// Memory accounting by category. Every large allocation in strata goes through a Buffer,
// which reports its bytes to the process's MemoryTracker for as long as it lives, so the
// run summary shows current and peak bytes per category (the ZeRO arithmetic is checked
// against these numbers). One tracker per process: memory is a property of the process.
#pragma once
#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/align.h"  // align64, which the allocations round to
#include "nlohmann/json_fwd.hpp"

namespace strata {

enum class MemCategory : uint8_t { parameters, gradients, optimizer, activations, comm, other };
inline constexpr int kNumMemCategories = 6;

const char* mem_category_name(MemCategory c);

class MemoryTracker {
 public:
  void add(MemCategory c, int64_t bytes);
  void sub(MemCategory c, int64_t bytes);
  int64_t current(MemCategory c) const { return cur_[int(c)].load(); }
  int64_t peak(MemCategory c) const { return peak_[int(c)].load(); }
  int64_t peak_total() const { return peak_total_.load(); }
  // {"parameters": {"current": .., "peak": ..}, ..., "total": {...}}
  nlohmann::json to_json() const;

 private:
  std::array<std::atomic<int64_t>, kNumMemCategories> cur_{};
  std::array<std::atomic<int64_t>, kNumMemCategories> peak_{};
  std::atomic<int64_t> total_{0}, peak_total_{0};
};

MemoryTracker& memory_tracker();

// An owning, 64-byte aligned, zero-initialised allocation counted under one category.
class Buffer {
 public:
  Buffer() = default;
  Buffer(MemCategory c, size_t bytes);
  ~Buffer() { release(); }
  Buffer(Buffer&& o) noexcept { *this = std::move(o); }
  Buffer& operator=(Buffer&& o) noexcept;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  void* data() const { return ptr_; }
  template <typename T>
  T* as() const { return static_cast<T*>(ptr_); }
  size_t bytes() const { return bytes_; }
  MemCategory category() const { return cat_; }
  void release();

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
  MemCategory cat_ = MemCategory::other;
};

}  // namespace strata
