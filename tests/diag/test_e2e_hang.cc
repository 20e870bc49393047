// End to end over the real communicator: launch a trainer stand-in (worker/diag_worker.cc)
// with each injected fault, let the watchdog stop the job, and check that the dumps exist
// (the survivors dump when a rank is killed) and that `strata doctor hang` names the rank,
// group, sequence number and cause. The worker runs 4 collectives per step on group
// "world" (backward of layers 2, 1, 0, then the optimizer's norm), from base_seq on.
#include <gtest/gtest.h>

#include <filesystem>
#include <regex>

#include "test_util.h"

using strata::test::TempDir;
using nlohmann::json;

namespace {

struct Outcome {
  int64_t base_seq = -1;
  std::string launch_out;
  json report;
  int doctor_status = -1;
  std::string doctor_text;
};

// timeout_s: the watchdog's limit. Scenarios that wait for it use 2 s; the others use 60 s,
// so that a rank descheduled on a loaded machine cannot time out by accident.
Outcome run_scenario(const TempDir& dir, int nproc, const std::string& worker_args, int timeout_s = 60) {
  Outcome o;
  std::string timeout = std::to_string(timeout_s);
  auto launch = strata::test::run_strata(
      "launch -n " + std::to_string(nproc) + " --timeout " + timeout + " --grace 1 -- " + DIAG_WORKER +
          " --steps 4 --timeout " + timeout + " " + worker_args,
      "STRATA_DUMP_DIR=" + dir.str());
  o.launch_out = launch.out;
  std::smatch m;
  if (std::regex_search(launch.out, m, std::regex(R"(base_seq=(\d+))"))) o.base_seq = std::stoll(m[1]);
  auto doctor = strata::test::run_strata("doctor hang --json " + dir.str());
  o.doctor_status = doctor.status;
  if (doctor.out.find('{') != std::string::npos) o.report = json::parse(doctor.out.substr(doctor.out.find('{')));
  o.doctor_text = strata::test::run_strata("doctor hang " + dir.str()).out;
  return o;
}

bool has_dump(const TempDir& dir, int rank) {
  return std::filesystem::exists(dir.file("flight-rank" + std::to_string(rank) + ".json"));
}

}  // namespace

TEST(EndToEndHang, KilledRankIsNamedDeadAndSurvivorsDump) {
  TempDir dir;
  Outcome o = run_scenario(dir, 3, "--inject kill --inject-rank 2 --inject-step 2");
  ASSERT_EQ(o.doctor_status, 0) << o.launch_out << o.doctor_text;
  EXPECT_TRUE(has_dump(dir, 0) && has_dump(dir, 1)) << o.launch_out;
  EXPECT_FALSE(has_dump(dir, 2));
  ASSERT_EQ(o.report["culprits"].size(), 1u) << o.doctor_text;
  EXPECT_EQ(o.report["culprits"][0]["rank"], 2);
  EXPECT_EQ(o.report["culprits"][0]["cause"], "dead");
  EXPECT_EQ(o.report["dead"], json::array({2}));
  // Where the survivors stopped depends on when they noticed: finishing step 1's last
  // all-reduce (#7, which the killed rank had completed), or in step 2's first (#8).
  if (!o.report["stuck"].empty()) {
    int64_t seq = o.report["stuck"][0]["seq"];
    EXPECT_TRUE(seq == o.base_seq + 7 || seq == o.base_seq + 8) << o.doctor_text;
    EXPECT_EQ(o.report["stuck"][0]["absent"], json::array({2})) << o.doctor_text;
  }
}

TEST(EndToEndHang, SkippedCollectiveOnTwoRanks) {
  TempDir dir;
  Outcome o = run_scenario(dir, 2, "--inject skip-collective --inject-rank 1 --inject-step 2");
  ASSERT_EQ(o.doctor_status, 0) << o.launch_out << o.doctor_text;
  ASSERT_EQ(o.report["culprits"].size(), 1u) << o.doctor_text;
  EXPECT_EQ(o.report["culprits"][0]["rank"], 1);
  EXPECT_EQ(o.report["culprits"][0]["cause"], "skipped");
  ASSERT_EQ(o.report["mismatches"].size(), 1u);
  EXPECT_EQ(o.report["mismatches"][0]["group"], "world");
  EXPECT_EQ(o.report["mismatches"][0]["seq"], o.base_seq + 9);  // step 2, layer 1
}

TEST(EndToEndHang, WrongCountOnThreeRanks) {
  TempDir dir;
  Outcome o = run_scenario(dir, 3, "--inject wrong-count --inject-rank 0 --inject-step 1");
  ASSERT_EQ(o.doctor_status, 0) << o.launch_out << o.doctor_text;
  ASSERT_EQ(o.report["culprits"].size(), 1u) << o.doctor_text;
  EXPECT_EQ(o.report["culprits"][0]["rank"], 0);
  EXPECT_EQ(o.report["culprits"][0]["cause"], "mismatch");
  EXPECT_EQ(o.report["mismatches"][0]["seq"], o.base_seq + 5);  // step 1, layer 1
  EXPECT_EQ(o.report["mismatches"][0]["what"], "count");
}

TEST(EndToEndHang, HungRankIsNamedWithWhereItIs) {
  TempDir dir;
  Outcome o = run_scenario(dir, 3, "--inject hang --inject-rank 1 --inject-step 2", 2);
  ASSERT_EQ(o.doctor_status, 0) << o.launch_out << o.doctor_text;
  for (int r = 0; r < 3; ++r) EXPECT_TRUE(has_dump(dir, r)) << r;
  ASSERT_EQ(o.report["culprits"].size(), 1u) << o.doctor_text;
  EXPECT_EQ(o.report["culprits"][0]["rank"], 1);
  EXPECT_EQ(o.report["culprits"][0]["cause"], "outside-comm");
  EXPECT_EQ(o.report["stuck"][0]["group"], "world");
  EXPECT_EQ(o.report["stuck"][0]["seq"], o.base_seq + 8);
  EXPECT_NE(o.doctor_text.find("rank 1 is still in forward of layer 0 (step 2)"), std::string::npos) << o.doctor_text;
}

TEST(EndToEndHang, SleepLongerThanTheTimeoutIsAStuckRank) {
  TempDir dir;
  Outcome o = run_scenario(dir, 2, "--inject sleep:4 --inject-rank 0 --inject-step 1", 2);
  ASSERT_EQ(o.doctor_status, 0) << o.launch_out << o.doctor_text;
  ASSERT_EQ(o.report["culprits"].size(), 1u) << o.doctor_text;
  EXPECT_EQ(o.report["culprits"][0]["rank"], 0);
  EXPECT_EQ(o.report["stuck"][0]["seq"], o.base_seq + 4);
  EXPECT_NE(o.doctor_text.find("forward of layer 0 (step 1)"), std::string::npos) << o.doctor_text;
}

TEST(EndToEndHang, KillDuringSave) {
  TempDir dir;
  Outcome o = run_scenario(dir, 2, "--inject kill-during-save --inject-rank 1 --inject-step 1");
  ASSERT_EQ(o.doctor_status, 0) << o.launch_out << o.doctor_text;
  EXPECT_TRUE(has_dump(dir, 0));
  EXPECT_FALSE(has_dump(dir, 1));
  ASSERT_EQ(o.report["culprits"].size(), 1u) << o.doctor_text;
  EXPECT_EQ(o.report["culprits"][0]["rank"], 1);
  EXPECT_EQ(o.report["culprits"][0]["cause"], "dead");
}

TEST(EndToEndHang, HealthyRunHasNoCulprit) {
  TempDir dir;
  Outcome o = run_scenario(dir, 2, "--dump-at-end");
  EXPECT_EQ(o.doctor_status, 1) << o.launch_out << o.doctor_text;
  EXPECT_TRUE(has_dump(dir, 0) && has_dump(dir, 1)) << o.launch_out;
  EXPECT_TRUE(o.report["culprits"].empty()) << o.doctor_text;
  EXPECT_NE(o.doctor_text.find("No hang found"), std::string::npos) << o.doctor_text;
}
