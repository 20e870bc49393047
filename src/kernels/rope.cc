#include "kernels/rope.h"

#include <cmath>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "kernels/isa_target.h"  // last: what follows is compiled for the level

namespace strata::kernels::STRATA_ISA {

namespace {

inline float get(const float* p) { return *p; }
inline float get(const uint16_t* p) { return bf16_to_f32(*p); }
inline void put(float* o, float v) { *o = v; }
inline void put(uint16_t* o, float v) { *o = f32_to_bf16(v); }

// direction +1: rotate by +angle (forward); -1: by -angle (backward).
template <typename E>
void rotate(E* qkv, const int32_t* pos, AttentionShape s, const Rope& rope, float direction) {
  STRATA_CHECK(s.hs > 0 && s.hs % 2 == 0, "rope: head size ", s.hs, " is not even");
  const int half = s.hs / 2;
  const std::vector<double> inv_freq = rope_inv_freq(rope, s.hs);
  const int64_t rows = int64_t(s.B) * s.T, ld = s.row();
  const int heads = s.NH + s.NKV;  // q heads then k heads, contiguous in the row
#pragma omp parallel
  {
    std::vector<float> cs(half), sn(half);
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      for (int i = 0; i < half; ++i) {
        const double angle = double(pos[r]) * inv_freq[i];
        cs[i] = float(std::cos(angle));
        sn[i] = direction * float(std::sin(angle));
      }
      E* row = qkv + r * ld;
      for (int h = 0; h < heads; ++h) {
        E* x = row + int64_t(h) * s.hs;
        for (int i = 0; i < half; ++i) {
          const float a = get(x + i), b = get(x + i + half);
          put(x + i, a * cs[i] - b * sn[i]);
          put(x + i + half, b * cs[i] + a * sn[i]);
        }
      }
    }
  }
}

}  // namespace

std::vector<double> rope_inv_freq(const Rope& r, int hs) {
  STRATA_CHECK(r.theta > 0, "rope: theta ", r.theta, " is not positive");
  std::vector<double> f(size_t(hs / 2));
  for (int i = 0; i < hs / 2; ++i) f[size_t(i)] = std::pow(double(r.theta), -2.0 * i / hs);
  if (!r.scaled()) return f;
  STRATA_CHECK(r.factor >= 1 && r.original > 0 && r.low_freq_factor > 0 &&
                   r.high_freq_factor > r.low_freq_factor,
               "rope scaling: factor ", r.factor, " (>= 1), low_freq_factor ", r.low_freq_factor,
               " (> 0), high_freq_factor ", r.high_freq_factor, " (> low), original ", r.original,
               " (> 0)");
  const double pi = 3.14159265358979323846, orig = r.original;
  const double low = r.low_freq_factor, high = r.high_freq_factor, factor = r.factor;
  for (double& x : f) {
    const double wavelength = 2 * pi / x;
    if (wavelength < orig / high) continue;
    if (wavelength > orig / low) {
      x /= factor;
      continue;
    }
    const double a = (orig / wavelength - low) / (high - low);
    x = (1 - a) * x / factor + a * x;
  }
  return f;
}

void rope_forward(float* qkv, const int32_t* pos, AttentionShape s, const Rope& r) {
  rotate(qkv, pos, s, r, 1.0f);
}
void rope_forward(uint16_t* qkv, const int32_t* pos, AttentionShape s, const Rope& r) {
  rotate(qkv, pos, s, r, 1.0f);
}
void rope_backward(float* dqkv, const int32_t* pos, AttentionShape s, const Rope& r) {
  rotate(dqkv, pos, s, r, -1.0f);
}

}  // namespace strata::kernels::STRATA_ISA
