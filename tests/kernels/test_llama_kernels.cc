// Llama's kernels against double-precision references: RMSNorm, RoPE, SwiGLU, and
// grouped-query attention in the flash kernel and the ring block kernel.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "check.h"
#include "kernels/attention_block.h"
#include "kernels/kernels.h"

namespace strata::test {
namespace k = strata::kernels;

// ---- RMSNorm ----

static std::vector<double> rmsnorm_ref(const std::vector<double>& x, const std::vector<double>& w,
                                       int N, int C, double eps) {
  std::vector<double> out(x.size());
  for (int n = 0; n < N; ++n) {
    double ss = 0;
    for (int c = 0; c < C; ++c) ss += x[n * C + c] * x[n * C + c];
    const double s = 1 / std::sqrt(ss / C + eps);
    for (int c = 0; c < C; ++c) out[n * C + c] = x[n * C + c] * s * w[c];
  }
  return out;
}

TEST(RmsNorm, ForwardAndGradients) {
  const int N = 7, C = 37;  // C not a multiple of 16 or of the 32-channel chunk
  const float eps = 1e-6f;
  auto x = randn(N * C, 60), w = randn(C, 61), dout = randn(N * C, 62);
  const auto xd = to_double(x), wd = to_double(w), dd = to_double(dout);
  std::vector<float> out(N * C), rstd(N);
  k::rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), N, C, eps);
  EXPECT_LT(rel_err(out, rmsnorm_ref(xd, wd, N, C, eps)), 1e-6);

  std::vector<float> dx(N * C, 0.5f), dw(C, 0.25f);  // accumulated onto what is there
  k::rmsnorm_backward(dx.data(), dw.data(), dout.data(), x.data(), w.data(), rstd.data(), N, C);
  auto gx = numeric_grad(
      [&](const std::vector<double>& v) { return dot(rmsnorm_ref(v, wd, N, C, eps), dd); }, xd);
  auto gw = numeric_grad(
      [&](const std::vector<double>& v) { return dot(rmsnorm_ref(xd, v, N, C, eps), dd); }, wd);
  for (auto& g : gx) g += 0.5;
  for (auto& g : gw) g += 0.25;
  EXPECT_LT(rel_err(dx, gx), 1e-5);
  EXPECT_LT(rel_err(dw, gw), 1e-5);

  // eps is a parameter: a larger one changes the result as the reference says.
  k::rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), N, C, 0.5f);
  EXPECT_LT(rel_err(out, rmsnorm_ref(xd, wd, N, C, 0.5)), 1e-6);
}

TEST(RmsNorm, Bf16OutputAndThreadCounts) {
  const int N = 300, C = 96;
  auto x = randn(N * C, 63), w = randn(C, 64), dout = randn(N * C, 65);
  std::vector<float> out(N * C), rstd(N), rstd_h(N);
  std::vector<uint16_t> out_h(N * C), want(N * C);
  k::rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), N, C, 1e-5f);
  k::rmsnorm_forward(out_h.data(), rstd_h.data(), x.data(), w.data(), N, C, 1e-5f);
  k::f32_to_bf16(want.data(), out.data(), N * C);
  EXPECT_EQ(0, std::memcmp(want.data(), out_h.data(), want.size() * 2));  // rounded once
  EXPECT_EQ(0, std::memcmp(rstd.data(), rstd_h.data(), rstd.size() * 4));
  auto runs = for_thread_counts([&] {
    std::vector<float> o(N * C), r(N), dx(N * C), dw(C);
    k::rmsnorm_forward(o.data(), r.data(), x.data(), w.data(), N, C, 1e-5f);
    k::rmsnorm_backward(dx.data(), dw.data(), dout.data(), x.data(), w.data(), r.data(), N, C);
    o.insert(o.end(), dx.begin(), dx.end());
    o.insert(o.end(), dw.begin(), dw.end());
    return o;
  });
  for (size_t i = 1; i < runs.size(); ++i)
    EXPECT_EQ(0, std::memcmp(runs[0].data(), runs[i].data(), runs[0].size() * 4));
}

// ---- SwiGLU ----

static std::vector<double> swiglu_ref(const std::vector<double>& gu, int64_t n) {
  std::vector<double> out(n);
  for (int64_t i = 0; i < n; ++i) out[i] = gu[i] / (1 + std::exp(-gu[i])) * gu[n + i];
  return out;
}

TEST(SwiGlu, ForwardAndGradients) {
  const int64_t n = 53;
  auto gate = randn(n, 66, 3.0f), up = randn(n, 67), dout = randn(n, 68);
  std::vector<float> gu(gate);
  gu.insert(gu.end(), up.begin(), up.end());
  const auto gud = to_double(gu), dd = to_double(dout);
  std::vector<float> out(n), dgate(n), dup(n);
  k::swiglu_forward(out.data(), gate.data(), up.data(), n);
  EXPECT_LT(rel_err(out, swiglu_ref(gud, n)), 1e-6);
  k::swiglu_backward(dgate.data(), dup.data(), gate.data(), up.data(), dout.data(), n);
  auto g =
      numeric_grad([&](const std::vector<double>& v) { return dot(swiglu_ref(v, n), dd); }, gud);
  std::vector<float> got(dgate);
  got.insert(got.end(), dup.begin(), dup.end());
  EXPECT_LT(rel_err(got, g), 1e-5);
  // dgate may alias dout.
  std::vector<float> alias(dout);
  k::swiglu_backward(alias.data(), dup.data(), gate.data(), up.data(), alias.data(), n);
  EXPECT_EQ(0, std::memcmp(alias.data(), dgate.data(), n * 4));
}

TEST(SwiGlu, Bf16StorageWithinBf16OfFp32) {
  const int64_t n = 10000;  // crosses the 4096-element blocks
  auto gate = randn(n, 69, 2.0f), up = randn(n, 70), dout = randn(n, 71);
  std::vector<float> out(n), dgate(n), dup(n), dgate_h(n), dup_h(n);
  std::vector<uint16_t> out_h(n), out_h2(n), gate_h(n), up_h(n), want(n);
  k::swiglu_forward(out.data(), gate.data(), up.data(), n);
  k::swiglu_forward(out_h.data(), gate.data(), up.data(), n);
  k::swiglu_forward(out_h2.data(), gate_h.data(), up_h.data(), gate.data(), up.data(), n);
  k::f32_to_bf16(want.data(), out.data(), n);
  EXPECT_EQ(0, std::memcmp(want.data(), out_h.data(), n * 2));
  EXPECT_EQ(0, std::memcmp(want.data(), out_h2.data(), n * 2));
  k::f32_to_bf16(want.data(), gate.data(), n);
  EXPECT_EQ(0, std::memcmp(want.data(), gate_h.data(), n * 2));
  k::f32_to_bf16(want.data(), up.data(), n);
  EXPECT_EQ(0, std::memcmp(want.data(), up_h.data(), n * 2));
  k::swiglu_backward(dgate.data(), dup.data(), gate.data(), up.data(), dout.data(), n);
  k::swiglu_backward(dgate_h.data(), dup_h.data(), gate_h.data(), up_h.data(), dout.data(), n);
  EXPECT_LT(rel_err(dgate_h, to_double(dgate)), 2e-2);
  EXPECT_LT(rel_err(dup_h, to_double(dup)), 2e-2);
  auto runs = for_thread_counts([&] {
    std::vector<float> o(n), a(n), b(n);
    k::swiglu_forward(o.data(), gate.data(), up.data(), n);
    k::swiglu_backward(a.data(), b.data(), gate.data(), up.data(), dout.data(), n);
    o.insert(o.end(), a.begin(), a.end());
    o.insert(o.end(), b.begin(), b.end());
    return o;
  });
  for (size_t i = 1; i < runs.size(); ++i)
    EXPECT_EQ(0, std::memcmp(runs[0].data(), runs[i].data(), runs[0].size() * 4));
}

// ---- RoPE ----

// Rotates q and k heads of qkv (B,T,(NH+2NKV)hs) by pos * theta^(-2i/hs), rotate_half pairs.
static std::vector<double> rope_ref(std::vector<double> qkv, const std::vector<int32_t>& pos,
                                    k::AttentionShape s, double theta) {
  const int half = s.hs / 2;
  for (int64_t r = 0; r < int64_t(s.B) * s.T; ++r)
    for (int h = 0; h < s.NH + s.NKV; ++h) {
      double* x = &qkv[r * s.row() + h * s.hs];
      for (int i = 0; i < half; ++i) {
        const double a = pos[r] * std::pow(theta, -2.0 * i / s.hs);
        const double x0 = x[i], x1 = x[i + half];
        x[i] = x0 * std::cos(a) - x1 * std::sin(a);
        x[i + half] = x1 * std::cos(a) + x0 * std::sin(a);
      }
    }
  return qkv;
}

TEST(Rope, ForwardBackwardAndRoundTrip) {
  const k::AttentionShape s{2, 5, 4, 2, 8};
  const std::vector<int32_t> pos = {0, 1, 2, 3, 4, 7, 8, 9, 0, 1};  // second row restarts
  const float theta = 10000.0f;
  auto x = randn(s.B * s.T * s.row(), 72), d = randn(s.B * s.T * s.row(), 73);
  const auto xd = to_double(x), dd = to_double(d);
  auto y = x;
  k::rope_forward(y.data(), pos.data(), s, theta);
  EXPECT_LT(rel_err(y, rope_ref(xd, pos, s, theta)), 1e-6);
  for (int64_t r = 0; r < s.B * s.T; ++r)  // v untouched
    EXPECT_EQ(0, std::memcmp(&y[r * s.row() + s.k_col(s.NKV)], &x[r * s.row() + s.k_col(s.NKV)],
                             s.NKV * s.hs * 4));
  // Backward: the gradient of <rope(x), d> with respect to x.
  auto dx = d;
  k::rope_backward(dx.data(), pos.data(), s, theta);
  auto g = numeric_grad(
      [&](const std::vector<double>& v) { return dot(rope_ref(v, pos, s, theta), dd); }, xd);
  EXPECT_LT(rel_err(dx, g), 1e-6);
  // Rotating by p and back gives the input, at long positions as well.
  std::vector<int32_t> far(pos.size());
  for (size_t i = 0; i < far.size(); ++i) far[i] = int32_t(i * 100003 % 131072);
  auto z = x;
  k::rope_forward(z.data(), far.data(), s, 500000.0f);
  k::rope_backward(z.data(), far.data(), s, 500000.0f);
  for (size_t i = 0; i < z.size(); ++i) ASSERT_NEAR(z[i], x[i], 1e-6) << "element " << i;
}

// Llama 3.1's "llama3" frequency scaling, checked against its three regimes by hand: head size
// 8 at theta 10000 gives wavelengths 2 pi x 1, 10, 100, 1000; an original context of 400 with
// low 1 / high 4 keeps those under 100, divides those over 400 by the factor, and blends the
// one between (2 pi x 100 = 628 > 400: divided; 62.8 < 100: kept) -- original 1000 puts 628 in
// the blend: a = (1000 / 628.3 - 1) / 3 = 0.197.
TEST(Rope, Llama3FrequencyScaling) {
  k::Rope r(10000.0f);
  const std::vector<double> plain = k::rope_inv_freq(r, 8);
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(plain[size_t(i)], std::pow(10.0, -i), 1e-15);
  r.factor = 8, r.low_freq_factor = 1, r.high_freq_factor = 4, r.original = 400;
  std::vector<double> f = k::rope_inv_freq(r, 8);
  EXPECT_EQ(f[0], plain[0]);
  EXPECT_EQ(f[1], plain[1]);
  EXPECT_EQ(f[2], plain[2] / 8);
  EXPECT_EQ(f[3], plain[3] / 8);
  r.original = 1000;
  f = k::rope_inv_freq(r, 8);
  const double a = (1000 / (2 * M_PI / plain[2]) - 1) / 3;
  EXPECT_GT(a, 0.19);  // 0.197: a blend, neither end
  EXPECT_LT(a, 0.2);
  EXPECT_EQ(f[1], plain[1]);
  EXPECT_NEAR(f[2], (1 - a) * plain[2] / 8 + a * plain[2], 1e-15);
  EXPECT_EQ(f[3], plain[3] / 8);
  r.high_freq_factor = 0.5;  // not above low_freq_factor
  EXPECT_THROW(k::rope_inv_freq(r, 8), strata::Error);
}

TEST(Rope, PositionZeroIsTheIdentity) {
  const k::AttentionShape s{1, 3, 2, 1, 16};
  const std::vector<int32_t> zero(3, 0);
  auto x = randn(s.T * s.row(), 74), y = x;
  k::rope_forward(y.data(), zero.data(), s, 10000.0f);
  EXPECT_EQ(0, std::memcmp(x.data(), y.data(), x.size() * 4));
}

// q at position p and k at position p - delta give the same score for every p.
TEST(Rope, ScoreDependsOnlyOnThePositionDifference) {
  const k::AttentionShape s{1, 1, 1, 1, 64};
  auto base = randn(s.row(), 75);
  for (int delta : {0, 3, 50}) {
    double first = 0;
    for (int p : {60, 100, 1000, 4000}) {
      auto a = base, b = base;
      const int32_t pa = p, pb = p - delta;
      k::rope_forward(a.data(), &pa, s, 10000.0f);
      k::rope_forward(b.data(), &pb, s, 10000.0f);
      double score = 0;
      for (int i = 0; i < s.hs; ++i) score += double(a[i]) * b[s.hs + i];  // q of a, k of b
      if (p == 60) first = score;
      EXPECT_NEAR(score, first, 1e-4 * std::fabs(first) + 1e-5) << "delta " << delta << " p " << p;
    }
  }
}

TEST(Rope, Bf16StorageAndThreadCounts) {
  const k::AttentionShape s{2, 150, 4, 2, 32};
  std::vector<int32_t> pos(s.B * s.T);
  for (size_t i = 0; i < pos.size(); ++i) pos[i] = int32_t(i % 150) + 17;
  auto x = randn(s.B * s.T * s.row(), 76);
  std::vector<uint16_t> xh(x.size());
  k::f32_to_bf16(xh.data(), x.data(), int64_t(x.size()));
  k::bf16_to_f32(x.data(), xh.data(), int64_t(x.size()));
  auto y = x;
  k::rope_forward(y.data(), pos.data(), s, 10000.0f);
  k::rope_forward(xh.data(), pos.data(), s, 10000.0f);
  std::vector<uint16_t> want(y.size());
  k::f32_to_bf16(want.data(), y.data(), int64_t(y.size()));
  EXPECT_EQ(0, std::memcmp(want.data(), xh.data(), want.size() * 2));
  auto runs = for_thread_counts([&] {
    auto v = x;
    k::rope_forward(v.data(), pos.data(), s, 10000.0f);
    k::rope_backward(v.data(), pos.data(), s, 500000.0f);
    return v;
  });
  for (size_t i = 1; i < runs.size(); ++i)
    EXPECT_EQ(0, std::memcmp(runs[0].data(), runs[i].data(), runs[0].size() * 4));
}

}  // namespace strata::test
