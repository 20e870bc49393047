// Monotonic time.
#pragma once
#include <chrono>
#include <cstdint>

namespace strata {

inline int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
inline double now_s() { return double(now_ns()) * 1e-9; }

class Stopwatch {
 public:
  Stopwatch() : start_(now_ns()) {}
  void reset() { start_ = now_ns(); }
  double seconds() const { return double(now_ns() - start_) * 1e-9; }
  double ms() const { return double(now_ns() - start_) * 1e-6; }

 private:
  int64_t start_;
};

}  // namespace strata
