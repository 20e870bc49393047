// Embedding, GELU, residual, bf16 conversion and the vectorisable exp.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "check.h"
#include "core/dtype.h"
#include "kernels/fastmath.h"
#include "kernels/kernels.h"

namespace strata::test {
namespace k = strata::kernels;

TEST(FastMath, ExpMatchesStdExp) {
  double worst = 0;
  for (float x = -87.0f; x < 88.0f; x += 0.0137f) {
    const double ref = std::exp(double(x));
    worst = std::max(worst, std::fabs(k::fast_exp(x) - ref) / ref);
  }
  EXPECT_LT(worst, 4e-7);
  EXPECT_EQ(k::fast_exp(-INFINITY), 0.0f);
  EXPECT_EQ(k::fast_exp(-100.0f), 0.0f);
  EXPECT_EQ(k::fast_exp(0.0f), 1.0f);
}

TEST(FastMath, TanhMatchesStdTanh) {
  double worst = 0;
  for (float x = -12.0f; x < 12.0f; x += 0.001f)
    worst = std::max(worst, std::fabs(k::fast_tanh(x) - std::tanh(double(x))));
  EXPECT_LT(worst, 3e-7);
}

TEST(Encoder, ForwardAndGradients) {
  const int B = 2, T = 5, C = 37, V = 7, maxT = 8;
  std::vector<int32_t> tok = {0, 3, 3, 6, 1, 3, 3, 0, 2, 6};
  auto wte = randn(V * C, 1), wpe = randn(maxT * C, 2), dout = randn(B * T * C, 3);
  std::vector<float> out(B * T * C);
  k::encoder_forward(out.data(), tok.data(), wte.data(), wpe.data(), B, T, C);
  for (int n = 0; n < B * T; ++n)
    for (int c = 0; c < C; ++c)
      ASSERT_EQ(out[n * C + c], wte[tok[n] * C + c] + wpe[(n % T) * C + c]);
  // Gradients (accumulated onto non-zero buffers) against finite differences of the double
  // reference loss sum(out * dout).
  std::vector<float> dwte(V * C, 0.5f), dwpe(maxT * C, 0.25f);
  k::encoder_backward(dwte.data(), dwpe.data(), dout.data(), tok.data(), B, T, C);
  const auto wte_d = to_double(wte), wpe_d = to_double(wpe), dd = to_double(dout);
  auto loss = [&](const std::vector<double>& e, const std::vector<double>& p) {
    double s = 0;
    for (int n = 0; n < B * T; ++n)
      for (int c = 0; c < C; ++c) s += (e[tok[n] * C + c] + p[(n % T) * C + c]) * dd[n * C + c];
    return s;
  };
  auto g_wte = numeric_grad([&](const std::vector<double>& e) { return loss(e, wpe_d); }, wte_d);
  auto g_wpe = numeric_grad([&](const std::vector<double>& p) { return loss(wte_d, p); }, wpe_d);
  for (auto& g : g_wte) g += 0.5;
  for (auto& g : g_wpe) g += 0.25;
  EXPECT_LT(rel_err(dwte, g_wte), 1e-6);
  EXPECT_LT(rel_err(dwpe, g_wpe), 1e-6);
}

static double gelu_ref(double x) {
  return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
}

TEST(Gelu, ForwardAndGradientMatchDouble) {
  const int n = 1000;
  auto x = randn(n, 4, 3.0f), dout = randn(n, 5);
  std::vector<float> y(n), dx(n);
  k::gelu_forward(y.data(), x.data(), n);
  std::vector<double> yref(n);
  for (int i = 0; i < n; ++i) yref[i] = gelu_ref(x[i]);
  EXPECT_LT(rel_err(y, yref), 1e-6);
  k::gelu_backward(dx.data(), x.data(), dout.data(), n);
  auto f = [&](const std::vector<double>& xs) {
    double s = 0;
    for (int i = 0; i < n; ++i) s += gelu_ref(xs[i]) * dout[i];
    return s;
  };
  EXPECT_LT(rel_err(dx, numeric_grad(f, to_double(x))), 1e-5);
  // In place (dinp aliases dout) gives the same values.
  std::vector<float> inplace = dout;
  k::gelu_backward(inplace.data(), x.data(), inplace.data(), n);
  EXPECT_EQ(0, std::memcmp(inplace.data(), dx.data(), sizeof(float) * n));
}

// bf16 storage: the forward from an fp32 input writes gelu(x) and x each rounded once; the
// backward from the bf16 x is the fp32 backward of the widened x, bit for bit.
TEST(Gelu, Bf16StoredInputAndOutput) {
  const int n = 9000;  // more than one parallel block
  auto x = randn(n, 6, 3.0f), dout = randn(n, 7);
  std::vector<float> y(n), xw(n), want(n), got(n);
  std::vector<uint16_t> y_h(n), x_h(n), y_want(n), x_want(n);
  k::gelu_forward(y.data(), x.data(), n);
  k::gelu_forward(y_h.data(), x_h.data(), x.data(), n);
  k::f32_to_bf16(y_want.data(), y.data(), n);
  k::f32_to_bf16(x_want.data(), x.data(), n);
  EXPECT_EQ(0, std::memcmp(y_h.data(), y_want.data(), 2 * n));
  EXPECT_EQ(0, std::memcmp(x_h.data(), x_want.data(), 2 * n));
  k::bf16_to_f32(xw.data(), x_h.data(), n);
  k::gelu_backward(want.data(), xw.data(), dout.data(), n);
  k::gelu_backward(got.data(), x_h.data(), dout.data(), n);
  EXPECT_EQ(0, std::memcmp(want.data(), got.data(), sizeof(float) * n));
}

TEST(Convert, Bf16RoundTripAndRounding) {
  std::vector<float> in = {
      0.0f,       -0.0f,    1.0f,      3.14159f, -2.5e-3f,
      1e30f,      INFINITY, -INFINITY, NAN,      1.00390625f /* halfway: rounds to even 1.0 */,
      1.01171875f /* halfway: rounds up to even */};
  const int64_t n = int64_t(in.size());
  std::vector<uint16_t> h(n);
  std::vector<float> back(n);
  k::f32_to_bf16(h.data(), in.data(), n);
  k::bf16_to_f32(back.data(), h.data(), n);
  for (int64_t i = 0; i < n; ++i) {
    EXPECT_EQ(h[i], f32_to_bf16(in[i])) << i;  // agrees with the scalar reference
    if (std::isnan(in[i])) {
      EXPECT_TRUE(std::isnan(back[i]));
    } else if (std::isfinite(in[i]) && in[i] != 0.0f) {
      EXPECT_LE(std::fabs(back[i] - in[i]) / std::fabs(in[i]), 1.0 / 256) << i;
    } else {
      EXPECT_EQ(back[i], in[i]);
    }
  }
  EXPECT_EQ(back[9], 1.0f);
  EXPECT_EQ(back[10], 1.015625f);
}

}  // namespace strata::test
