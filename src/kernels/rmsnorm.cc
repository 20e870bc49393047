#include "kernels/rmsnorm.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/dtype.h"
#include "kernels/fastmath.h"
#include "kernels/isa_target.h"  // last: what follows is compiled for the level

namespace strata::kernels::STRATA_ISA {

namespace {

inline void put(float* o, float v) { *o = v; }
inline void put(uint16_t* o, float v) { *o = f32_to_bf16(v); }

template <typename Out>
void forward_impl(Out* out, float* rstd, const float* inp, const float* weight, int64_t N, int C,
                  float eps) {
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const float* x = inp + n * C;
    const float s = 1.0f / std::sqrt(dot16(x, x, C) / float(C) + eps);
    Out* o = out + n * C;
    for (int j = 0; j < C; ++j) put(o + j, x[j] * s * weight[j]);
    rstd[n] = s;
  }
}

}  // namespace

void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, int64_t N,
                     int C, float eps) {
  forward_impl(out, rstd, inp, weight, N, C, eps);
}

void rmsnorm_forward(uint16_t* out, float* rstd, const float* inp, const float* weight, int64_t N,
                     int C, float eps) {
  forward_impl(out, rstd, inp, weight, N, C, eps);
}

void rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp,
                      const float* weight, const float* rstd, int64_t N, int C) {
  // With xhat = x * rstd and g = w * dout: dx = rstd * (g - xhat * mean(g * xhat)).
#pragma omp parallel
  {
    std::vector<float> g_buf(C), xhat_buf(C);
    float* g = g_buf.data();
    float* xhat = xhat_buf.data();
    // The two passes only read the inputs: no barrier between them.
#pragma omp for schedule(static) nowait
    for (int64_t n = 0; n < N; ++n) {
      const float* x = inp + n * C;
      const float* d = dout + n * C;
      const float s = rstd[n];
      for (int c = 0; c < C; ++c) {
        xhat[c] = x[c] * s;
        g[c] = weight[c] * d[c];
      }
      const float g_xhat_mean = dot16(g, xhat, C) / float(C);
      float* di = dinp + n * C;
      for (int c = 0; c < C; ++c) di[c] += (g[c] - xhat[c] * g_xhat_mean) * s;
    }
    // Channel ranges in parallel: dweight sums over rows in order.
    constexpr int kChunk = 32;
    const int chunks = (C + kChunk - 1) / kChunk;
#pragma omp for schedule(static)
    for (int ch = 0; ch < chunks; ++ch) {
      const int c0 = ch * kChunk, c1 = std::min(C, c0 + kChunk);
      float dw[kChunk] = {};
      for (int64_t n = 0; n < N; ++n) {
        const float* x = inp + n * C;
        const float* d = dout + n * C;
        const float s = rstd[n];
        for (int c = c0; c < c1; ++c) dw[c - c0] += x[c] * s * d[c];
      }
      for (int c = c0; c < c1; ++c) dweight[c] += dw[c - c0];
    }
  }
}

}  // namespace strata::kernels::STRATA_ISA
