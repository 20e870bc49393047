#include "train/spike_guard.h"

#include <cmath>

#include "core/error.h"
#include "train/metrics.h"

namespace strata::train {

void GuardConfig::validate() const {
  STRATA_CHECK(std::isfinite(zscore) && zscore >= 0, "--spike-zscore must be 0 (off) or a "
               "positive number of standard deviations, got ", zscore);
  STRATA_CHECK(window >= 2 && window <= 100000, "--spike-window must be in [2, 100000], got ",
               window);
  STRATA_CHECK(max_skipped >= 0, "--max-skipped-steps must not be negative, got ", max_skipped);
}

SpikeGuard::Stat SpikeGuard::stat(const std::deque<double>& v) const {
  Stat s;
  for (double x : v) s.mean += x;
  s.mean /= double(v.size());
  double ss = 0;
  for (double x : v) ss += (x - s.mean) * (x - s.mean);
  s.sd = std::sqrt(ss / double(v.size() - 1));
  return s;
}

std::string SpikeGuard::spike(const char* what, double x, const std::deque<double>& history) const {
  if (cfg_.zscore <= 0 || int(history.size()) < std::min(cfg_.min_history, cfg_.window)) return "";
  const Stat s = stat(history);
  const double sd = std::max(s.sd, 1e-3 * std::abs(s.mean));
  const double z = (x - s.mean) / sd;
  if (z <= cfg_.zscore) return "";
  return fmt("%s %.6g is %.1f standard deviations above the mean %.6g of the last %zu steps "
             "(--spike-zscore %g)",
             what, x, z, s.mean, history.size(), cfg_.zscore);
}

std::string SpikeGuard::verdict(double loss, double norm) const {
  if (!std::isfinite(loss) || !std::isfinite(norm)) {
    if (!cfg_.skip_nonfinite) return "";  // the caller stops the run
    return fmt("%s is %g (--skip-nonfinite)", std::isfinite(loss) ? "gradient norm" : "loss",
               std::isfinite(loss) ? norm : loss);
  }
  std::string why = spike("loss", loss, losses_);
  if (why.empty()) why = spike("gradient norm", norm, norms_);
  return why;
}

void SpikeGuard::accepted(double loss, double norm) {
  losses_.push_back(loss);
  norms_.push_back(norm);
  if (int(losses_.size()) > cfg_.window) {
    losses_.pop_front();
    norms_.pop_front();
  }
}

void SpikeGuard::skipped(int64_t step, const std::string& why) {
  ++skips_;
  STRATA_CHECK(skips_ <= cfg_.max_skipped, "stopping at step ", step, ": ", skips_,
               " steps skipped, more than --max-skipped-steps ", cfg_.max_skipped,
               " (the last: ", why, ")");
}

}  // namespace strata::train
