// Counter-based RNG (Philox4x32-10, Salmon et al. 2011): every value is a pure function
// f(seed, stream, counter), so any rank at any step draws the same numbers with no shared
// state and nothing to save but (seed, stream, counter). Streams separate independent uses
// (initialisation of each parameter, data order of each epoch, sampling, dropout...).
#pragma once
#include <array>
#include <cmath>
#include <cstdint>

namespace strata {

inline std::array<uint32_t, 4> philox4x32(uint64_t seed, uint64_t stream, uint64_t counter) {
  uint32_t c0 = uint32_t(counter), c1 = uint32_t(counter >> 32);
  uint32_t c2 = uint32_t(stream), c3 = uint32_t(stream >> 32);
  uint32_t k0 = uint32_t(seed), k1 = uint32_t(seed >> 32);
  for (int round = 0; round < 10; ++round) {
    uint64_t p0 = uint64_t(0xD2511F53u) * c0;
    uint64_t p1 = uint64_t(0xCD9E8D57u) * c2;
    uint32_t n0 = uint32_t(p1 >> 32) ^ c1 ^ k0;
    uint32_t n2 = uint32_t(p0 >> 32) ^ c3 ^ k1;
    c1 = uint32_t(p1);
    c3 = uint32_t(p0);
    c0 = n0;
    c2 = n2;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return {c0, c1, c2, c3};
}

// A cursor over one (seed, stream): next_* advance the counter. Copyable; its whole state is
// (seed, stream, counter), which is what checkpoints store.
class Rng {
 public:
  Rng(uint64_t seed, uint64_t stream, uint64_t counter = 0)
      : seed_(seed), stream_(stream), counter_(counter) {}

  // Four fresh 32-bit words per counter value; next_u32 hands them out one at a time.
  uint32_t next_u32() {
    if (idx_ == 4) {
      block_ = philox4x32(seed_, stream_, counter_++);
      idx_ = 0;
    }
    return block_[idx_++];
  }
  uint64_t next_u64() { return (uint64_t(next_u32()) << 32) | next_u32(); }
  // Uniform in [0, 1) with 24 random bits.
  float uniform() { return float(next_u32() >> 8) * (1.0f / 16777216.0f); }
  double uniform_double() { return double(next_u64() >> 11) * (1.0 / 9007199254740992.0); }
  // Uniform integer in [0, n), unbiased (Lemire's method).
  uint64_t below(uint64_t n) {
    if (n <= 1) return 0;
    uint64_t threshold = (0 - n) % n;
    for (;;) {
      uint64_t x = next_u64();
      unsigned __int128 m = (unsigned __int128)x * n;
      if (uint64_t(m) >= threshold) return uint64_t(m >> 64);
    }
  }
  // Standard normal by Box-Muller.
  float normal() {
    double u1 = (double(next_u32()) + 1.0) / 4294967296.0;
    double u2 = double(next_u32()) / 4294967296.0;
    return float(std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2));
  }

  uint64_t seed() const { return seed_; }
  uint64_t stream() const { return stream_; }
  // Position for save/restore: counter blocks consumed (a partially used block is dropped).
  uint64_t counter() const { return counter_; }

 private:
  uint64_t seed_, stream_, counter_;
  std::array<uint32_t, 4> block_{};
  int idx_ = 4;
};

}  // namespace strata
