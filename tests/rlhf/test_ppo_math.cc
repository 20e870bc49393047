// PPO arithmetic against a hand-computed example and double-precision finite differences.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "rlhf/ppo_math.h"

namespace strata::rlhf {
namespace {

TEST(PpoMath, GaeMatchesAHandComputedExample) {
  // R = 3, γ = 0.9, λ = 0.8; rewards (0, 0, 1), values (0.5, 0.4, 0.2):
  //   δ2 = 1 - 0.2 = 0.8;  δ1 = 0 + 0.9·0.2 - 0.4 = -0.22;  δ0 = 0 + 0.9·0.4 - 0.5 = -0.14
  //   A2 = 0.8;  A1 = -0.22 + 0.72·0.8 = 0.356;  A0 = -0.14 + 0.72·0.356 = 0.11632
  const double r[] = {0, 0, 1}, v[] = {0.5, 0.4, 0.2};
  double a[3], g[3];
  gae(r, v, 3, 0.9, 0.8, a, g);
  EXPECT_NEAR(a[2], 0.8, 1e-12);
  EXPECT_NEAR(a[1], 0.356, 1e-12);
  EXPECT_NEAR(a[0], 0.11632, 1e-12);
  for (int t = 0; t < 3; ++t) EXPECT_NEAR(g[t], a[t] + v[t], 1e-12);
  // λ = 1, γ = 1: advantages are reward-to-go minus the value.
  gae(r, v, 3, 1.0, 1.0, a, g);
  EXPECT_NEAR(a[0], 1 - 0.5, 1e-12);
  EXPECT_NEAR(g[1], 1.0, 1e-12);
}

TEST(PpoMath, WhitenGivesZeroMeanUnitVariance) {
  std::vector<double> x = {1, 2, 3, 4};
  whiten(x.data(), 4);
  // mean 2.5, population variance 1.25
  EXPECT_NEAR(x[0], -1.5 / std::sqrt(1.25 + 1e-8), 1e-12);
  EXPECT_NEAR(x[0] + x[1] + x[2] + x[3], 0, 1e-12);
  std::vector<double> y = {1, 2, 3, 4};
  whiten(y.data(), 4, false);
  EXPECT_NEAR(y[3], 1.5 / std::sqrt(1.25 + 1e-8) + 2.5, 1e-12);
}

TEST(PpoMath, ClippedPolicyTermByCase) {
  const double eps = 0.2;
  // ratio 1.5 > 1 + ε with A > 0: the clipped term is larger, no gradient; loss -A (1 + ε).
  PolicyTerm t = policy_term(std::log(1.5), 0.0, 2.0, eps);
  EXPECT_TRUE(t.clipped);
  EXPECT_NEAR(t.loss, -2.0 * 1.2, 1e-12);
  EXPECT_EQ(t.dlogp, 0.0);
  // ratio 1.5 with A < 0: the unclipped term is larger: loss -A ρ, d/dlogp = -A ρ.
  t = policy_term(std::log(1.5), 0.0, -2.0, eps);
  EXPECT_FALSE(t.clipped);
  EXPECT_NEAR(t.loss, 3.0, 1e-12);
  EXPECT_NEAR(t.dlogp, 3.0, 1e-12);
  // ratio 0.5 < 1 - ε with A < 0: clipped, loss -A (1 - ε) = 1.6.
  t = policy_term(std::log(0.5), 0.0, -2.0, eps);
  EXPECT_TRUE(t.clipped);
  EXPECT_NEAR(t.loss, 1.6, 1e-12);
  // inside the range: plain.
  t = policy_term(std::log(1.1), 0.0, 1.0, eps);
  EXPECT_FALSE(t.clipped);
  EXPECT_NEAR(t.dlogp, -1.1, 1e-12);
}

TEST(PpoMath, ClippedValueTermByCase) {
  // v moved 0.5 from old 1.0 toward 2.0 (return): clip 0.2 keeps vc = 1.2; l1 = 0.25,
  // l2 = 0.64 > l1 -> clipped, loss 0.32, no gradient.
  ValueTerm t = value_term(1.5, 1.0, 2.0, 0.2);
  EXPECT_TRUE(t.clipped);
  EXPECT_NEAR(t.loss, 0.32, 1e-12);
  EXPECT_EQ(t.dvalue, 0.0);
  // moved away from the return: the unclipped loss is larger, full gradient v - G.
  t = value_term(0.5, 1.0, 2.0, 0.2);
  EXPECT_FALSE(t.clipped);
  EXPECT_NEAR(t.loss, 0.5 * 2.25, 1e-12);
  EXPECT_NEAR(t.dvalue, -1.5, 1e-12);
}

TEST(PpoMath, KlEstimators) {
  const double lp = std::log(0.5), ref = std::log(0.25);
  EXPECT_NEAR(kl_k1(lp, ref), std::log(2.0), 1e-12);
  EXPECT_NEAR(kl_k2(lp, ref), 0.5 * std::log(2.0) * std::log(2.0), 1e-12);
  // k3 = (r - 1) - log r with r = π_ref / π = 0.5: -0.5 + log 2
  EXPECT_NEAR(kl_k3(lp, ref), -0.5 + std::log(2.0), 1e-12);
  // Over a whole distribution, E_π[k1] = E_π[k3] = KL(π || ref).
  const double p[] = {0.5, 0.3, 0.2}, q[] = {0.25, 0.25, 0.5};
  double kl = 0, e1 = 0, e3 = 0;
  for (int i = 0; i < 3; ++i) {
    kl += p[i] * std::log(p[i] / q[i]);
    e1 += p[i] * kl_k1(std::log(p[i]), std::log(q[i]));
    e3 += p[i] * kl_k3(std::log(p[i]), std::log(q[i]));
  }
  EXPECT_NEAR(e1, kl, 1e-12);
  EXPECT_NEAR(e3, kl, 1e-12);
}

TEST(PpoMath, AdaptiveKlController) {
  KlController c(0.1, 6.0, 10000);
  c.update(12.0, 256);  // error clipped to +0.2: β (1 + 0.2 · 256 / 10000)
  EXPECT_NEAR(c.beta(), 0.1 * (1 + 0.2 * 0.0256), 1e-15);
  c.update(5.4, 256);  // error -0.1
  EXPECT_NEAR(c.beta(), 0.1 * (1 + 0.2 * 0.0256) * (1 - 0.1 * 0.0256), 1e-15);
  KlController fixed(0.1, 0.0, 10000);
  fixed.update(100.0, 256);
  EXPECT_EQ(fixed.beta(), 0.1);
}

TEST(PpoMath, ExplainedVariance) {
  EXPECT_NEAR(explained_variance({1, 2, 3}, {1, 2, 3}), 1.0, 1e-12);
  EXPECT_NEAR(explained_variance({0, 0, 0}, {1, 2, 3}), 0.0, 1e-12);
  EXPECT_EQ(explained_variance({1, 2}, {5, 5}), 0.0);
}

// The whole per-token actor loss as a function of the logits, in double.
double actor_loss(const std::vector<double>& z, int V, double tau, int a, double old, double adv,
                  double clip, double c_ent) {
  const RowStats s = row_stats(z.data(), V, tau, a);
  return policy_term(s.logp, old, adv, clip).loss - c_ent * s.entropy;
}

TEST(PpoMath, LogitGradientsMatchFiniteDifferences) {
  const int V = 7, Vp = 8, a = 3;
  const double tau = 0.7, clip = 0.2, c_ent = 0.05;
  std::vector<double> z = {0.3, -1.2, 0.8, 0.1, 2.0, -0.4, 0.6, 0.0};
  for (double adv : {1.3, -0.9}) {
    for (double old_shift : {0.0, 0.15, -0.5}) {  // ratio inside and outside the clip range
      const RowStats s = row_stats(z.data(), V, tau, a);
      const double old = s.logp - old_shift;
      const PolicyTerm pt = policy_term(s.logp, old, adv, clip);
      std::vector<double> dz(Vp);
      row_grad(dz.data(), z.data(), V, Vp, tau, a, pt.dlogp, c_ent, s);
      for (int v = 0; v < V; ++v) {
        std::vector<double> zp = z, zm = z;
        const double h = 1e-6;
        zp[size_t(v)] += h;
        zm[size_t(v)] -= h;
        const double fd = (actor_loss(zp, V, tau, a, old, adv, clip, c_ent) -
                           actor_loss(zm, V, tau, a, old, adv, clip, c_ent)) / (2 * h);
        EXPECT_NEAR(dz[size_t(v)], fd, 1e-7) << "adv " << adv << " shift " << old_shift << " v " << v;
      }
      EXPECT_EQ(dz[size_t(V)], 0.0);  // padded logits take no gradient
    }
  }
}

TEST(PpoMath, ValueGradientMatchesFiniteDifferences) {
  for (double v : {0.3, 1.05, 1.5, 2.7})
    for (double ret : {-1.0, 1.1, 3.0}) {
      const ValueTerm t = value_term(v, 1.0, ret, 0.2);
      const double h = 1e-7;
      const double fd = (value_term(v + h, 1.0, ret, 0.2).loss - value_term(v - h, 1.0, ret, 0.2).loss) / (2 * h);
      EXPECT_NEAR(t.dvalue, fd, 1e-6) << "v " << v << " ret " << ret;
    }
}

}  // namespace
}  // namespace strata::rlhf
