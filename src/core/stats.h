// Summary statistics of a sample, one definition for the whole project.
// median: the middle value, or the mean of the two middle values when the count is even;
// percentile(v, p): linear interpolation between closest ranks (numpy's default), p in [0, 100].
// The empty sample gives 0 everywhere, so that a summary of a run with no timed steps reads 0.
#pragma once
#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

namespace strata {

inline double mean(const std::vector<double>& v) {
  return v.empty() ? 0 : std::accumulate(v.begin(), v.end(), 0.0) / double(v.size());
}

inline double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double at = std::clamp(p, 0.0, 100.0) / 100.0 * double(v.size() - 1);
  const size_t lo = size_t(std::floor(at)), hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (at - double(lo)) * (v[hi] - v[lo]);
}

inline double median(std::vector<double> v) { return percentile(std::move(v), 50); }

}  // namespace strata
