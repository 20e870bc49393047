#include "kernels/crossentropy.h"

#include <cmath>

#include "kernels/fastmath.h"
#include "kernels/isa_target.h"  // last: what follows is compiled for the level

namespace strata::kernels::STRATA_ISA {

namespace {

// One row's log normaliser of x·s over n columns (s = 1/τ): m + log Σ e^{x·s - m}, m the max of
// x·s (max(x)·s: rounding keeps the order). With `entropy` also the row's entropy,
// log Σ e^{x·s - m} - Σ e^{x·s - m}(x·s - m) / Σ e^{x·s - m}, from the same 16 lanes. At s = 1
// without the entropy: sum_exp16's sum, exactly as the cross-entropy has always summed.
float row_lse(const float* x, int64_t n, float s, float* entropy = nullptr) {
  const float m = max16(x, n) * s;
  if (s == 1.0f && !entropy) return m + std::log(sum_exp16(x, n, m));
  float acc[16] = {}, mom[16] = {};
  int64_t i = 0;
  auto add = [&](int k, float v) {
    const float y = v * s - m, e = fast_exp(y);
    acc[k] += e;
    mom[k] += e * y;
  };
  for (; i + 16 <= n; i += 16)
    for (int k = 0; k < 16; ++k) add(k, x[i + k]);
  for (int k = 0; i < n; ++i, ++k) add(k, x[i]);
  for (int w = 8; w >= 1; w /= 2)
    for (int k = 0; k < w; ++k) acc[k] += acc[k + w], mom[k] += mom[k + w];
  const float log_sum = std::log(acc[0]);
  if (entropy) *entropy = log_sum - mom[0] / acc[0];
  return m + log_sum;
}

}  // namespace

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
    const float l = row_lse(x, V, 1.0f);
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

void log_softmax_forward(float* lse, float* logp, float* entropy, const float* logits,
                         const int32_t* actions, int64_t N, int V, int64_t Vp, float tau) {
  const float s = 1.0f / tau;
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const float* x = logits + n * Vp;
    const float l = row_lse(x, V, s, entropy ? entropy + n : nullptr);
    lse[n] = l;
    logp[n] = x[actions[n]] * s - l;
  }
}

void log_softmax_backward(float* dlogits, const float* logits, const float* lse,
                          const float* entropy, const int32_t* actions, const float* g, float c,
                          int64_t N, int V, int64_t Vp, float tau) {
  const float s = 1.0f / tau;
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const float* x = logits + n * Vp;
    float* d = dlogits + n * Vp;
    const float l = lse[n], h = entropy ? entropy[n] : 0.0f, gn = g[n];
    for (int64_t v = 0; v < V; ++v) {
      const float lp = x[v] * s - l, p = fast_exp(lp);
      d[v] = (c != 0.0f ? c * p * (lp + h) - gn * p : -gn * p) * s;
    }
    d[actions[n]] += gn * s;
    for (int64_t v = V; v < Vp; ++v) d[v] = 0.0f;
  }
}

}  // namespace strata::kernels::STRATA_ISA
