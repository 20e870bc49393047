// Renyi-DP accountant for the sampled Gaussian mechanism (SGM), the analysis behind DP-SGD and
// DP-FedAvg.
//
// Terms.
//   q       sampling rate: each record (example, or client for DP-FedAvg) joins a step's batch
//           independently with probability q (the standard accountants approximate a
//           fixed batch B of N by q = B / N, and so do we).
//   sigma   noise multiplier: the Gaussian noise's standard deviation divided by the
//           sensitivity (the clipping norm S).
//   alpha   Renyi order > 1. One SGM step is (alpha, RDP(alpha))-RDP with
//           RDP(alpha) = log(A_alpha) / (alpha - 1),
//           A_alpha = E_{z ~ N(0, sigma^2)} [((1 - q) + q exp((2z - 1) / (2 sigma^2)))^alpha]
//           (Mironov, Talwar, Zhang 2019). Integer alpha: the binomial sum of their Sec. 3.2;
//           fractional alpha: the two erfc series of Sec. 3.3, both in log space, as in
//           TF-Privacy's rdp_accountant and Opacus. RDP composes additively over steps.
//   eps     (eps, delta)-DP from RDP, minimised over the orders:
//           classic   rdp + log(1/delta) / (alpha - 1)                    (Mironov 2017)
//           improved  rdp + log((alpha-1)/alpha) - (log delta + log alpha) / (alpha - 1)
//                     (Balle et al. 2020, Thm. 21; what Opacus and TF-Privacy print now)
// Cost: O(alpha) terms per integer order, a series that stops when terms fall below e^-30
// for fractional orders; the default 150 orders take well under a millisecond.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace strata::fed {

enum class Conversion { classic, improved };
Conversion parse_conversion(const std::string& s);  // "classic" | "improved"; throws otherwise

// 1.1, 1.2, ..., 10.9, 12, 13, ..., 63: Opacus' DEFAULT_ALPHAS and TF-Privacy's
// compute_dp_sgd_privacy orders.
std::vector<double> default_orders();

// RDP of one SGM step at order alpha (> 1). q in [0, 1], sigma > 0.
double sgm_rdp(double q, double sigma, double alpha);

struct PrivacySpent {
  double epsilon = 0;
  double order = 0;  // the order that gave the minimum
};

// RDP per order (already composed over steps) to (eps, delta).
PrivacySpent rdp_to_dp(const std::vector<double>& orders, const std::vector<double>& rdp,
                       double delta, Conversion conv);

// The accountant: steps of the SGM with fixed (q, sigma), composed.
struct SgmQuery {
  double q = 0;
  double sigma = 0;
  int64_t steps = 0;
  double delta = 1e-5;
  Conversion conversion = Conversion::improved;
  std::vector<double> orders = default_orders();
};
// Throws one line naming the bad quantity (sigma <= 0, q outside (0, 1], delta outside (0, 1),
// steps < 0, an order <= 1).
PrivacySpent epsilon(const SgmQuery& query);

// The smallest sigma whose epsilon is <= target_eps (bisection on sigma in [0.01, 1e4]
// until the bracket is 1e-6 relative). Throws when even sigma = 1e4 does not reach it.
double sigma_for_epsilon(SgmQuery query, double target_eps);

// Steps for `epochs` passes over n records in batches of b, as TF-Privacy counts them:
// ceil(epochs * n / b).
int64_t steps_for_epochs(double epochs, int64_t n, int64_t batch);

}  // namespace strata::fed
