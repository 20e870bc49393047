#include "kernels/muon.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/gemm.h"

namespace strata::kernels {

void muon_momentum(const float* grad, float* m, float* u, int64_t n, const MuonStep& s) {
  const float mu = s.momentum, gs = s.grad_scale;
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const float g = grad[i] * gs;
    const float mi = mu * m[i] + g;
    m[i] = mi;
    u[i] = s.nesterov ? g + mu * mi : mi;
  }
}

// Wide orientation: r <= c.
static void ns5_wide(float* x, int r, int c, int steps, float* a, float* b, float* y) {
  const double norm = std::sqrt([&] {
    double sum = 0;
    for (int64_t i = 0; i < int64_t(r) * c; ++i) sum += double(x[i]) * double(x[i]);
    return sum;
  }());
  const float inv = float(1.0 / (norm + 1e-7));
  for (int64_t i = 0; i < int64_t(r) * c; ++i) x[i] *= inv;
  const int64_t rr = int64_t(r) * r, rc = int64_t(r) * c;
  for (int k = 0; k < steps; ++k) {
    gemm(Op::N, Op::T, r, r, c, 1.0f, x, c, x, c, 0.0f, a, r);            // A = X Xᵀ
    std::memcpy(b, a, sizeof(float) * size_t(rr));
    gemm(Op::N, Op::N, r, r, r, float(kNs5C), a, r, a, r, float(kNs5B), b, r);  // B = b A + c A A
    std::memcpy(y, x, sizeof(float) * size_t(rc));
    gemm(Op::N, Op::N, r, c, r, 1.0f, b, r, x, c, float(kNs5A), y, c);     // X' = a X + B X
    std::memcpy(x, y, sizeof(float) * size_t(rc));
  }
}

int64_t ns5_scratch_elems(int rows, int cols) {
  const int64_t r = std::min(rows, cols), c = std::max(rows, cols);
  return 2 * r * r + 2 * r * c;
}

void orthogonalise_ns5(float* x, int rows, int cols, int steps, float* scratch) {
  const int r = std::min(rows, cols), c = std::max(rows, cols);
  float* a = scratch;
  float* b = a + size_t(r) * r;
  float* y = b + size_t(r) * r;
  float* t = y + size_t(r) * c;
  if (rows <= cols) {
    ns5_wide(x, r, c, steps, a, b, y);
    return;
  }
  for (int i = 0; i < rows; ++i)  // t = xᵀ (cols x rows)
    for (int j = 0; j < cols; ++j) t[size_t(j) * rows + i] = x[size_t(i) * cols + j];
  ns5_wide(t, r, c, steps, a, b, y);
  for (int i = 0; i < rows; ++i)
    for (int j = 0; j < cols; ++j) x[size_t(i) * cols + j] = t[size_t(j) * rows + i];
}

void muon_apply(float* p, const float* o, int64_t n, int rows, int cols, bool decay, const MuonStep& s) {
  const float keep = decay ? 1.0f - s.lr * s.weight_decay : 1.0f;
  const float step = s.lr * s.lr_scale * float(std::sqrt(double(std::max(rows, cols))));
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) p[i] = p[i] * keep - step * o[i];
}

}  // namespace strata::kernels
