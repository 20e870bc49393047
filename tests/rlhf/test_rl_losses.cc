// GRPO, Dr. GRPO, RLOO and DPO/IPO arithmetic (rlhf/ppo_math.h, rlhf/dpo.h) against
// PyTorch: fixtures/rl_losses.json holds losses and autograd gradients that
// fixtures/make_rl_losses.py computed from the papers' formulas on fixed log-probs, rewards
// and masks (groups with ties and with all-equal rewards among them). The loops aggregate
// the per-token terms as these tests do: each response's token mean, averaged over the
// responses (Dr. GRPO: a sum over a constant).
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"
#include "rlhf/dpo.h"
#include "rlhf/ppo_math.h"

namespace strata::rlhf {
namespace {

using nlohmann::json;

const json& fixtures() {
  static const json j = [] {
    std::ifstream f(std::string(STRATA_SOURCE_DIR) + "/tests/rlhf/fixtures/rl_losses.json");
    return json::parse(f);
  }();
  return j;
}

constexpr double kTol = 1e-12;

TEST(RlLosses, FixturesCoverEveryAlgorithm) {
  std::vector<std::string> algos;
  for (const json& c : fixtures()["policy"]) algos.push_back(c["algo"]);
  for (const char* a : {"grpo", "dr_grpo", "rloo"}) EXPECT_NE(std::find(algos.begin(), algos.end(), a), algos.end()) << a;
  EXPECT_EQ(fixtures()["dpo"].size(), 3u);
}

TEST(RlLosses, GroupAdvantagesEqualPyTorch) {
  for (const json& c : fixtures()["policy"]) {
    const std::vector<double> r = c["rewards"], want = c["advantages"];
    const int k = c["k"];
    std::vector<double> a(r.size());
    const std::string algo = c["algo"];
    if (algo == "rloo") rloo_advantages(r.data(), int64_t(r.size()) / k, k, a.data());
    else group_advantages(r.data(), int64_t(r.size()) / k, k, /*scale_by_std=*/algo == "grpo", a.data());
    for (size_t i = 0; i < r.size(); ++i) {
      EXPECT_TRUE(std::isfinite(a[i])) << c["name"] << " " << i;
      EXPECT_NEAR(a[i], want[i], kTol) << c["name"] << " " << i;
    }
  }
}

// Equal rewards in a group give advantage 0 exactly (no division of 0 by 0), and a group's
// advantages sum to 0.
TEST(RlLosses, AllEqualRewardsGiveZeroAdvantage) {
  const double r[] = {0.3, 0.3, 0.3, 0.3, -1, -1, 2, 5};
  double a[8];
  for (bool std_scale : {true, false}) {
    group_advantages(r, 2, 4, std_scale, a);
    for (int i = 0; i < 4; ++i) EXPECT_EQ(a[i], 0.0);
    EXPECT_NEAR(a[4] + a[5] + a[6] + a[7], 0.0, 1e-12);
  }
  rloo_advantages(r, 2, 4, a);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(a[i], 0.0);
}

// The clipped policy term plus β·k3, aggregated as the loop does, and its gradient by logp.
TEST(RlLosses, PolicyLossAndGradientEqualPyTorch) {
  for (const json& c : fixtures()["policy"]) {
    const std::vector<std::vector<double>> logp = c["logp"], old = c["old"], ref = c["ref"], want_g = c["dlogp"];
    const std::vector<double> adv = c["advantages"];
    const std::vector<int> lengths = c["lengths"];
    const int L = c["L"];
    const double eps = c["eps"], beta = c["beta"];
    const bool dr = c["algo"] == "dr_grpo";
    const size_t n = logp.size();
    double loss = 0;
    for (size_t i = 0; i < n; ++i) {
      const double w = dr ? 1.0 / (double(n) * L) : 1.0 / (double(n) * lengths[i]);
      for (int t = 0; t < L; ++t) {
        const bool valid = t < lengths[i];
        const PolicyTerm pt = policy_term(logp[i][size_t(t)], old[i][size_t(t)], adv[i], eps);
        const KlTerm kt = kl_k3_term(logp[i][size_t(t)], ref[i][size_t(t)], beta);
        if (valid) loss += (pt.loss + kt.loss) * w;
        const double g = valid ? (pt.dlogp + kt.dlogp) * w : 0.0;
        EXPECT_NEAR(g, want_g[i][size_t(t)], kTol) << c["name"] << " response " << i << " token " << t;
      }
    }
    EXPECT_NEAR(loss, c["loss"].get<double>(), kTol) << c["name"];
  }
}

TEST(RlLosses, DpoAndIpoEqualPyTorch) {
  for (const json& c : fixtures()["dpo"]) {
    const std::vector<std::vector<double>> pc = c["pc"], pr = c["pr"], rc = c["rc"], rr = c["rr"];
    const std::vector<std::vector<double>> want_c = c["dpc"], want_r = c["dpr"];
    const std::vector<int> lc = c["lengths_chosen"], lr = c["lengths_rejected"];
    const std::vector<double> want_h = c["h"], want_l = c["losses"];
    const bool ipo = c["ipo"];
    const double beta = c["beta"];
    const size_t n = pc.size();
    double loss = 0;
    for (size_t i = 0; i < n; ++i) {
      auto seq = [&](const std::vector<double>& x, int len) {
        double s = 0;
        for (int t = 0; t < len; ++t) s += x[size_t(t)];
        return ipo ? s / len : s;
      };
      const DpoTerm d = dpo_term(seq(pc[i], lc[i]), seq(pr[i], lr[i]), seq(rc[i], lc[i]), seq(rr[i], lr[i]), beta, ipo);
      EXPECT_NEAR(d.h, want_h[i], kTol) << c["name"] << " " << i;
      EXPECT_NEAR(d.loss, want_l[i], kTol) << c["name"] << " " << i;
      loss += d.loss / double(n);
      // The token gradients: the sequence's derivative spread over its tokens (1/len under IPO).
      for (int t = 0; t < 6; ++t) {
        const double gc = t < lc[i] ? d.dchosen / double(n) / (ipo ? lc[i] : 1) : 0.0;
        const double gr = t < lr[i] ? d.drejected / double(n) / (ipo ? lr[i] : 1) : 0.0;
        EXPECT_NEAR(gc, want_c[i][size_t(t)], kTol) << c["name"] << " " << i << " " << t;
        EXPECT_NEAR(gr, want_r[i][size_t(t)], kTol) << c["name"] << " " << i << " " << t;
      }
    }
    EXPECT_NEAR(loss, c["loss"].get<double>(), kTol) << c["name"];
  }
}

// -log σ(x) stays finite far out on both sides.
TEST(RlLosses, DpoLossIsStableForLargeMargins) {
  const DpoTerm far_right = dpo_term(0, -1e4, 0, 0, 1.0, false);
  EXPECT_NEAR(far_right.loss, 0.0, 1e-300);
  EXPECT_NEAR(far_right.dchosen, 0.0, 1e-300);
  const DpoTerm far_wrong = dpo_term(-1e4, 0, 0, 0, 1.0, false);
  EXPECT_DOUBLE_EQ(far_wrong.loss, 1e4);
  EXPECT_DOUBLE_EQ(far_wrong.dchosen, -1.0);
  EXPECT_DOUBLE_EQ(far_wrong.drejected, 1.0);
}

}  // namespace
}  // namespace strata::rlhf
