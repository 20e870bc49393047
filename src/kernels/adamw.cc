#include "kernels/adamw.h"

#include <algorithm>
#include <cmath>
#include <vector>
#include "kernels/isa_target.h"  // last: what follows is compiled for the level

namespace strata::kernels::STRATA_ISA {

void adamw_update(float* param, const float* grad, float* m, float* v, int64_t n, bool decay,
                  const AdamWStep& s) {
  const float bc1 = 1.0f - std::pow(s.beta1, float(s.t));
  const float bc2 = 1.0f - std::pow(s.beta2, float(s.t));
  const float step_size = s.lr / bc1;
  const float bc2_sqrt = std::sqrt(bc2);
  const float keep = decay ? 1.0f - s.lr * s.weight_decay : 1.0f;
  const float b1 = s.beta1, b2 = s.beta2, gs = s.grad_scale, eps = s.eps;
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const float g = grad[i] * gs;
    const float mi = b1 * m[i] + (1.0f - b1) * g;
    const float vi = b2 * v[i] + (1.0f - b2) * g * g;
    m[i] = mi;
    v[i] = vi;
    const float denom = std::sqrt(vi) / bc2_sqrt + eps;
    param[i] = param[i] * keep - step_size * (mi / denom);
  }
}

double sum_squares(const float* x, int64_t n) {
  const int64_t blocks = (n + kSumBlock - 1) / kSumBlock;
  std::vector<double> partial(blocks);
#pragma omp parallel for schedule(static)
  for (int64_t blk = 0; blk < blocks; ++blk) {
    const int64_t i0 = blk * kSumBlock, i1 = std::min(n, i0 + kSumBlock);
    double acc[8] = {};
    int64_t i = i0;
    for (; i + 8 <= i1; i += 8)
      for (int k = 0; k < 8; ++k) acc[k] += double(x[i + k]) * double(x[i + k]);
    for (int k = 0; i < i1; ++i, ++k) acc[k] += double(x[i]) * double(x[i]);
    partial[blk] =
        ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
  }
  double total = 0.0;
  for (double p : partial) total += p;
  return total;
}

float clip_scale(double total_sum_squares, float max_norm) {
  if (max_norm <= 0.0f) return 1.0f;
  const double norm = std::sqrt(total_sum_squares);
  const double c = double(max_norm) / (norm + 1e-6);
  return c < 1.0 ? float(c) : 1.0f;
}

void scale_inplace(float* x, int64_t n, float s) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) x[i] *= s;
}

}  // namespace strata::kernels::STRATA_ISA
