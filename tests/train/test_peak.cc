// The sgemm peak probe and its per-machine cache.
#include <gtest/gtest.h>
#include <omp.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

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

// A cached peak that a run has beaten is dropped (the next run measures again); other
// entries stay.
TEST(Peak, ForgettingDropsOnlyThatEntry) {
  CacheFile cache("forget");
  machine_peak(1, 0, 0.1);
  machine_peak(2, 0, 0.1);
  forget_cached_peak(1);
  nlohmann::json j = nlohmann::json::parse(std::ifstream(cache.path));
  EXPECT_FALSE(j.contains(peak_cache_key(1))) << j.dump();
  EXPECT_TRUE(j.contains(peak_cache_key(2))) << j.dump();
  EXPECT_EQ(machine_peak(1, 0, 0.1).source, "measured");
}

// A bf16 run's peak: on a CPU with a bf16 GEMM path, the bf16 probe under its own key (the
// sgemm entry untouched) and dropped alone by forget_cached_peak;
// without one, the sgemm peak.
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
  forget_cached_peak(1, h.kind.substr(5));
  j = nlohmann::json::parse(std::ifstream(cache.path));
  EXPECT_FALSE(j.contains(key));
  EXPECT_TRUE(j.contains(peak_cache_key(1)));
}
