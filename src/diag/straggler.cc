#include "diag/straggler.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "core/error.h"
#include "core/stats.h"
#include "nlohmann/json.hpp"

namespace strata::diag {

namespace {

double round1(double x) { return std::round(x * 10.0) / 10.0; }

}  // namespace

StragglerCheck find_stragglers(const std::vector<double>& compute_s, double threshold_pct, int64_t step) {
  STRATA_CHECK(!compute_s.empty(), "straggler check needs the compute time of at least one rank");
  STRATA_CHECK(threshold_pct >= 0 && std::isfinite(threshold_pct),
               "straggler threshold must be a non-negative percentage, got ", threshold_pct);
  for (size_t r = 0; r < compute_s.size(); ++r)
    STRATA_CHECK(compute_s[r] >= 0 && std::isfinite(compute_s[r]), "rank ", r,
                 " reported an invalid compute time ", compute_s[r], " s");
  StragglerCheck c;
  c.step = step;
  c.median_s = median(compute_s);
  if (c.median_s <= 0) return c;  // nothing measured yet
  for (size_t r = 0; r < compute_s.size(); ++r) {
    double over = 100.0 * (compute_s[r] - c.median_s) / c.median_s;
    if (over > threshold_pct) c.slow.push_back({int(r), compute_s[r], over});
  }
  std::sort(c.slow.begin(), c.slow.end(),
            [](auto& a, auto& b) { return a.over_median_pct > b.over_median_pct; });
  return c;
}

bool straggler_check_due(int64_t step, int every_steps) {
  return every_steps > 0 && step > 0 && step % every_steps == 0;
}

std::string straggler_log_line(const StragglerCheck& c) {
  if (c.slow.empty()) return "";
  std::string s = cat("stragglers at step ", c.step, ": ");
  char buf[160];
  for (size_t i = 0; i < c.slow.size(); ++i) {
    const Straggler& x = c.slow[i];
    std::snprintf(buf, sizeof buf, "%srank %d compute %.1f ms (+%.1f%% over median %.1f ms)", i ? "; " : "",
                  x.rank, x.compute_s * 1e3, x.over_median_pct, c.median_s * 1e3);
    s += buf;
  }
  return s;
}

void add_straggler_metrics(const StragglerCheck& c, nlohmann::json& record) {
  record["compute_median_ms"] = round1(c.median_s * 1e3);
  nlohmann::json list = nlohmann::json::array();
  for (const Straggler& x : c.slow)
    list.push_back({{"rank", x.rank}, {"compute_ms", round1(x.compute_s * 1e3)},
                    {"over_median_pct", round1(x.over_median_pct)}});
  record["stragglers"] = list;
}

}  // namespace strata::diag
