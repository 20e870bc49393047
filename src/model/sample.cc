#include "model/sample.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <vector>

namespace strata::model {

int32_t sample_token(const float* z, int vocab, const SampleConfig& s, Rng& rng) {
  if (s.temperature <= 0) return int32_t(std::max_element(z, z + vocab) - z);
  float cut = -INFINITY;
  if (s.top_k > 0 && s.top_k < vocab) {
    std::vector<float> sorted(z, z + vocab);
    std::nth_element(sorted.begin(), sorted.begin() + (s.top_k - 1), sorted.end(), std::greater<float>());
    cut = sorted[size_t(s.top_k - 1)];
  }
  const double mx = *std::max_element(z, z + vocab);
  thread_local std::vector<double> p;
  p.resize(size_t(vocab));
  double sum = 0;
  for (int v = 0; v < vocab; ++v)
    sum += p[size_t(v)] = z[v] >= cut ? std::exp((double(z[v]) - mx) / s.temperature) : 0.0;
  const double u = rng.uniform_double() * sum;
  double acc = 0;
  int32_t last = 0;
  for (int v = 0; v < vocab; ++v) {
    if (p[size_t(v)] == 0) continue;
    last = v;
    if ((acc += p[size_t(v)]) > u) return v;
  }
  return last;
}

}  // namespace strata::model
