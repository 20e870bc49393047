#include "kernels/crossentropy.h"

#include <cmath>

#include "kernels/fastmath.h"
#include "kernels/isa_target.h"  // last: what follows is compiled for the level

namespace strata::kernels::STRATA_ISA {

double crossentropy_forward(float* losses, float* lse, const float* logits, const int32_t* targets,
                            const float* weights, int64_t N, int V, int Vp) {
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const float w = weights ? weights[n] : 1.0f;
    if (w == 0.0f) {
      losses[n] = 0.0f;
      lse[n] = 0.0f;
      continue;
    }
    const float* x = logits + n * Vp;
    const float m = max16(x, V);
    const float l = m + std::log(sum_exp16(x, V, m));
    lse[n] = l;
    losses[n] = l - x[targets[n]];
  }
  double total = 0.0;
  for (int64_t n = 0; n < N; ++n)
    if (!weights || weights[n] != 0.0f) total += double(weights ? weights[n] : 1.0f) * losses[n];
  return total;
}

void crossentropy_backward(float* logits, const float* lse, const int32_t* targets,
                           const float* weights, float scale, int64_t N, int64_t V, int64_t Vp,
                           int64_t v0) {
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    float* x = logits + n * Vp;
    const float w = weights ? weights[n] : 1.0f;
    if (w == 0.0f) {
      for (int64_t v = 0; v < Vp; ++v) x[v] = 0.0f;
      continue;
    }
    const float s = scale * w, l = lse[n];
    for (int64_t v = 0; v < V; ++v) x[v] = s * fast_exp(x[v] - l);
    const int64_t t = targets[n] - v0;
    if (t >= 0 && t < V) x[t] -= s;
    for (int64_t v = V; v < Vp; ++v) x[v] = 0.0f;
  }
}

}  // namespace strata::kernels::STRATA_ISA
