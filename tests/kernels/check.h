// Helpers for kernel tests: random data, a per-tensor relative error, and central finite
// differences through a double-precision reference.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <vector>

#include <omp.h>

#include "core/rng.h"

namespace strata::test {

inline std::vector<float> randn(int64_t n, uint64_t stream, float scale = 1.0f) {
  Rng r(1234, stream);
  std::vector<float> v(n);
  for (auto& x : v) x = r.normal() * scale;
  return v;
}

inline std::vector<double> to_double(const std::vector<float>& v) {
  return std::vector<double>(v.begin(), v.end());
}

// max |a - b| / max |b|: the error relative to the tensor's scale (so entries near zero do not
// blow it up). 0 when both are all zero.
template <typename A, typename B>
double rel_err(const A& a, const B& b) {
  double diff = 0, scale = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    diff = std::max(diff, std::fabs(double(a[i]) - double(b[i])));
    scale = std::max(scale, std::fabs(double(b[i])));
  }
  return scale == 0 ? diff : diff / scale;
}

// d f / d x by central differences, f evaluated in double.
inline std::vector<double> numeric_grad(const std::function<double(const std::vector<double>&)>& f,
                                        std::vector<double> x, double eps = 1e-6) {
  std::vector<double> g(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const double keep = x[i];
    x[i] = keep + eps;
    const double up = f(x);
    x[i] = keep - eps;
    const double down = f(x);
    x[i] = keep;
    g[i] = (up - down) / (2 * eps);
  }
  return g;
}

inline double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// run() (returning a vector) with 1, 2 and 3 OpenMP threads; the thread setting is restored.
template <typename F>
auto for_thread_counts(F run) {
  const int saved = omp_get_max_threads();
  std::vector<decltype(run())> out;
  for (int th : {1, 2, 3}) {
    omp_set_num_threads(th);
    out.push_back(run());
  }
  omp_set_num_threads(saved);
  return out;
}

}  // namespace strata::test
