#include "model/tensor/vocab.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/crossentropy.h"
#include "kernels/fastmath.h"

namespace strata::model::tensor {

namespace k = strata::kernels;

void embedding_forward(TensorComm& tc, float* out, const int32_t* tokens, const float* wte,
                       int64_t v0, int64_t Vr, const float* wpe, float* partial, int B, int T,
                       int C, const int32_t* pos) {
  const int64_t N = int64_t(B) * T;
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const int64_t v = tokens[n] - v0;
    float* o = partial + n * C;
    if (v >= 0 && v < Vr)
      std::memcpy(o, wte + v * C, sizeof(float) * C);
    else
      std::memset(o, 0, sizeof(float) * C);
  }
  tc.reduce_rows(partial, out, N, C);  // g forward
  const int64_t n0 = tc.row_offset(N), n = tc.local_rows(N);
  if (!wpe) return;  // no learned positions (rotary models)
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const float* p = wpe + (pos ? pos[n0 + i] : (n0 + i) % T) * C;
    float* o = out + i * C;
    for (int c = 0; c < C; ++c) o[c] += p[c];
  }
}

void embedding_backward(TensorComm& tc, float* dwte, float* dwpe, const float* dout,
                        const int32_t* tokens, int64_t v0, int64_t Vr, float* full, int B, int T,
                        int C, const int32_t* pos) {
  const int64_t N = int64_t(B) * T, n0 = tc.row_offset(N), n = tc.local_rows(N);
  const float* df = tc.gather_rows(dout, full, N, C);  // g backward
  // Channel ranges in parallel, rows in order: deterministic for any thread count.
  constexpr int kChunk = 32;
  const int chunks = (C + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static)
  for (int ch = 0; ch < chunks; ++ch) {
    const int c0 = ch * kChunk, c1 = std::min(C, c0 + kChunk);
    for (int64_t i = 0; dwpe && i < n; ++i) {
      const float* d = dout + i * C;
      float* p = dwpe + (pos ? pos[n0 + i] : (n0 + i) % T) * C;
      for (int c = c0; c < c1; ++c) p[c] += d[c];
    }
    for (int64_t r = 0; r < N; ++r) {
      const int64_t v = tokens[r] - v0;
      if (v < 0 || v >= Vr) continue;
      const float* d = df + r * C;
      float* e = dwte + v * C;
      for (int c = c0; c < c1; ++c) e[c] += d[c];
    }
  }
}

double crossentropy_forward(TensorComm& tc, float* losses, float* lse, const float* logits,
                            const int32_t* targets, const float* weights, float* stats, int64_t N,
                            int64_t v0, int64_t Vr, int V) {
  const int64_t real = std::clamp<int64_t>(V - v0, 0, Vr);  // local columns below V
  float* mx = lse;  // the row max lives in lse until the log-sum-exp replaces it
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) mx[n] = k::max16(logits + n * Vr, real);
  tc.all_reduce_max(mx, N);
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const float* x = logits + n * Vr;
    stats[2 * n] = real > 0 ? k::sum_exp16(x, real, mx[n]) : 0.0f;
    const int64_t t = targets[n] - v0;
    stats[2 * n + 1] = t >= 0 && t < real ? x[t] : 0.0f;
  }
  tc.all_reduce_sum(stats, 2 * N);
  double total = 0.0;
  for (int64_t n = 0; n < N; ++n) {
    const float w = weights ? weights[n] : 1.0f;
    if (w == 0.0f) {
      losses[n] = 0.0f;
      lse[n] = 0.0f;
      continue;
    }
    lse[n] = mx[n] + std::log(stats[2 * n]);
    losses[n] = lse[n] - stats[2 * n + 1];
    total += double(w) * losses[n];
  }
  return total;
}

void crossentropy_backward(float* logits, const float* lse, const int32_t* targets,
                           const float* weights, float scale, int64_t N, int64_t v0, int64_t Vr,
                           int V) {
  k::crossentropy_backward(logits, lse, targets, weights, scale, N,
                           std::clamp<int64_t>(V - v0, 0, Vr), Vr, v0);
}

}  // namespace strata::model::tensor
