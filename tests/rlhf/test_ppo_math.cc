// PPO arithmetic against a hand-computed example and double-precision finite differences,
// and the policy's log-softmax kernel against the same arithmetic in double.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "core/rng.h"
#include "kernels/crossentropy.h"
#include "rlhf/ppo_math.h"

namespace strata::rlhf {
namespace {

// The policy's softmax arithmetic in double, as the formulas read (ppo_math.h's terms): the
// reference for kernels/crossentropy.h's log_softmax_forward and log_softmax_backward, which
// PPO runs. Statistics of one logits row z (first V entries) at temperature tau: the log
// normaliser lse of z / tau, the log-probability of `action`, and the entropy.
struct RowStats {
  double lse = 0, logp = 0, entropy = 0;
};
template <class Real>
RowStats row_stats(const Real* z, int V, double tau, int action) {
  double mx = -INFINITY;
  for (int v = 0; v < V; ++v) mx = std::max(mx, double(z[v]) / tau);
  double sum = 0, wsum = 0;
  for (int v = 0; v < V; ++v) {
    const double e = std::exp(double(z[v]) / tau - mx);
    sum += e;
    wsum += e * (double(z[v]) / tau - mx);
  }
  RowStats s;
  s.lse = mx + std::log(sum);
  s.logp = double(z[action]) / tau - s.lse;
  s.entropy = std::log(sum) - wsum / sum;  // -Σ p (z/τ - lse)
  return s;
}

// d loss / d z for loss = g_logp · logp(action) - c_ent · H over the row (first V entries;
// the padded ones get 0): (g_logp (δ - p) + c_ent p (log p + H)) / τ.
template <class Real>
void row_grad(Real* dz, const Real* z, int V, int Vp, double tau, int action, double g_logp,
              double c_ent, const RowStats& s) {
  for (int v = 0; v < V; ++v) {
    const double lp = double(z[v]) / tau - s.lse;
    const double p = std::exp(lp);
    double d = g_logp * ((v == action ? 1.0 : 0.0) - p) + c_ent * p * (lp + s.entropy);
    dz[v] = Real(d / tau);
  }
  for (int v = V; v < Vp; ++v) dz[v] = Real(0);
}


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

// What PPO runs: the kernel's log-probabilities, entropies and logit gradients (fp32, 16 lanes)
// equal the double arithmetic above to fp32 rounding, at τ = 1 and below it, with and without
// the entropy bonus, for rows wider and narrower than the lanes and padded columns; and at
// τ = 1 the log-probability is minus the cross-entropy kernel's loss, bit for bit (one row
// statistic for both).
TEST(PpoMath, LogSoftmaxKernelEqualsTheDoubleArithmetic) {
  for (const int V : {7, 50, 300}) {
    const int Vp = V + 5, N = 6;
    std::vector<float> z(static_cast<size_t>(N * Vp));
    Rng rng(17, uint64_t(V));
    for (float& x : z) x = float(3.0 * (rng.uniform() - 0.5));
    std::vector<int32_t> a(static_cast<size_t>(N));
    for (int n = 0; n < N; ++n) a[size_t(n)] = int32_t((n * 37 + 3) % V);
    for (const float tau : {1.0f, 0.7f}) {
      for (const float c : {0.0f, 0.05f}) {
        std::vector<float> lse(static_cast<size_t>(N)), logp(lse), ent(lse), g(lse), dz(z.size(), 9.0f);
        for (int n = 0; n < N; ++n) g[size_t(n)] = 0.3f * float(n) - 0.8f;
        kernels::log_softmax_forward(lse.data(), logp.data(), ent.data(), z.data(), a.data(), N, V, Vp, tau);
        kernels::log_softmax_backward(dz.data(), z.data(), lse.data(), ent.data(), a.data(), g.data(), c, N, V,
                                      Vp, tau);
        for (int n = 0; n < N; ++n) {
          const float* row = z.data() + int64_t(n) * Vp;
          const RowStats s = row_stats(row, V, tau, a[size_t(n)]);
          EXPECT_NEAR(logp[size_t(n)], s.logp, 2e-6 * std::max(1.0, std::abs(s.logp))) << V << " " << tau;
          EXPECT_NEAR(ent[size_t(n)], s.entropy, 2e-6 * std::max(1.0, s.entropy)) << V << " " << tau;
          std::vector<double> want(static_cast<size_t>(Vp));
          const std::vector<double> zd(row, row + Vp);
          row_grad(want.data(), zd.data(), V, Vp, tau, a[size_t(n)], g[size_t(n)], c, s);
          for (int v = 0; v < Vp; ++v)
            ASSERT_NEAR(dz[size_t(n) * Vp + v], want[size_t(v)], 1e-6) << V << " " << tau << " " << c << " v " << v;
        }
      }
    }
    std::vector<float> lse(static_cast<size_t>(N)), logp(lse), losses(lse), ce_lse(lse);
    kernels::log_softmax_forward(lse.data(), logp.data(), nullptr, z.data(), a.data(), N, V, Vp, 1.0f);
    kernels::crossentropy_forward(losses.data(), ce_lse.data(), z.data(), a.data(), nullptr, N, V, Vp);
    for (int n = 0; n < N; ++n) {
      EXPECT_EQ(lse[size_t(n)], ce_lse[size_t(n)]);
      EXPECT_EQ(-logp[size_t(n)], losses[size_t(n)]);
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
