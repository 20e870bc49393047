// The Renyi-DP accountant against published epsilons and against an independent
// high-precision implementation (tools/fed/rdp_reference.py, fixture
// tests/fed/fixtures/rdp_reference.json: integer orders by an exact binomial sum, fractional
// orders by numerical integration of the definition, both with mpmath).
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include "core/error.h"
#include "fed/accountant.h"
#include "nlohmann/json.hpp"

namespace strata::fed {
namespace {

nlohmann::json reference() {
  std::ifstream in(std::string(STRATA_SOURCE_DIR) + "/tests/fed/fixtures/rdp_reference.json");
  return nlohmann::json::parse(in);
}

std::vector<double> integer_orders() {
  std::vector<double> o;
  for (int a = 2; a <= 33; ++a) o.push_back(a);
  return o;
}

SgmQuery mnist(double sigma, double epochs, Conversion conv) {
  SgmQuery q;
  q.q = 256.0 / 60000.0;
  q.sigma = sigma;
  q.steps = steps_for_epochs(epochs, 60000, 256);
  q.delta = 1e-5;
  q.conversion = conv;
  return q;
}

// TF-Privacy, tutorials/README.md (MNIST DP-SGD tutorial, N = 60000, batch 256, delta 1e-5,
// epsilon from compute_dp_sgd_privacy.py with the classic conversion of its time):
//   sigma 1.1, 60 epochs -> "eps = 3.01";  sigma 1.3, 15 epochs -> 1.19;
//   sigma 0.7, 45 epochs -> 7.10.
// Matched to the two decimals printed.
TEST(Accountant, MatchesTfPrivacyMnistTable) {
  EXPECT_NEAR(epsilon(mnist(1.1, 60, Conversion::classic)).epsilon, 3.01, 0.005);
  EXPECT_NEAR(epsilon(mnist(1.3, 15, Conversion::classic)).epsilon, 1.19, 0.005);
  EXPECT_NEAR(epsilon(mnist(0.7, 45, Conversion::classic)).epsilon, 7.10, 0.005);
  EXPECT_EQ(steps_for_epochs(60, 60000, 256), 14063);
}

// Abadi et al. 2016, Sec. 3.1: q = 0.01, sigma = 4, delta = 1e-5, T = 10000 steps gives
// "epsilon ~ 1.26" with the moments accountant (integer moments up to 32 = orders 2..33).
TEST(Accountant, MatchesAbadiMomentsAccountantExample) {
  SgmQuery q;
  q.q = 0.01;
  q.sigma = 4;
  q.steps = 10000;
  q.delta = 1e-5;
  q.conversion = Conversion::classic;
  q.orders = integer_orders();
  EXPECT_NEAR(epsilon(q).epsilon, 1.26, 0.005);
}

TEST(Accountant, PerOrderRdpMatchesHighPrecisionReference) {
  const auto ref = reference();
  ASSERT_GT(ref["per_order"].size(), 10u);
  for (const auto& c : ref["per_order"]) {
    const double want = c["rdp"], got = sgm_rdp(c["q"], c["sigma"], c["alpha"]);
    EXPECT_NEAR(got, want, 1e-9 * std::max(1.0, std::fabs(want)))
        << "q " << c["q"] << " sigma " << c["sigma"] << " alpha " << c["alpha"];
  }
}

TEST(Accountant, EpsilonMatchesHighPrecisionReference) {
  const auto ref = reference();
  for (const auto& c : ref["cases"]) {
    SgmQuery q;
    q.q = double(c["batch"]) / double(c["n"]);
    q.sigma = c["sigma"];
    q.steps = c["steps"];
    q.delta = c["delta"];
    q.conversion = parse_conversion(c["conversion"]);
    if (c["orders"] == "integer2_33") q.orders = integer_orders();
    const PrivacySpent p = epsilon(q);
    EXPECT_NEAR(p.epsilon, double(c["epsilon"]), 1e-6 * std::max(1.0, double(c["epsilon"])))
        << c["name"];
    EXPECT_DOUBLE_EQ(p.order, double(c["order"])) << c["name"];
    if (!c["published"].is_null()) {  // the independent implementation agrees with the paper too
      EXPECT_NEAR(double(c["epsilon"]), double(c["published"]), 0.005) << c["name"];
    }
  }
}

TEST(Accountant, ImprovedConversionIsTighterAndFullBatchIsPlainGaussian) {
  const double classic = epsilon(mnist(1.1, 60, Conversion::classic)).epsilon;
  const double improved = epsilon(mnist(1.1, 60, Conversion::improved)).epsilon;
  EXPECT_LT(improved, classic);
  // q = 1: RDP(alpha) = alpha / (2 sigma^2) exactly (no amplification).
  EXPECT_DOUBLE_EQ(sgm_rdp(1.0, 2.0, 5.0), 5.0 / 8.0);
  EXPECT_EQ(sgm_rdp(0.0, 2.0, 5.0), 0.0);
}

TEST(Accountant, InverseFindsTheNoiseForATargetEpsilon) {
  SgmQuery q = mnist(1.0, 60, Conversion::classic);
  const double sigma = sigma_for_epsilon(q, 3.01);
  EXPECT_NEAR(sigma, 1.1, 0.01);  // the published pair, read backwards
  q.sigma = sigma;
  EXPECT_LE(epsilon(q).epsilon, 3.01);
  q.sigma = sigma * 0.999;
  EXPECT_GT(epsilon(q).epsilon, 3.01);
  // Epsilon falls as noise rises.
  SgmQuery a = mnist(0.8, 10, Conversion::improved), b = mnist(1.6, 10, Conversion::improved);
  EXPECT_GT(epsilon(a).epsilon, epsilon(b).epsilon);
}

TEST(Accountant, BadInputIsOneClearError) {
  SgmQuery q = mnist(0, 1, Conversion::improved);
  try {
    epsilon(q);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--noise-multiplier must be > 0 (got 0)"), std::string::npos)
        << e.what();
  }
  q.sigma = -1;
  EXPECT_THROW(epsilon(q), Error);
  q = mnist(1, 1, Conversion::improved);
  q.delta = 0;
  EXPECT_THROW(epsilon(q), Error);
  q.delta = 1e-5;
  q.q = 1.5;
  EXPECT_THROW(epsilon(q), Error);
  EXPECT_THROW(steps_for_epochs(1, 100, 200), Error);
  EXPECT_THROW(sigma_for_epsilon(mnist(1, 1, Conversion::improved), -1), Error);
  EXPECT_THROW(parse_conversion("fancy"), Error);
}

}  // namespace
}  // namespace strata::fed
