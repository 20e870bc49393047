#include "kernels/rope.h"

#include <cmath>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"

namespace strata::kernels {

namespace {

inline float get(const float* p) { return *p; }
inline float get(const uint16_t* p) { return bf16_to_f32(*p); }
inline void put(float* o, float v) { *o = v; }
inline void put(uint16_t* o, float v) { *o = f32_to_bf16(v); }

// direction +1: rotate by +angle (forward); -1: by -angle (backward).
template <typename E>
void rotate(E* qkv, const int32_t* pos, AttentionShape s, float theta, float direction) {
  STRATA_CHECK(s.hs > 0 && s.hs % 2 == 0, "rope: head size ", s.hs, " is not even");
  STRATA_CHECK(theta > 0, "rope: theta ", theta, " is not positive");
  const int half = s.hs / 2;
  std::vector<double> inv_freq(half);
  for (int i = 0; i < half; ++i) inv_freq[i] = std::pow(double(theta), -2.0 * i / s.hs);
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

void rope_forward(float* qkv, const int32_t* pos, AttentionShape s, float theta) {
  rotate(qkv, pos, s, theta, 1.0f);
}
void rope_forward(uint16_t* qkv, const int32_t* pos, AttentionShape s, float theta) {
  rotate(qkv, pos, s, theta, 1.0f);
}
void rope_backward(float* dqkv, const int32_t* pos, AttentionShape s, float theta) {
  rotate(dqkv, pos, s, theta, -1.0f);
}

}  // namespace strata::kernels
