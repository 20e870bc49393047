#include "kernels/encoder.h"

#include <algorithm>
#include "kernels/isa_target.h"  // last: what follows is compiled for the level

namespace strata::kernels::STRATA_ISA {

void encoder_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe, int B,
                     int T, int C, const int32_t* pos) {
  const int64_t N = int64_t(B) * T;
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const float* e = wte + int64_t(tokens[n]) * C;
    float* o = out + n * C;
    if (!wpe) {  // no learned positions (rotary models)
      for (int c = 0; c < C; ++c) o[c] = e[c];
      continue;
    }
    const float* p = wpe + int64_t(pos ? pos[n] : n % T) * C;
    for (int c = 0; c < C; ++c) o[c] = e[c] + p[c];
  }
}

void encoder_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens, int B,
                      int T, int C, const int32_t* pos) {
  constexpr int kChunk = 32;  // channels per task: two cache lines
  const int chunks = (C + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static)
  for (int ch = 0; ch < chunks; ++ch) {
    const int c0 = ch * kChunk, c1 = std::min(C, c0 + kChunk);
    for (int b = 0; b < B; ++b) {
      for (int t = 0; t < T; ++t) {
        const int64_t n = int64_t(b) * T + t;
        const float* d = dout + n * C;
        float* e = dwte + int64_t(tokens[n]) * C;
        for (int c = c0; c < c1; ++c) e[c] += d[c];
        if (!dwpe) continue;
        float* p = dwpe + int64_t(pos ? pos[n] : t) * C;
        for (int c = c0; c < c1; ++c) p[c] += d[c];
      }
    }
  }
}

}  // namespace strata::kernels::STRATA_ISA
