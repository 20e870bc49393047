// Cross-entropy with token weights, AdamW on ranges, gradient clipping helpers.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstring>

#include "check.h"
#include "kernels/kernels.h"

namespace strata::test {
namespace k = strata::kernels;

static double ce_ref(const std::vector<double>& logits, const std::vector<int32_t>& tgt,
                     const std::vector<float>& w, int N, int V, int Vp) {
  double total = 0;
  for (int n = 0; n < N; ++n) {
    if (w[n] == 0) continue;
    double m = -INFINITY, s = 0;
    for (int v = 0; v < V; ++v) m = std::max(m, logits[n * Vp + v]);
    for (int v = 0; v < V; ++v) s += std::exp(logits[n * Vp + v] - m);
    total += w[n] * (m + std::log(s) - logits[n * Vp + tgt[n]]);
  }
  return total;
}

TEST(CrossEntropy, WeightedLossAndGradients) {
  const int N = 6, V = 11, Vp = 16;
  auto logits = randn(N * Vp, 50, 2.0f);
  std::vector<int32_t> tgt = {0, 10, 3, 3, 7, 1};
  std::vector<float> w = {1.0f, 0.0f, 0.5f, 2.0f, 0.0f, 1.0f};
  // A row with weight 0 contributes nothing, even when its logits are garbage.
  for (int v = 0; v < Vp; ++v) logits[4 * Vp + v] = NAN;
  std::vector<float> losses(N), lse(N);
  const double sum = k::crossentropy_forward(losses.data(), lse.data(), logits.data(), tgt.data(),
                                             w.data(), N, V, Vp);
  auto ld = to_double(logits);
  const double ref = ce_ref(ld, tgt, w, N, V, Vp);
  EXPECT_NEAR(sum, ref, 1e-5 * std::fabs(ref));
  EXPECT_EQ(losses[1], 0.0f);
  EXPECT_EQ(losses[4], 0.0f);

  const float scale = 0.37f;
  std::vector<float> grad = logits;
  k::crossentropy_backward(grad.data(), lse.data(), tgt.data(), w.data(), scale, N, V, Vp);
  for (int v = 0; v < Vp; ++v) ld[4 * Vp + v] = 0;  // NaN-free copy for the differences
  auto g = numeric_grad(
      [&](const std::vector<double>& x) { return scale * ce_ref(x, tgt, w, N, V, Vp); }, ld);
  EXPECT_LT(rel_err(grad, g), 1e-5);
  for (int n = 0; n < N; ++n)
    for (int v = V; v < Vp; ++v) ASSERT_EQ(grad[n * Vp + v], 0.0f);  // padded columns
  for (int v = 0; v < Vp; ++v) {
    ASSERT_EQ(grad[1 * Vp + v], 0.0f);
    ASSERT_EQ(grad[4 * Vp + v], 0.0f);
  }
}

TEST(CrossEntropy, NullWeightsMeanAllOnes) {
  const int N = 5, V = 9, Vp = 9;
  auto logits = randn(N * Vp, 51);
  std::vector<int32_t> tgt = {1, 2, 3, 4, 5};
  std::vector<float> ones(N, 1.0f), l1(N), l2(N), s1(N), s2(N);
  const double a =
      k::crossentropy_forward(l1.data(), s1.data(), logits.data(), tgt.data(), nullptr, N, V, Vp);
  const double b = k::crossentropy_forward(l2.data(), s2.data(), logits.data(), tgt.data(),
                                           ones.data(), N, V, Vp);
  EXPECT_EQ(a, b);
}

// torch.optim.AdamW arithmetic in double.
static void adamw_ref(std::vector<double>& p, const std::vector<double>& g, std::vector<double>& m,
                      std::vector<double>& v, const k::AdamWStep& s, bool decay) {
  const double bc1 = 1 - std::pow(double(s.beta1), double(s.t));
  const double bc2 = 1 - std::pow(double(s.beta2), double(s.t));
  for (size_t i = 0; i < p.size(); ++i) {
    const double gi = g[i] * s.grad_scale;
    if (decay) p[i] *= 1 - double(s.lr) * s.weight_decay;
    m[i] = s.beta1 * m[i] + (1 - s.beta1) * gi;
    v[i] = s.beta2 * v[i] + (1 - s.beta2) * gi * gi;
    p[i] -= s.lr / bc1 * m[i] / (std::sqrt(v[i]) / std::sqrt(bc2) + s.eps);
  }
}

TEST(AdamW, MatchesReferenceOverStepsAndRanges) {
  const int n = 257;
  auto p = randn(n, 60), m = std::vector<float>(n, 0.0f), v = std::vector<float>(n, 0.0f);
  auto pd = to_double(p), md = std::vector<double>(n, 0.0), vd = std::vector<double>(n, 0.0);
  // Two ranges with different decay policy, updated separately: [0, 100) decays.
  for (int t = 1; t <= 5; ++t) {
    auto g = randn(n, 100 + t);
    k::AdamWStep s{1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, t, 0.5f};
    k::adamw_update(p.data(), g.data(), m.data(), v.data(), 100, true, s);
    k::adamw_update(p.data() + 100, g.data() + 100, m.data() + 100, v.data() + 100, n - 100, false,
                    s);
    std::vector<double> p1(pd.begin(), pd.begin() + 100), p2(pd.begin() + 100, pd.end());
    std::vector<double> m1(md.begin(), md.begin() + 100), m2(md.begin() + 100, md.end());
    std::vector<double> v1(vd.begin(), vd.begin() + 100), v2(vd.begin() + 100, vd.end());
    auto gd = to_double(g);
    adamw_ref(p1, {gd.begin(), gd.begin() + 100}, m1, v1, s, true);
    adamw_ref(p2, {gd.begin() + 100, gd.end()}, m2, v2, s, false);
    std::copy(p1.begin(), p1.end(), pd.begin());
    std::copy(p2.begin(), p2.end(), pd.begin() + 100);
    std::copy(m1.begin(), m1.end(), md.begin());
    std::copy(m2.begin(), m2.end(), md.begin() + 100);
    std::copy(v1.begin(), v1.end(), vd.begin());
    std::copy(v2.begin(), v2.end(), vd.begin() + 100);
  }
  EXPECT_LT(rel_err(p, pd), 1e-6);
  EXPECT_LT(rel_err(m, md), 1e-6);
  EXPECT_LT(rel_err(v, vd), 1e-6);
}

TEST(AdamW, DecayOnlyWhereAsked) {
  std::vector<float> p = {1.0f, 1.0f}, g = {0.0f, 0.0f}, m = {0, 0}, v = {0, 0};
  k::AdamWStep s{0.5f, 0.9f, 0.95f, 1e-8f, 0.1f, 1, 1.0f};
  k::adamw_update(p.data(), g.data(), m.data(), v.data(), 1, true, s);
  k::adamw_update(p.data() + 1, g.data() + 1, m.data() + 1, v.data() + 1, 1, false, s);
  EXPECT_FLOAT_EQ(p[0], 0.95f);  // zero gradient: only the decoupled decay moves it
  EXPECT_EQ(p[1], 1.0f);
}

TEST(Clip, SumSquaresIsExactAndThreadCountFree) {
  const int64_t n = 3 * k::kSumBlock + 17;
  auto x = randn(n, 70);
  double ref = 0;
  for (float f : x) ref += double(f) * f;
  const int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  const double a = k::sum_squares(x.data(), n);
  omp_set_num_threads(2);
  const double b = k::sum_squares(x.data(), n);
  omp_set_num_threads(saved);
  EXPECT_NEAR(a, ref, 1e-12 * ref);
  EXPECT_EQ(a, b);
  EXPECT_EQ(k::sum_squares(x.data(), 0), 0.0);
}

TEST(Clip, ScaleFollowsTorchRule) {
  EXPECT_EQ(k::clip_scale(0.25, 1.0f), 1.0f);                      // norm 0.5 < 1
  EXPECT_NEAR(k::clip_scale(16.0, 1.0f), 1.0 / (4 + 1e-6), 1e-7);  // norm 4
  EXPECT_EQ(k::clip_scale(16.0, 0.0f), 1.0f);                      // disabled
  std::vector<float> g = {3.0f, 4.0f};
  k::scale_inplace(g.data(), 2, k::clip_scale(k::sum_squares(g.data(), 2), 1.0f));
  EXPECT_NEAR(std::sqrt(g[0] * g[0] + g[1] * g[1]), 1.0, 1e-6);
}

}  // namespace strata::test
