// The sgemm peak probe and its per-machine cache.
#include <gtest/gtest.h>
#include <omp.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "kernels/gemm_bf16.h"
#include "nlohmann/json.hpp"
#include "train/peak.h"

namespace fs = std::filesystem;
using namespace strata::train;

namespace {

// Points the cache at a private file for the test's lifetime.
struct CacheFile {
  fs::path path;
  explicit CacheFile(const std::string& name)
      : path(fs::temp_directory_path() /
             ("strata_peak_" + name + "_" + std::to_string(::getpid())) / "peak.json") {
    fs::remove_all(path.parent_path());
    ::setenv("STRATA_PEAK_CACHE", path.c_str(), 1);
  }
  ~CacheFile() {
    ::unsetenv("STRATA_PEAK_CACHE");
    fs::remove_all(path.parent_path());
  }
};

}  // namespace

TEST(Peak, ProbeMeasuresPositiveRate) {
  double g = measure_sgemm_gflops(/*seconds=*/0.05, /*n=*/128);
  EXPECT_GT(g, 0.01);
  EXPECT_LT(g, 1e6);
}

TEST(Peak, FlagOverridesWithoutMeasuring) {
  CacheFile cache("flag");
  Peak p = machine_peak(1, 123.5);
  EXPECT_EQ(p.gflops, 123.5);
  EXPECT_EQ(p.source, "flag");
  EXPECT_FALSE(fs::exists(cache.path));
}

TEST(Peak, MeasuresOnceThenReadsCache) {
  CacheFile cache("roundtrip");
  EXPECT_EQ(peak_cache_path(), cache.path.string());
  Peak first = machine_peak(1, 0, 0.1);
  EXPECT_EQ(first.source, "measured");
  EXPECT_GT(first.gflops, 0);
  ASSERT_TRUE(fs::exists(cache.path));
  nlohmann::json j = nlohmann::json::parse(std::ifstream(cache.path));
  std::string key = peak_cache_key(1);
  ASSERT_TRUE(j.contains(key)) << j.dump();
  EXPECT_EQ(j[key].get<double>(), first.gflops);

  Peak second = machine_peak(1, 0, 0.1);
  EXPECT_EQ(second.gflops, first.gflops);
  EXPECT_EQ(second.source, "cache " + cache.path.string());
}

TEST(Peak, CorruptCacheIsRemeasuredAndOtherKeysKept) {
  CacheFile cache("corrupt");
  fs::create_directories(cache.path.parent_path());
  std::ofstream(cache.path) << "{not json";
  EXPECT_EQ(machine_peak(1, 0, 0.1).source, "measured");
  // A different thread count is a different key; existing keys survive.
  std::ofstream(cache.path) << "{\"other cpu|threads=4\": 99.0}";
  nlohmann::json before = nlohmann::json::parse(std::ifstream(cache.path));
  machine_peak(1, 0, 0.1);
  nlohmann::json after = nlohmann::json::parse(std::ifstream(cache.path));
  EXPECT_EQ(after["other cpu|threads=4"], 99.0);
  EXPECT_EQ(after.size(), 2u);
}

// A cached peak that a run has beaten is raised in the cache; a lower figure never replaces
// a higher one; other entries stay.
TEST(Peak, RecordRaisesOnlyThatEntry) {
  CacheFile cache("record");
  Peak one = machine_peak(1, 0, 0.1);
  Peak two = machine_peak(2, 0, 0.1);
  record_peak(1, one.gflops * 3);
  record_peak(1, one.gflops * 2);  // lower than the entry: kept as is
  nlohmann::json j = nlohmann::json::parse(std::ifstream(cache.path));
  EXPECT_DOUBLE_EQ(j[peak_cache_key(1)].get<double>(), one.gflops * 3) << j.dump();
  EXPECT_DOUBLE_EQ(j[peak_cache_key(2)].get<double>(), two.gflops) << j.dump();
  Peak again = machine_peak(1, 0, 0.1);
  EXPECT_EQ(again.origin, "cached");
  EXPECT_DOUBLE_EQ(again.gflops, one.gflops * 3);
}

TEST(Peak, RaiseOnlyUpwardsAndSaysSo) {
  Peak p;
  p.gflops = 50.0;
  p.source = "cache /x/peak.json";
  p.origin = "cached";
  EXPECT_EQ(p.label(), "50.0 GFLOP/s (cached)");
  EXPECT_FALSE(p.raise(40.0, 3));
  EXPECT_FALSE(p.raise(NAN, 3));
  EXPECT_EQ(p.raised_at, 0);
  EXPECT_TRUE(p.raise(60.0, 4));
  EXPECT_TRUE(p.raise(61.0, 9));
  EXPECT_DOUBLE_EQ(p.gflops, 61.0);
  EXPECT_DOUBLE_EQ(p.initial, 50.0);
  EXPECT_EQ(p.source, "cache /x/peak.json, raised by step 9");
  EXPECT_EQ(p.label(), "61.0 GFLOP/s (raised at step 9)");
}

// The probe repeats rounds until the best is stable: never less than one plain measurement's
// worth of rounds, and bounded in time.
TEST(Peak, RobustProbeIsBoundedAndPositive) {
  auto t0 = std::chrono::steady_clock::now();
  double g = measure_sgemm_gflops(/*seconds=*/0.1, /*n=*/128);
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_GT(g, 0.01);
  EXPECT_LT(s, 0.3 + 0.5);  // at most 3 x seconds, plus one round and warm-ups
}

// A bf16 run's peak: on a CPU with a bf16 GEMM path, the bf16 probe under its own key (the
// sgemm entry untouched) and raised alone by record_peak; without one, the sgemm peak.
TEST(Peak, Bf16PeakHasItsOwnKeyAndKind) {
  CacheFile cache("bf16");
  const Peak f = machine_peak(1, 0, 0.1, /*bf16=*/false);
  const Peak h = machine_peak(1, 0, 0.1, /*bf16=*/true);
  EXPECT_EQ(f.kind, "sgemm");
  nlohmann::json j = nlohmann::json::parse(std::ifstream(cache.path));
  if (h.kind == "sgemm") {  // emulated bf16: no bf16 unit on this CPU
    EXPECT_EQ(h.gflops, f.gflops);
    return;
  }
  EXPECT_EQ(h.kind.rfind("bf16 ", 0), 0u) << h.kind;
  const std::string key = peak_cache_key(1, h.kind.substr(5));
  ASSERT_TRUE(j.contains(key)) << j.dump();
  EXPECT_EQ(j[key].get<double>(), h.gflops);
  EXPECT_EQ(j[peak_cache_key(1)].get<double>(), f.gflops);
  EXPECT_EQ(h.bf16_path, h.kind.substr(5));
  record_peak(1, h.gflops * 2, h.bf16_path);
  j = nlohmann::json::parse(std::ifstream(cache.path));
  EXPECT_EQ(j[key].get<double>(), h.gflops * 2);
  EXPECT_EQ(j[peak_cache_key(1)].get<double>(), f.gflops);
}

// A bf16 peak below the sgemm peak of the same thread count was probed under load: a cached
// one is measured again and the result is never below the sgemm entry; one above it is used.
TEST(Peak, Bf16EntryBelowTheSgemmPeakIsRemeasured) {
  const strata::kernels::GemmPath gp = strata::kernels::bf16_gemm_path();
  if (gp == strata::kernels::GemmPath::fp32) GTEST_SKIP() << "no bf16 GEMM path on this CPU";
  CacheFile cache("bf16floor");
  fs::create_directories(cache.path.parent_path());
  const std::string sg = peak_cache_key(1), bf = peak_cache_key(1, gemm_path_name(gp));
  std::ofstream(cache.path) << nlohmann::json{{sg, 1e6}, {bf, 5.0}}.dump();
  Peak low = machine_peak(1, 0, 0.1, true);
  EXPECT_EQ(low.origin, "measured now");
  EXPECT_DOUBLE_EQ(low.gflops, 1e6);  // the probe cannot reach 1e6 GFLOP/s: raised to the floor
  std::ofstream(cache.path) << nlohmann::json{{sg, 1.0}, {bf, 5.0}}.dump();
  Peak ok = machine_peak(1, 0, 0.1, true);
  EXPECT_EQ(ok.origin, "cached");
  EXPECT_DOUBLE_EQ(ok.gflops, 5.0);
}
