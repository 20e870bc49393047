// The bandwidth doctor: throttle specs and thresholds (pure), and end to end on 3 ranks
// with one link throttled, which it must name.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "core/error.h"
#include "diag/net_doctor.h"
#include "test_util.h"

using namespace strata::diag;

namespace {

// n ranks, every pair at `bw` GB/s and 10 us, collectives at `busbw`.
NetResult uniform(int n, double bw, double busbw) {
  NetResult r;
  r.world = n;
  r.backend = "shm";
  r.p2p_bytes = 1 << 20;
  r.bw_gbps.assign(n, std::vector<double>(n, bw));
  r.latency_us.assign(n, std::vector<double>(n, 10.0));
  for (int i = 0; i < n; ++i) r.bw_gbps[i][i] = r.latency_us[i][i] = 0;
  for (const char* op : {"allreduce", "allgather", "reducescatter", "alltoall"})
    r.collectives.push_back({op, 16u << 20, 100.0, busbw, busbw});
  return r;
}

std::vector<std::string> flagged(const NetVerdict& v) {
  std::vector<std::string> out;
  for (auto& f : v.flags) out.push_back(f.what);
  return out;
}

}  // namespace

TEST(NetDoctor, ParsesLinkThrottles) {
  auto t = parse_link_throttle("0-2:0.25,3-1:0.5");
  ASSERT_EQ(t.size(), 2u);
  EXPECT_DOUBLE_EQ(throttle_factor(t, 0, 2), 0.25);
  EXPECT_DOUBLE_EQ(throttle_factor(t, 2, 0), 0.25);
  EXPECT_DOUBLE_EQ(throttle_factor(t, 1, 3), 0.5);
  EXPECT_DOUBLE_EQ(throttle_factor(t, 0, 1), 1.0);
  EXPECT_DOUBLE_EQ(slowest_factor(t, 3), 0.25);
  EXPECT_DOUBLE_EQ(slowest_factor(t, 2), 1.0);  // neither link lies within ranks 0-1
  EXPECT_TRUE(parse_link_throttle("").empty());
  for (const char* bad : {"0-2", "0-2:0", "0-2:1.5", "1-1:0.5", "a-b:0.5", "0-2:0.5x", "0:2-0.5"})
    EXPECT_THROW(parse_link_throttle(bad), strata::Error) << bad;
  EXPECT_THROW(parse_link_throttle("0-5:0.5", 3), strata::Error);
}

TEST(NetDoctor, HealthyMatrixHasNoFlags) {
  NetVerdict v = judge_net(uniform(4, 10.0, 5.0), 0.5, 0);
  EXPECT_TRUE(v.flags.empty());
  EXPECT_DOUBLE_EQ(v.median_pair_bw, 10.0);
}

TEST(NetDoctor, SlowPairIsFlaggedAgainstTheMedian) {
  NetResult r = uniform(4, 10.0, 5.0);
  r.bw_gbps[1][3] = r.bw_gbps[3][1] = 4.9;     // below 0.5 x 10
  r.bw_gbps[0][2] = r.bw_gbps[2][0] = 5.1;     // above
  r.latency_us[0][1] = r.latency_us[1][0] = 25;  // above 10 / 0.5
  NetVerdict v = judge_net(r, 0.5, 0);
  EXPECT_EQ(flagged(v), (std::vector<std::string>{"pair 0-1", "pair 1-3"}));
  EXPECT_NE(v.flags[1].text.find("pair 1-3: bandwidth 4.90 GB/s, 0.49x the median pair (10.00 GB/s)"),
            std::string::npos)
      << v.flags[1].text;
  EXPECT_NE(v.flags[0].text.find("latency"), std::string::npos);
}

TEST(NetDoctor, CollectivesAgainstMedianAndExpected) {
  NetResult r = uniform(3, 10.0, 5.0);
  r.collectives[3].busbw_gbps = 2.0;  // alltoall below 0.5 x median 5
  EXPECT_EQ(flagged(judge_net(r, 0.5, 0)), std::vector<std::string>{"alltoall"});
  // Expected 12 GB/s: every collective (5 < 6) flagged; pairs at 10 are not.
  EXPECT_EQ(judge_net(r, 0.5, 12.0).flags.size(), 4u + 1u);
  // Two ranks: no median to compare against, only the expected figure.
  EXPECT_TRUE(judge_net(uniform(2, 1.0, 0.1), 0.5, 0).flags.empty());
  EXPECT_EQ(flagged(judge_net(uniform(2, 1.0, 9.0), 0.5, 4.0)), std::vector<std::string>{"pair 0-1"});
  EXPECT_THROW(judge_net(r, 0, 0), strata::Error);
  EXPECT_THROW(judge_net(r, 1.5, 0), strata::Error);
}

TEST(NetDoctor, ReportRoundTripsThroughJson) {
  NetResult r = uniform(3, 10.0, 5.0);
  NetVerdict v = judge_net(r, 0.5, 0);
  NetResult back = net_result_from_json(net_report_json(r, v, 0.5, 0));
  EXPECT_EQ(back.bw_gbps, r.bw_gbps);
  EXPECT_EQ(back.collectives.size(), 4u);
  std::string text = format_net_report(r, v, 0.5, 0);
  EXPECT_NE(text.find("No slow link or collective found."), std::string::npos) << text;
}

// End to end: 3 ranks, link 0<->2 ten times slower in the doctor's measurements. The other
// links run at whatever a loaded machine gives them: one of them may measure slow too, and is
// then flagged only if its own measurement is below the threshold (the verdict follows the
// measurements; the test does not assume the machine's speed).
TEST(NetDoctorCli, FindsTheThrottledLink) {
  auto r = strata::test::run_strata("doctor net --nproc 3 --bytes 256K --coll-bytes 1M --reps 3 --iters 3 --json",
                                "STRATA_THROTTLE_LINK=0-2:0.1");
  ASSERT_EQ(r.status, 1) << r.out;  // something below threshold
  nlohmann::json j = nlohmann::json::parse(r.out.substr(r.out.find('{')));
  auto bw = j["bw_gbps"];
  EXPECT_LT(bw[0][2].get<double>(), 0.5 * std::min(bw[0][1].get<double>(), bw[1][2].get<double>())) << bw.dump();
  std::vector<double> pairs = {bw[0][1].get<double>(), bw[0][2].get<double>(), bw[1][2].get<double>()};
  std::sort(pairs.begin(), pairs.end());
  const double median = pairs[1];
  bool slow_02 = false;
  for (auto& f : j["flags"]) {
    const std::string text = f["text"], what = f["what"];
    if (text.find("bandwidth") == std::string::npos || what.rfind("pair ", 0) != 0) continue;
    if (what == "pair 0-2") {
      slow_02 = true;
      continue;
    }
    const int a = what[5] - '0', b = what[7] - '0';  // "pair a-b"
    EXPECT_LT(bw[a][b].get<double>(), 0.5 * median) << what << " flagged: " << bw.dump();
  }
  EXPECT_TRUE(slow_02) << j["flags"].dump();
  EXPECT_EQ(j["world"], 3);
  EXPECT_EQ(j["collectives"].size(), 4u);
}

TEST(NetDoctorCli, ExpectedFigureFlagsEverything) {
  auto r = strata::test::run_strata("doctor net --nproc 2 --bytes 64K --coll-bytes 256K --reps 1 --iters 1 --expect-busbw 100000");
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_NE(r.out.find("SLOW pair 0-1: bandwidth"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("SLOW allreduce: busbw"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("Point-to-point bandwidth"), std::string::npos) << r.out;
}

TEST(NetDoctorCli, BadFlagsAreOneLine) {
  struct {
    const char* args;
    const char* env;
    const char* says;
  } cases[] = {{"--nproc 1", "", "--nproc must be at least 2"},
               {"--threshold 0", "", "--threshold must be in (0, 1]"},
               {"--threshold 2", "", "--threshold must be in (0, 1]"},
               {"--backend gloo", "", "gloo"},
               {"--bytes 12X", "", "unknown unit"},
               {"--nproc 3", "STRATA_THROTTLE_LINK=0-5:0.5", "outside 0-2"},
               {"--nproc 3", "STRATA_THROTTLE_LINK=0-1:3", "factor must be in (0, 1]"},
               // rank variables left from another job: no joining it as one of its ranks
               {"--nproc 2", "STRATA_RANK=0 STRATA_WORLD_SIZE=2 STRATA_JOB_ID=leftover-net STRATA_TIMEOUT=1",
                "strata doctor net: the environment holds STRATA_RANK=0 STRATA_WORLD_SIZE=2 STRATA_JOB_ID=leftover-net"}};
  for (auto& c : cases) {
    auto r = strata::test::run_strata(std::string("doctor net ") + c.args, c.env);
    EXPECT_EQ(r.status, 1) << c.args << ": " << r.out;
    EXPECT_NE(r.out.find(c.says), std::string::npos) << c.args << ": " << r.out;
    EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << r.out;
  }
}
