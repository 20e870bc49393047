// Pure logic: shard ranges, mapping wanted runs onto saved ones, retention, durations and interval advice.
#include <cmath>
#include <random>

#include "ckpt/interval.h"
#include "helpers.h"

using namespace ckpt_test;

TEST(CkptRanges, ZeroShardsTileEveryStateSize) {
  for (int64_t psi : {0, 1, 2, 3, 7, 1000, 1001}) {
    for (int n = 1; n <= 8; ++n) {
      int64_t at = 0;
      for (int r = 0; r < n; ++r) {
        Range s = zero_shard(psi, r, n);
        EXPECT_LE(s.size(), shard_elems(psi, n));
        if (s.empty()) continue;
        EXPECT_EQ(s.begin, at) << "psi " << psi << " n " << n << " r " << r;
        at = s.end;
      }
      EXPECT_EQ(at, psi) << "psi " << psi << " n " << n;
    }
  }
}

TEST(CkptRanges, MapRunMatchesBruteForce) {
  // Saved runs: a random tiling of [0, n) of one tensor into runs (some empty) spread over
  // chunks; every wanted run must map element for element, and a hole must be reported.
  std::mt19937_64 gen(7);
  for (int trial = 0; trial < 2000; ++trial) {
    const int64_t n = int64_t(gen() % 60);
    TensorRuns saved;
    std::vector<int64_t> chunk_start;  // global position of each chunk's first element
    for (int64_t at = 0; at < n;) {
      const int64_t len = std::min(n - at, int64_t(gen() % 9));
      saved.runs.push_back({at, len, int(chunk_start.size()), 0});
      chunk_start.push_back(at);
      at += len;
    }
    std::shuffle(saved.runs.begin(), saved.runs.end(), gen);
    saved.sort();
    const int64_t a = n ? int64_t(gen() % uint64_t(n + 1)) : 0;
    const int64_t b = a + int64_t(gen() % uint64_t(n - a + 1));
    std::vector<CopyOp> ops;
    EXPECT_EQ(map_run(saved, a, b - a, 100, &ops), -1);
    std::vector<int64_t> src(static_cast<size_t>(b - a), -1);
    for (const CopyOp& op : ops)
      for (int64_t k = 0; k < op.count; ++k) {
        ASSERT_EQ(src[size_t(op.dst_pos - 100 + k)], -1) << "element written twice";
        src[size_t(op.dst_pos - 100 + k)] = chunk_start[size_t(op.chunk)] + op.chunk_pos + k;
      }
    for (int64_t i = a; i < b; ++i) EXPECT_EQ(src[size_t(i - a)], i);
  }
  TensorRuns holed;
  holed.runs = {{0, 4, 0, 0}, {6, 3, 1, 0}};
  std::vector<CopyOp> ops;
  EXPECT_EQ(map_run(holed, 2, 6, 0, &ops), 4);  // elements 4 and 5 are missing
  EXPECT_EQ(holed.tiling_problem({9}, [](int c) { return cat("chunk ", c); }),
            "no saved chunk holds elements [4]..[5] (2 elements)");
  holed.runs = {{0, 4, 0, 0}, {3, 6, 1, 0}};
  EXPECT_EQ(holed.tiling_problem({3, 3}, [](int c) { return cat("chunk ", c); }),
            "elements from [1, 0] are saved twice (chunk 0 and chunk 1)");
}

TEST(CkptRetention, KeepsLastKAndEveryNthAndNeverLatest) {
  std::vector<int64_t> steps = {10, 20, 30, 40, 50, 60, 70};
  EXPECT_EQ(steps_to_delete(steps, 70, 2, 0), (std::vector<int64_t>{10, 20, 30, 40, 50}));
  EXPECT_EQ(steps_to_delete(steps, 70, 2, 30), (std::vector<int64_t>{10, 20, 40, 50}));
  EXPECT_EQ(steps_to_delete(steps, 70, 0, 0), std::vector<int64_t>{});  // keep all
  // Newer than latest (a save that crashed before moving the pointer): untouched.
  EXPECT_EQ(steps_to_delete(steps, 40, 1, 0), (std::vector<int64_t>{10, 20, 30}));
  EXPECT_EQ(steps_to_delete({5}, 5, 1, 0), std::vector<int64_t>{});
}

TEST(CkptInterval, ParsesDurations) {
  EXPECT_DOUBLE_EQ(parse_duration("4h"), 14400);
  EXPECT_DOUBLE_EQ(parse_duration("30m"), 1800);
  EXPECT_DOUBLE_EQ(parse_duration("90s"), 90);
  EXPECT_DOUBLE_EQ(parse_duration("90"), 90);
  EXPECT_DOUBLE_EQ(parse_duration("250ms"), 0.25);
  EXPECT_DOUBLE_EQ(parse_duration("1h30m"), 5400);
  EXPECT_DOUBLE_EQ(parse_duration("1.5h"), 5400);
  EXPECT_DOUBLE_EQ(parse_duration("2d"), 172800);
  for (const char* bad : {"", "h", "4x", "-3s", "4h!", "abc", "1e999s"})
    EXPECT_THROW(parse_duration(bad), Error) << bad;
  EXPECT_EQ(format_duration(5400), "1h30m");
  EXPECT_EQ(format_duration(0.25), "250ms");
}

TEST(CkptInterval, YoungAndDalyFigures) {
  // δ = 2 s, M = 4 h: Young sqrt(2·2·14400) = 240 s; Daly adds its correction and subtracts δ.
  IntervalAdvice a = advise_interval(2, 14400, 3, 0.5);
  EXPECT_NEAR(a.young_s, 240.0, 1e-9);
  const double r = 2.0 / (2 * 14400);
  EXPECT_NEAR(a.daly_s, 240.0 * (1 + std::sqrt(r) / 3 + r / 9) - 2, 1e-9);
  EXPECT_EQ(a.every_steps, std::llround(a.daly_s / 0.5));
  EXPECT_NEAR(a.loss_per_failure_s, a.daly_s / 2 + 3, 1e-9);
  EXPECT_GT(a.waste_fraction, 0);
  EXPECT_LT(a.waste_fraction, 0.05);
  EXPECT_NE(a.text().find("Daly"), std::string::npos);
  EXPECT_EQ(a.mem_every, 0);
  EXPECT_EQ(a.text().find("in-memory"), std::string::npos);
  EXPECT_TRUE(a.to_json()["mem_loss_per_failure_s"].is_null());
  // In-memory copies every 2 steps of 0.5 s: at most 2 steps, plus the restart.
  const IntervalAdvice m = advise_interval(2, 14400, 3, 0.5, 2);
  EXPECT_NEAR(m.mem_loss_per_failure_s, 2 * 0.5 + 3, 1e-12);
  EXPECT_EQ(m.to_json()["mem_every"], 2);
  EXPECT_NEAR(m.to_json()["mem_loss_per_failure_s"].get<double>(), 4, 1e-12);
  EXPECT_NE(m.text().find("with in-memory copies every 2 step(s): 4s lost per failure"), std::string::npos)
      << m.text();
  EXPECT_EQ(advise_interval(2, 14400, 3, 0, 2).mem_every, 0) << "no step time: no in-memory figure";
  // A restart from memory of its own length.
  EXPECT_NEAR(advise_interval(2, 14400, 3, 0.5, 2, 1.25).mem_loss_per_failure_s, 2 * 0.5 + 1.25, 1e-12);
  // Live recovery: the same K·t, its own R; absent unless given.
  const IntervalAdvice live = advise_interval(2, 14400, 3, 0.5, 2, 1.25, 0.75);
  EXPECT_NEAR(live.live_loss_per_failure_s, 2 * 0.5 + 0.75, 1e-12);
  EXPECT_NE(live.text().find("with --recovery live: "), std::string::npos) << live.text();
  EXPECT_EQ(advise_interval(2, 14400, 3, 0.5, 2, 1.25).live_loss_per_failure_s, 0);
  EXPECT_TRUE(advise_interval(2, 14400, 3, 0.5, 2, 1.25).to_json()["live_loss_per_failure_s"].is_null());
  EXPECT_THROW(advise_interval(2, 14400, 3, 0.5, -1), Error);
  // A checkpoint slower than twice the MTBF: Daly says checkpoint every M.
  EXPECT_DOUBLE_EQ(advise_interval(100, 10).daly_s, 10);
  EXPECT_THROW(advise_interval(1, 0), Error);
  EXPECT_THROW(advise_interval(-1, 10), Error);
}
