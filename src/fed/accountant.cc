// Renyi-DP accountant for the sampled Gaussian mechanism: see accountant.h for the terms.
#include "fed/accountant.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/error.h"

namespace strata::fed {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// log(exp(a) + exp(b)) without overflow.
double log_add(double a, double b) {
  if (a == -kInf) return b;
  if (b == -kInf) return a;
  const double hi = std::max(a, b), lo = std::min(a, b);
  return hi + std::log1p(std::exp(lo - hi));
}

// log(exp(a) - exp(b)), a >= b.
double log_sub(double a, double b) {
  if (b == -kInf) return a;
  if (a == b) return -kInf;
  STRATA_CHECK(a > b, "accountant: log_sub of a larger term (internal)");
  return a + std::log1p(-std::exp(b - a));
}

// log(erfc(x)), with the asymptotic expansion where erfc underflows (x > ~26).
double log_erfc(double x) {
  const double r = std::erfc(x);
  if (r > 0) return std::log(r);
  const double x2 = x * x;
  return -0.5 * std::log(M_PI) - std::log(x) - x2 - 0.5 / x2 + 0.625 / (x2 * x2) -
         37.0 / 24.0 / (x2 * x2 * x2) + 353.0 / 64.0 / (x2 * x2 * x2 * x2);
}

// log A_alpha for integer alpha: sum_k C(alpha, k) (1-q)^(alpha-k) q^k exp((k^2 - k)/(2 s^2)).
double log_a_int(double q, double sigma, int alpha) {
  double log_a = -kInf;
  for (int k = 0; k <= alpha; ++k) {
    const double log_binom =
        std::lgamma(alpha + 1.0) - std::lgamma(k + 1.0) - std::lgamma(alpha - k + 1.0);
    const double s = log_binom + k * std::log(q) + (alpha - k) * std::log1p(-q) +
                     (double(k) * k - k) / (2 * sigma * sigma);
    log_a = log_add(log_a, s);
  }
  return log_a;
}

// log A_alpha for fractional alpha: the two erfc series (Mironov et al. 2019, Sec. 3.3),
// split at z0 where the two Gaussians' mixture weights cross. Terms alternate in sign once
// k > alpha (the generalised binomial coefficient), so positive and negative parts are
// accumulated apart and subtracted once.
double log_a_frac(double q, double sigma, double alpha) {
  double pos0 = -kInf, neg0 = -kInf, pos1 = -kInf, neg1 = -kInf;
  const double z0 = sigma * sigma * std::log(1 / q - 1) + 0.5;
  const double s2 = sigma * sigma;
  double log_abs_coef = 0;  // log |C(alpha, k)|, built incrementally
  bool coef_positive = true;
  for (int k = 0; k < 100000; ++k) {
    if (k > 0) {
      const double f = (alpha - (k - 1)) / k;  // C(alpha, k) = C(alpha, k-1) (alpha-k+1)/k
      log_abs_coef += std::log(std::fabs(f));
      if (f < 0) coef_positive = !coef_positive;
    }
    const double j = alpha - k;
    const double log_t0 = log_abs_coef + k * std::log(q) + j * std::log1p(-q);
    const double log_t1 = log_abs_coef + j * std::log(q) + k * std::log1p(-q);
    const double log_e0 = std::log(0.5) + log_erfc((k - z0) / (M_SQRT2 * sigma));
    const double log_e1 = std::log(0.5) + log_erfc((z0 - j) / (M_SQRT2 * sigma));
    const double log_s0 = log_t0 + (double(k) * k - k) / (2 * s2) + log_e0;
    const double log_s1 = log_t1 + (j * j - j) / (2 * s2) + log_e1;
    if (coef_positive) {
      pos0 = log_add(pos0, log_s0);
      pos1 = log_add(pos1, log_s1);
    } else {
      neg0 = log_add(neg0, log_s0);
      neg1 = log_add(neg1, log_s1);
    }
    if (std::max(log_s0, log_s1) < -30) break;
  }
  return log_add(log_sub(pos0, neg0), log_sub(pos1, neg1));
}

}  // namespace

Conversion parse_conversion(const std::string& s) {
  if (s == "classic") return Conversion::classic;
  if (s == "improved") return Conversion::improved;
  fail("--conversion must be classic or improved (got '", s, "')");
}

std::vector<double> default_orders() {
  std::vector<double> o;
  for (int x = 1; x < 100; ++x) o.push_back(1 + x / 10.0);
  for (int a = 12; a < 64; ++a) o.push_back(a);
  return o;
}

double sgm_rdp(double q, double sigma, double alpha) {
  STRATA_CHECK(sigma > 0, "noise multiplier must be > 0 (got ", sigma, ")");
  STRATA_CHECK(q >= 0 && q <= 1, "sampling rate must be in [0, 1] (got ", q, ")");
  STRATA_CHECK(alpha > 1, "Renyi order must be > 1 (got ", alpha, ")");
  if (q == 0) return 0;
  if (q == 1) return alpha / (2 * sigma * sigma);
  if (std::isinf(alpha)) return kInf;
  const bool integer = alpha == std::floor(alpha) && alpha < 1e6;
  const double log_a = integer ? log_a_int(q, sigma, int(alpha)) : log_a_frac(q, sigma, alpha);
  return log_a / (alpha - 1);
}

PrivacySpent rdp_to_dp(const std::vector<double>& orders, const std::vector<double>& rdp,
                       double delta, Conversion conv) {
  STRATA_CHECK(orders.size() == rdp.size() && !orders.empty(),
               "accountant: ", orders.size(), " orders but ", rdp.size(), " RDP values");
  STRATA_CHECK(delta > 0 && delta < 1, "--delta must be in (0, 1) (got ", delta, ")");
  PrivacySpent best{kInf, 0};
  for (size_t i = 0; i < orders.size(); ++i) {
    const double a = orders[i];
    double eps;
    if (conv == Conversion::classic)
      eps = rdp[i] - std::log(delta) / (a - 1);
    else
      eps = rdp[i] + std::log((a - 1) / a) - (std::log(delta) + std::log(a)) / (a - 1);
    if (eps < best.epsilon) best = {eps, a};
  }
  best.epsilon = std::max(best.epsilon, 0.0);
  return best;
}

PrivacySpent epsilon(const SgmQuery& query) {
  STRATA_CHECK(query.sigma > 0, "--noise-multiplier must be > 0 (got ", query.sigma, ")");
  STRATA_CHECK(query.q > 0 && query.q <= 1, "sampling rate (batch / samples) must be in (0, 1] (got ",
               query.q, ")");
  STRATA_CHECK(query.steps >= 0, "steps must be >= 0 (got ", query.steps, ")");
  STRATA_CHECK(query.delta > 0 && query.delta < 1, "--delta must be in (0, 1) (got ", query.delta,
               ")");
  std::vector<double> rdp;
  rdp.reserve(query.orders.size());
  for (double a : query.orders) {
    STRATA_CHECK(a > 1, "Renyi orders must be > 1 (got ", a, ")");
    rdp.push_back(double(query.steps) * sgm_rdp(query.q, query.sigma, a));
  }
  return rdp_to_dp(query.orders, rdp, query.delta, query.conversion);
}

double sigma_for_epsilon(SgmQuery query, double target_eps) {
  STRATA_CHECK(target_eps > 0, "--target-epsilon must be > 0 (got ", target_eps, ")");
  auto eps_at = [&](double s) {
    query.sigma = s;
    return epsilon(query).epsilon;
  };
  double lo = 0.01, hi = 1e4;
  STRATA_CHECK(eps_at(hi) <= target_eps, "no noise multiplier up to ", hi, " reaches epsilon ",
               target_eps, " (delta ", query.delta, ", ", query.steps, " steps at q ", query.q, ")");
  if (eps_at(lo) <= target_eps) return lo;
  // epsilon decreases in sigma: keep eps(lo) > target >= eps(hi).
  while (hi - lo > 1e-6 * hi) {
    const double mid = 0.5 * (lo + hi);
    (eps_at(mid) <= target_eps ? hi : lo) = mid;
  }
  return hi;
}

int64_t steps_for_epochs(double epochs, int64_t n, int64_t batch) {
  STRATA_CHECK(n > 0, "--samples must be positive (got ", n, ")");
  STRATA_CHECK(batch > 0 && batch <= n, "--batch must be in [1, --samples = ", n, "] (got ", batch,
               ")");
  STRATA_CHECK(epochs >= 0, "--epochs must be >= 0 (got ", epochs, ")");
  const double steps = std::ceil(epochs * double(n) / double(batch) - 1e-9);
  STRATA_CHECK(std::isfinite(steps) && steps <= 1e12, "--epochs ", epochs, " over ", n, " samples in batches of ",
               batch, " is ", steps, " steps (at most 1e12)");
  return int64_t(steps);
}

}  // namespace strata::fed
