// PPO arithmetic (terms in ppo_math.h).
#include "rlhf/ppo_math.h"

#include <algorithm>

namespace strata::rlhf {

void gae(const double* rewards, const double* values, int R, double gamma, double lambda,
         double* advantages, double* returns) {
  double next_adv = 0, next_value = 0;
  for (int t = R - 1; t >= 0; --t) {
    const double delta = rewards[t] + gamma * next_value - values[t];
    next_adv = delta + gamma * lambda * next_adv;
    advantages[t] = next_adv;
    returns[t] = next_adv + values[t];
    next_value = values[t];
  }
}

void whiten(double* x, int64_t n, bool shift_mean) {
  if (n == 0) return;
  double mean = 0;
  for (int64_t i = 0; i < n; ++i) mean += x[i];
  mean /= double(n);
  double var = 0;
  for (int64_t i = 0; i < n; ++i) var += (x[i] - mean) * (x[i] - mean);
  var /= double(n);
  const double inv = 1.0 / std::sqrt(var + 1e-8);
  for (int64_t i = 0; i < n; ++i) x[i] = (x[i] - mean) * inv + (shift_mean ? 0.0 : mean);
}

PolicyTerm policy_term(double logp, double old_logp, double advantage, double clip) {
  const double ratio = std::exp(logp - old_logp);
  const double unclipped = -advantage * ratio;
  const double clipped = -advantage * std::clamp(ratio, 1.0 - clip, 1.0 + clip);
  PolicyTerm t;
  t.clipped = clipped > unclipped;
  t.loss = t.clipped ? clipped : unclipped;
  t.dlogp = t.clipped ? 0.0 : -advantage * ratio;
  return t;
}

ValueTerm value_term(double value, double old_value, double ret, double clip) {
  const double vc = old_value + std::clamp(value - old_value, -clip, clip);
  const double l1 = (value - ret) * (value - ret), l2 = (vc - ret) * (vc - ret);
  ValueTerm t;
  t.clipped = l2 > l1;
  t.loss = 0.5 * (t.clipped ? l2 : l1);
  // Where the clipped term wins, v - old_v lies outside the clip range: no gradient.
  t.dvalue = t.clipped ? 0.0 : value - ret;
  return t;
}

void group_advantages(const double* rewards, int64_t groups, int k, bool scale_by_std, double* adv) {
  for (int64_t g = 0; g < groups; ++g) {
    const double* r = rewards + g * k;
    double mean = 0;
    for (int j = 0; j < k; ++j) mean += r[j];
    mean /= double(k);
    double scale = 1;
    if (scale_by_std) {
      double var = 0;
      for (int j = 0; j < k; ++j) var += (r[j] - mean) * (r[j] - mean);
      scale = 1.0 / (std::sqrt(var / double(k - 1)) + 1e-4);
    }
    for (int j = 0; j < k; ++j) adv[g * k + j] = (r[j] - mean) * scale;
  }
}

void rloo_advantages(const double* rewards, int64_t groups, int k, double* adv) {
  for (int64_t g = 0; g < groups; ++g) {
    const double* r = rewards + g * k;
    double sum = 0;
    for (int j = 0; j < k; ++j) sum += r[j];
    for (int j = 0; j < k; ++j) adv[g * k + j] = r[j] - (sum - r[j]) / double(k - 1);
  }
}

double explained_variance(const std::vector<double>& values, const std::vector<double>& returns) {
  const size_t n = returns.size();
  if (n == 0) return 0;
  auto var = [n](const std::vector<double>& x) {
    double m = 0, v = 0;
    for (double a : x) m += a;
    m /= double(n);
    for (double a : x) v += (a - m) * (a - m);
    return v / double(n);
  };
  std::vector<double> diff(n);
  for (size_t i = 0; i < n; ++i) diff[i] = returns[i] - values[i];
  const double vr = var(returns);
  return vr > 0 ? 1.0 - var(diff) / vr : 0.0;
}

void KlController::update(double kl, int64_t n) {
  if (target_ <= 0) return;
  const double err = std::clamp(kl / target_ - 1.0, -0.2, 0.2);
  beta_ *= 1.0 + err * double(n) / horizon_;
}

}  // namespace strata::rlhf
