// LayerNorm and matmul against double references and finite differences.
#include <gtest/gtest.h>

#include <cmath>

#include "check.h"
#include "kernels/kernels.h"

namespace strata::test {
namespace k = strata::kernels;

static std::vector<double> layernorm_ref(const std::vector<double>& x, const std::vector<double>& w,
                                         const std::vector<double>& b, int N, int C) {
  std::vector<double> out(N * C);
  for (int n = 0; n < N; ++n) {
    double m = 0, v = 0;
    for (int c = 0; c < C; ++c) m += x[n * C + c];
    m /= C;
    for (int c = 0; c < C; ++c) v += (x[n * C + c] - m) * (x[n * C + c] - m);
    const double s = 1 / std::sqrt(v / C + 1e-5);
    for (int c = 0; c < C; ++c) out[n * C + c] = (x[n * C + c] - m) * s * w[c] + b[c];
  }
  return out;
}

TEST(LayerNorm, ForwardAndGradients) {
  const int N = 7, C = 45;
  auto x = randn(N * C, 10, 2.0f), w = randn(C, 11), b = randn(C, 12), dout = randn(N * C, 13);
  for (int i = 0; i < N * C; ++i) x[i] += 0.5f;  // a non-zero mean
  std::vector<float> out(N * C), mean(N), rstd(N);
  k::layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C);
  const auto xd = to_double(x), wd = to_double(w), bd = to_double(b), dd = to_double(dout);
  EXPECT_LT(rel_err(out, layernorm_ref(xd, wd, bd, N, C)), 1e-6);

  std::vector<float> dx(N * C, 0.0f), dw(C, 0.0f), db(C, 0.0f);
  k::layernorm_backward(dx.data(), dw.data(), db.data(), dout.data(), x.data(), w.data(),
                        mean.data(), rstd.data(), N, C);
  auto gx = numeric_grad(
      [&](const std::vector<double>& v) { return dot(layernorm_ref(v, wd, bd, N, C), dd); }, xd);
  auto gw = numeric_grad(
      [&](const std::vector<double>& v) { return dot(layernorm_ref(xd, v, bd, N, C), dd); }, wd);
  auto gb = numeric_grad(
      [&](const std::vector<double>& v) { return dot(layernorm_ref(xd, wd, v, N, C), dd); }, bd);
  EXPECT_LT(rel_err(dx, gx), 1e-4);
  EXPECT_LT(rel_err(dw, gw), 1e-4);
  EXPECT_LT(rel_err(db, gb), 1e-4);

  // Gradients accumulate: a second backward doubles them.
  k::layernorm_backward(dx.data(), dw.data(), db.data(), dout.data(), x.data(), w.data(),
                        mean.data(), rstd.data(), N, C);
  for (auto& g : gx) g *= 2;
  for (auto& g : gw) g *= 2;
  EXPECT_LT(rel_err(dx, gx), 1e-4);
  EXPECT_LT(rel_err(dw, gw), 1e-4);
}

static std::vector<double> matmul_ref(const std::vector<double>& x, const std::vector<double>& w,
                                      const std::vector<double>& b, int N, int C, int OC) {
  std::vector<double> out(N * OC);
  for (int n = 0; n < N; ++n)
    for (int o = 0; o < OC; ++o) {
      double s = b.empty() ? 0 : b[o];
      for (int c = 0; c < C; ++c) s += x[n * C + c] * w[o * C + c];
      out[n * OC + o] = s;
    }
  return out;
}

TEST(Matmul, ForwardAndGradients) {
  const int N = 9, C = 13, OC = 70;
  auto x = randn(N * C, 20), w = randn(OC * C, 21), b = randn(OC, 22), dout = randn(N * OC, 23);
  const auto xd = to_double(x), wd = to_double(w), bd = to_double(b), dd = to_double(dout);
  std::vector<float> out(N * OC);
  k::matmul_forward(out.data(), x.data(), w.data(), b.data(), N, C, OC);
  EXPECT_LT(rel_err(out, matmul_ref(xd, wd, bd, N, C, OC)), 1e-6);

  // accumulate = true adds onto what out holds (the fused residual).
  auto resid = randn(N * OC, 24);
  std::vector<float> acc = resid;
  k::matmul_forward(acc.data(), x.data(), w.data(), b.data(), N, C, OC, true);
  auto ref = matmul_ref(xd, wd, bd, N, C, OC);
  for (int i = 0; i < N * OC; ++i) ref[i] += resid[i];
  EXPECT_LT(rel_err(acc, ref), 1e-6);

  std::vector<float> dx(N * C, 0.0f), dw(OC * C, 0.0f), db(OC, 0.0f);
  k::matmul_backward(dx.data(), dw.data(), db.data(), dout.data(), x.data(), w.data(), N, C, OC);
  auto f_x = [&](const std::vector<double>& v) { return dot(matmul_ref(v, wd, bd, N, C, OC), dd); };
  auto f_w = [&](const std::vector<double>& v) { return dot(matmul_ref(xd, v, bd, N, C, OC), dd); };
  auto f_b = [&](const std::vector<double>& v) { return dot(matmul_ref(xd, wd, v, N, C, OC), dd); };
  EXPECT_LT(rel_err(dx, numeric_grad(f_x, xd)), 1e-5);
  EXPECT_LT(rel_err(dw, numeric_grad(f_w, wd)), 1e-5);
  EXPECT_LT(rel_err(db, numeric_grad(f_b, bd)), 1e-5);

  // accumulate_dinp = false overwrites dinp (stale contents ignored); dweight still adds.
  std::vector<float> dx2(N * C, 1e6f), dw2 = dw;
  k::matmul_backward(dx2.data(), dw2.data(), nullptr, dout.data(), x.data(), w.data(), N, C, OC,
                     false);
  EXPECT_LT(rel_err(dx2, dx), 1e-6);
  std::vector<float> twice(dw.size());
  for (size_t i = 0; i < dw.size(); ++i) twice[i] = 2 * dw[i];
  EXPECT_LT(rel_err(dw2, twice), 1e-6);
}

TEST(Matmul, NoBiasAndEmptyBatch) {
  const int N = 4, C = 8, OC = 3;
  auto x = randn(N * C, 30), w = randn(OC * C, 31);
  std::vector<float> out(N * OC, 123.0f);
  k::matmul_forward(out.data(), x.data(), w.data(), nullptr, N, C, OC);
  EXPECT_LT(rel_err(out, matmul_ref(to_double(x), to_double(w), {}, N, C, OC)), 1e-6);
  std::vector<float> untouched(OC * C, 7.0f);
  k::matmul_forward(out.data(), x.data(), w.data(), nullptr, 0, C, OC);
  k::matmul_backward(nullptr, untouched.data(), nullptr, out.data(), x.data(), w.data(), 0, C, OC);
  for (float v : untouched) EXPECT_EQ(v, 7.0f);
}

}  // namespace strata::test
