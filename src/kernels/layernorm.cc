#include "kernels/layernorm.h"

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
void forward_impl(Out* out, float* mean, float* rstd, const float* inp, const float* weight,
                  const float* bias, int64_t N, int C) {
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const float* x = inp + n * C;
    const float m = sum16(x, C) / float(C);
    float acc[16] = {};
    int c = 0;
    for (; c + 16 <= C; c += 16)
      for (int k = 0; k < 16; ++k) acc[k] += (x[c + k] - m) * (x[c + k] - m);
    for (int k = 0; c < C; ++c, ++k) acc[k] += (x[c] - m) * (x[c] - m);
    const float var = sum16(acc, 16) / float(C);
    const float s = 1.0f / std::sqrt(var + 1e-5f);
    Out* o = out + n * C;
    for (int j = 0; j < C; ++j) put(o + j, (x[j] - m) * s * weight[j] + bias[j]);
    mean[n] = m;
    rstd[n] = s;
  }
}

}  // namespace

void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                       const float* bias, int64_t N, int C) {
  forward_impl(out, mean, rstd, inp, weight, bias, N, C);
}

void layernorm_forward(uint16_t* out, float* mean, float* rstd, const float* inp,
                       const float* weight, const float* bias, int64_t N, int C) {
  forward_impl(out, mean, rstd, inp, weight, bias, N, C);
}

void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                        const float* inp, const float* weight, const float* mean, const float* rstd,
                        int64_t N, int C) {
  // Pass 1, rows in parallel: the input gradient needs two reductions along the row,
  // mean(w * dout) and mean(w * dout * xhat). Materialising both rows first lets each loop
  // vectorise on its own (measured ~2x faster than one fused loop).
#pragma omp parallel
  {
    std::vector<float> dnorm_buf(C), xhat_buf(C);
    float* dnorm = dnorm_buf.data();
    float* xhat = xhat_buf.data();
    // Passes 1 and 2 are independent (both only read the inputs): no barrier between them.
#pragma omp for schedule(static) nowait
    for (int64_t n = 0; n < N; ++n) {
      const float* x = inp + n * C;
      const float* d = dout + n * C;
      const float m = mean[n], s = rstd[n];
      for (int c = 0; c < C; ++c) {
        xhat[c] = (x[c] - m) * s;
        dnorm[c] = weight[c] * d[c];
      }
      const float dnorm_mean = sum16(dnorm, C) / float(C);
      const float dnorm_xhat_mean = dot16(dnorm, xhat, C) / float(C);
      float* di = dinp + n * C;
      for (int c = 0; c < C; ++c) di[c] += (dnorm[c] - dnorm_mean - xhat[c] * dnorm_xhat_mean) * s;
    }
    // Pass 2, channel ranges in parallel: dweight and dbias sum over rows in order.
    constexpr int kChunk = 32;
    const int chunks = (C + kChunk - 1) / kChunk;
#pragma omp for schedule(static)
    for (int ch = 0; ch < chunks; ++ch) {
      const int c0 = ch * kChunk, c1 = std::min(C, c0 + kChunk);
      float dw[kChunk] = {}, db[kChunk] = {};
      for (int64_t n = 0; n < N; ++n) {
        const float* x = inp + n * C;
        const float* d = dout + n * C;
        const float m = mean[n], s = rstd[n];
        for (int c = c0; c < c1; ++c) {
          dw[c - c0] += (x[c] - m) * s * d[c];
          db[c - c0] += d[c];
        }
      }
      for (int c = c0; c < c1; ++c) {
        dweight[c] += dw[c - c0];
        dbias[c] += db[c - c0];
      }
    }
  }
}

}  // namespace strata::kernels::STRATA_ISA
