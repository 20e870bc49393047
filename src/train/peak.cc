#include "train/peak.h"

#include <cblas.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <vector>

#include "core/env.h"
#include "core/timer.h"
#include "kernels/gemm.h"
#include "kernels/gemm_bf16.h"
#include "kernels/isa.h"
#include "nlohmann/json.hpp"

namespace strata::train {

static const EnvVar kPeakCache("STRATA_PEAK_CACHE", "",
                               "file caching the measured sgemm peak used for MFU "
                               "(default $XDG_CACHE_HOME/strata/peak.json)");

namespace {

// Best GFLOP/s of single calls of the given n^3 GEMMs, robustly: rounds of about
// seconds / 5, each a run of single calls alternating the GEMMs (a noisy neighbour hurts one
// sample of each, not the estimate), until two rounds in a row improve the best by less than
// 2%: at least 3 rounds, at most 3 x seconds.
template <typename... G>
double best_of(double seconds, int n, G&... gemms) {
  (gemms(), ...);  // warm-up: thread pool start, page faults, packing buffers
  const double flops = 2.0 * double(n) * n * n;
  const double round_s = seconds / 5;
  double best = 0;
  int rounds = 0, flat = 0;
  Stopwatch total;
  auto sample = [&](auto& gemm, double& round_best) {
    Stopwatch sw;
    gemm();
    round_best = std::max(round_best, flops / sw.seconds() * 1e-9);
  };
  while (rounds < 3 || (flat < 2 && total.seconds() < 3 * seconds)) {
    double round_best = 0;
    Stopwatch round;
    do {
      (sample(gemms, round_best), ...);
    } while (round.seconds() < round_s);
    flat = round_best > best * 1.02 ? 0 : flat + 1;
    best = std::max(best, round_best);
    ++rounds;
  }
  return best;
}

}  // namespace

double measure_sgemm_gflops(double seconds, int n) {
  // Plain vectors, not tracked Buffers: the probe is not part of the run's memory.
  size_t elems = size_t(n) * size_t(n);
  std::vector<float> a(elems), b(elems), c(elems);
  float* pa = a.data();
  float* pb = b.data();
  for (size_t i = 0; i < elems; ++i) {
    pa[i] = float(i % 7) * 0.01f;
    pb[i] = float(i % 5) * 0.02f;
  }
  auto blas = [&] {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, pa, n, pb, n, 0.0f,
                c.data(), n);
  };
  auto own = [&] {
    kernels::gemm(kernels::Op::N, kernels::Op::N, n, n, n, 1.0f, pa, n, pb, n, 0.0f, c.data(), n);
  };
  return best_of(seconds, n, blas, own);
}

double measure_bf16_gflops(double seconds, int n) {
  size_t elems = size_t(n) * size_t(n);
  std::vector<float> a(elems), b(elems), c(elems);
  for (size_t i = 0; i < elems; ++i) {
    a[i] = float(i % 7) * 0.01f;
    b[i] = float(i % 5) * 0.02f;
  }
  auto own = [&] {
    kernels::gemm(kernels::Op::N, kernels::Op::N, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f,
                  c.data(), n);
  };
  auto bf16 = [&] {
    kernels::gemm_bf16(kernels::Op::N, kernels::Op::N, n, n, n, 1.0f, kernels::Mat(a.data(), n),
                       kernels::Mat(b.data(), n), 0.0f, c.data(), n);
  };
  return best_of(seconds, n, own, bf16);
}

bool Peak::raise(double achieved, int64_t step) {
  if (!(achieved > gflops)) return false;
  if (raised_at == 0) {
    initial = gflops;
    source += ", raised by step ";
  } else {
    source.erase(source.rfind(' ') + 1);
  }
  source += std::to_string(step);
  gflops = achieved;
  raised_at = step;
  return true;
}

std::string Peak::label() const {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.1f GFLOP/s (", gflops);
  return buf + (raised_at ? "raised at step " + std::to_string(raised_at) : origin) + ")";
}

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("model name", 0) == 0) {
      auto colon = line.find(':');
      if (colon != std::string::npos) {
        std::string name = line.substr(colon + 1);
        name.erase(0, name.find_first_not_of(' '));
        return name;
      }
    }
  }
  return "unknown cpu";
}

std::string peak_cache_path() {
  if (kPeakCache.is_set()) return kPeakCache.get();
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg)
    return std::string(xdg) + "/strata/peak.json";
  if (const char* home = std::getenv("HOME"); home && *home)
    return std::string(home) + "/.cache/strata/peak.json";
  return "";
}

std::string peak_cache_key(int threads, const std::string& bf16_path) {
  return cpu_model() + "|threads=" + std::to_string(threads) + "|probe=3" + "|isa=" +
         kernels::isa_name(kernels::isa()) +
         (bf16_path.empty() ? "" : "|bf16=" + bf16_path);
}

static nlohmann::json read_cache(const std::string& path) {
  std::ifstream in(path);
  if (!in) return nlohmann::json::object();
  nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  return j.is_object() ? j : nlohmann::json::object();
}

// Write then rename, so concurrent runs never read half a file; an unwritable cache only
// costs a re-measurement.
static void write_cache(const std::string& path, const nlohmann::json& cache) {
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
  std::string tmp = path + ".tmp" + std::to_string(::getpid());
  std::ofstream out(tmp);
  out << cache.dump(2) << "\n";
  out.close();
  if (out.fail() || (std::filesystem::rename(tmp, path, ec), ec)) std::filesystem::remove(tmp, ec);
}

Peak machine_peak(int threads, double override_gflops, double probe_seconds, bool bf16) {
  const kernels::GemmPath gp = bf16 ? kernels::bf16_gemm_path() : kernels::GemmPath::fp32;
  const std::string bf16_path = gp == kernels::GemmPath::fp32 ? "" : kernels::gemm_path_name(gp);
  const std::string kind = bf16_path.empty() ? "sgemm" : "bf16 " + bf16_path;
  if (override_gflops > 0) return {override_gflops, "flag", "flag", kind, bf16_path};
  std::string path = peak_cache_path();
  std::string key = peak_cache_key(threads, bf16_path);
  nlohmann::json cache = path.empty() ? nlohmann::json::object() : read_cache(path);
  auto cached = [&](const std::string& k) {
    auto it = cache.find(k);
    return it != cache.end() && it->is_number() ? std::max(0.0, it->get<double>()) : 0.0;
  };
  // The bf16 probe takes the best of the bf16 and the fp32 GEMM, so a bf16 peak is never
  // below the sgemm peak of the same thread count: a cached bf16 entry under it was probed
  // under load (it would read MFU high) and is measured again, and a new measurement under
  // load is raised to it.
  const double floor = bf16_path.empty() ? 0.0 : cached(peak_cache_key(threads));
  if (const double c = cached(key); c > 0 && c >= floor)
    return {c, "cache " + path, "cached", kind, bf16_path};
  double gflops = bf16_path.empty() ? measure_sgemm_gflops(probe_seconds)
                                    : std::max(floor, measure_bf16_gflops(probe_seconds));
  if (!path.empty()) {
    cache[key] = gflops;
    write_cache(path, cache);
  }
  return {gflops, "measured", "measured now", kind, bf16_path};
}

void record_peak(int threads, double gflops, const std::string& bf16_path) {
  const std::string path = peak_cache_path();
  if (path.empty() || !(gflops > 0)) return;
  nlohmann::json cache = read_cache(path);
  const std::string key = peak_cache_key(threads, bf16_path);
  auto it = cache.find(key);
  if (it != cache.end() && it->is_number() && it->get<double>() >= gflops) return;
  cache[key] = gflops;
  write_cache(path, cache);
}

}  // namespace strata::train
