// The hang doctor on simulated dump sets (dump_sim.h), one per injected scenario, on 2-4
// ranks: it must name the right rank, group, sequence number and cause, and nobody on a
// healthy set.
#include <gtest/gtest.h>

#include "diag/flight_dump.h"
#include "diag/hang_doctor.h"
#include "dump_sim.h"
#include "test_util.h"

using namespace strata::diag;
using sim::Fault;

namespace {

HangReport run(const sim::Config& c) { return diagnose_hang(sim::to_set(sim::simulate(c))); }

std::vector<int> culprit_ranks(const HangReport& r) {
  std::vector<int> out;
  for (auto& c : r.culprits) out.push_back(c.rank);
  return out;
}

const StuckOp& root(const HangReport& r) {
  EXPECT_FALSE(r.stuck.empty());
  return r.stuck.front();
}

// Sequence number of the collective of (step, layer) in the simulated program: per step,
// one per layer in backward plus one in the optimizer.
int64_t seq_of(const sim::Config& c, int step, int backward_index) {
  return int64_t(step) * (c.layers + 1) + backward_index;
}

}  // namespace

TEST(HangDoctor, HealthyRunHasNoCulprit) {
  for (int world : {2, 3, 4}) {
    sim::Config c;
    c.world = world;
    HangReport r = run(c);
    EXPECT_TRUE(r.stuck.empty()) << world;
    EXPECT_TRUE(r.mismatches.empty()) << world;
    EXPECT_TRUE(r.culprits.empty()) << format_hang_report(r);
    EXPECT_TRUE(r.stragglers.empty()) << format_hang_report(r);
    EXPECT_FALSE(r.cause_found);
    EXPECT_NE(format_hang_report(r).find("No hang found"), std::string::npos);
  }
}

TEST(HangDoctor, HealthyRunWithSmallRingHasNoCulprit) {
  sim::Config c;
  c.world = 3;
  c.capacity = 5;  // entries of earlier steps evicted
  HangReport r = run(c);
  EXPECT_TRUE(r.culprits.empty()) << format_hang_report(r);
}

TEST(HangDoctor, SkippedCollectiveTwoRanksNamedFromHistory) {
  sim::Config c;
  c.world = 2;
  c.faults = {{Fault::skip, 1, 2, 1}};  // rank 1 skips backward layer 1's all-reduce in step 2
  HangReport r = run(c);
  ASSERT_EQ(r.mismatches.size(), 1u) << format_hang_report(r);
  const Mismatch& m = r.mismatches[0];
  EXPECT_EQ(m.group, "world");
  EXPECT_EQ(m.seq, seq_of(c, 2, 1));  // layer 2 is index 0, layer 1 index 1
  EXPECT_EQ(m.culprits, std::vector<int>{1});
  EXPECT_EQ(m.how, "history");
  ASSERT_EQ(culprit_ranks(r), std::vector<int>{1}) << format_hang_report(r);
  EXPECT_EQ(r.culprits[0].cause, Cause::skipped);
  EXPECT_EQ(root(r).seq, seq_of(c, 2, 1));
  EXPECT_TRUE(r.cause_found);
}

TEST(HangDoctor, SkippedCollectiveMajorityOnThreeAndFourRanks) {
  for (int world : {3, 4}) {
    sim::Config c;
    c.world = world;
    c.faults = {{Fault::skip, world - 1, 1, 2}};
    HangReport r = run(c);
    ASSERT_EQ(r.mismatches.size(), 1u) << format_hang_report(r);
    EXPECT_EQ(r.mismatches[0].seq, seq_of(c, 1, 0));
    EXPECT_EQ(r.mismatches[0].how, "majority");
    ASSERT_EQ(culprit_ranks(r), std::vector<int>{world - 1}) << format_hang_report(r);
    EXPECT_EQ(r.culprits[0].cause, Cause::skipped);
  }
}

TEST(HangDoctor, SkippedCollectiveWithEqualCountsFoundByCallSite) {
  // Equal counts: the skipped call pairs with the next one and completes; the job only
  // stops later. The first seq called from different places is the cause.
  sim::Config c;
  c.world = 2;
  c.equal_counts = true;
  c.faults = {{Fault::skip, 0, 2, 1}};
  HangReport r = run(c);
  ASSERT_FALSE(r.mismatches.empty()) << format_hang_report(r);
  EXPECT_EQ(r.mismatches[0].what, "call site");
  EXPECT_EQ(r.mismatches[0].seq, seq_of(c, 2, 1));
  ASSERT_EQ(culprit_ranks(r), std::vector<int>{0}) << format_hang_report(r);
  EXPECT_EQ(r.culprits[0].cause, Cause::skipped);
}

TEST(HangDoctor, WrongCountNamesTheRank) {
  for (int world : {2, 3, 4}) {
    sim::Config c;
    c.world = world;
    c.faults = {{Fault::wrong_count, 0, 1, 2}};
    HangReport r = run(c);
    ASSERT_EQ(r.mismatches.size(), 1u) << format_hang_report(r);
    EXPECT_EQ(r.mismatches[0].what, "count");
    EXPECT_EQ(r.mismatches[0].seq, seq_of(c, 1, 0));
    ASSERT_EQ(culprit_ranks(r), std::vector<int>{0}) << format_hang_report(r);
    EXPECT_EQ(r.culprits[0].cause, Cause::mismatch);
    EXPECT_NE(r.culprits[0].text.find("allreduce float x 150"), std::string::npos) << r.culprits[0].text;
  }
}

TEST(HangDoctor, WrongCountInFirstStepCannotPickASideOfTwo) {
  sim::Config c;
  c.world = 2;
  c.faults = {{Fault::wrong_count, 1, 0, 2}};
  HangReport r = run(c);
  ASSERT_EQ(r.mismatches.size(), 1u);
  EXPECT_TRUE(r.mismatches[0].culprits.empty());
  ASSERT_EQ(r.culprits.size(), 1u);
  EXPECT_EQ(r.culprits[0].rank, -1);
  EXPECT_EQ(r.culprits[0].cause, Cause::mismatch);
  EXPECT_TRUE(r.cause_found);
}

TEST(HangDoctor, RankStuckInComputeIsNamedWithItsPhase) {
  // sleep:SECONDS longer than the watchdog timeout: rank 2 never leaves forward of layer 1.
  sim::Config c;
  c.world = 3;
  c.faults = {{Fault::stop_in_forward, 2, 2, 1}};
  HangReport r = run(c);
  const StuckOp& s = root(r);
  EXPECT_EQ(s.group, "world");
  EXPECT_EQ(s.seq, seq_of(c, 2, 0));
  EXPECT_EQ(s.waiting, (std::vector<int>{0, 1}));
  EXPECT_EQ(s.missing, std::vector<int>{2});
  EXPECT_NEAR(s.waited_s, 30.0, 0.1);
  ASSERT_EQ(culprit_ranks(r), std::vector<int>{2}) << format_hang_report(r);
  EXPECT_EQ(r.culprits[0].cause, Cause::outside_comm);
  EXPECT_NE(r.culprits[0].text.find("rank 2 is still in forward of layer 1 (step 2)"), std::string::npos)
      << r.culprits[0].text;
}

TEST(HangDoctor, CheckpointSaveHang) {
  sim::Config c;
  c.world = 2;
  c.checkpoint = true;
  c.faults = {{Fault::stop_in_ckpt, 1, 1, -1}};
  HangReport r = run(c);
  EXPECT_EQ(root(r).seq, seq_of(c, 2, 0));
  EXPECT_EQ(root(r).missing, std::vector<int>{1});
  ASSERT_EQ(culprit_ranks(r), std::vector<int>{1}) << format_hang_report(r);
  EXPECT_EQ(r.culprits[0].cause, Cause::outside_comm);
  EXPECT_NE(r.culprits[0].text.find("rank 1 is in checkpoint save (step 1)"), std::string::npos)
      << r.culprits[0].text;
}

TEST(HangDoctor, KilledRankIsDead) {
  for (int world : {2, 4}) {
    sim::Config c;
    c.world = world;
    c.faults = {{Fault::kill, world - 1, 1, 0}};
    auto dumps = sim::simulate(c);
    ASSERT_FALSE(dumps.count(world - 1));
    HangReport r = diagnose_hang(sim::to_set(dumps));
    EXPECT_EQ(r.dead, std::vector<int>{world - 1});
    EXPECT_TRUE(r.no_dump.empty());
    EXPECT_EQ(root(r).seq, seq_of(c, 1, 0));
    ASSERT_EQ(culprit_ranks(r), std::vector<int>{world - 1}) << format_hang_report(r);
    EXPECT_EQ(r.culprits[0].cause, Cause::dead);
  }
}

// Seen end to end: after rank 2 died, the launcher stopped the survivors; rank 0 dumped and
// exited first, and rank 1 then found rank 0's pid gone too. A rank with its own dump was
// alive when the job failed: only rank 2 is dead.
TEST(HangDoctor, SurvivorThatDumpedBeforeExitingIsNotDead) {
  sim::Config c;
  c.world = 3;
  c.faults = {{Fault::kill, 2, 1, 0}};
  auto dumps = sim::simulate(c);
  ASSERT_TRUE(dumps.count(0) && dumps.count(1));
  dumps[1]["dead_peers"] = {0, 2};
  HangReport r = diagnose_hang(sim::to_set(dumps));
  EXPECT_EQ(r.dead, std::vector<int>{2});
  ASSERT_EQ(culprit_ranks(r), std::vector<int>{2}) << format_hang_report(r);
  EXPECT_EQ(r.culprits[0].cause, Cause::dead);
}

TEST(HangDoctor, SilentRankWithoutDumpIsNamed) {
  sim::Config c;
  c.world = 3;
  c.faults = {{Fault::stop_in_forward, 1, 1, 0}};
  auto dumps = sim::simulate(c);
  dumps.erase(1);  // its watchdog never wrote
  HangReport r = diagnose_hang(sim::to_set(dumps));
  EXPECT_EQ(r.no_dump, std::vector<int>{1});
  ASSERT_EQ(culprit_ranks(r), std::vector<int>{1}) << format_hang_report(r);
  EXPECT_EQ(r.culprits[0].cause, Cause::no_dump);
}

TEST(HangDoctor, AllMembersWaitingMeansTheTransportStalled) {
  sim::Config c;
  c.world = 3;
  c.faults = {{Fault::stall, 0, 1, 1}};
  HangReport r = run(c);
  EXPECT_EQ(root(r).waiting, (std::vector<int>{0, 1, 2}));
  EXPECT_TRUE(root(r).missing.empty());
  ASSERT_EQ(r.culprits.size(), 1u) << format_hang_report(r);
  EXPECT_EQ(r.culprits[0].cause, Cause::comm_stalled);
  EXPECT_EQ(r.culprits[0].rank, -1);
}

TEST(HangDoctor, ConsistentStragglerIsNamed) {
  sim::Config c;
  c.world = 4;
  c.faults = {{Fault::slow, 1, 0, 0, 3.0}};
  HangReport r = run(c);
  EXPECT_TRUE(r.stuck.empty());
  ASSERT_EQ(r.stragglers.size(), 1u) << format_hang_report(r);
  EXPECT_EQ(r.stragglers[0].rank, 1);
  ASSERT_EQ(culprit_ranks(r), std::vector<int>{1});
  EXPECT_EQ(r.culprits[0].cause, Cause::straggler);
}

TEST(HangDoctor, OneLongSleepIsNamedAsAStraggler) {
  sim::Config c;
  c.world = 2;
  c.faults = {{Fault::sleep_once, 0, 2, 1, 2.5}};
  HangReport r = run(c);
  ASSERT_EQ(r.stragglers.size(), 1u) << format_hang_report(r);
  EXPECT_EQ(r.stragglers[0].rank, 0);
  EXPECT_NEAR(r.stragglers[0].max_late_s, 2.5, 0.05);
  EXPECT_NE(r.stragglers[0].text.find("(step 2)"), std::string::npos);
  EXPECT_NE(r.stragglers[0].text.find("#" + std::to_string(seq_of(c, 2, 0))), std::string::npos)
      << r.stragglers[0].text;
}

TEST(HangDoctor, ReportJsonCarriesTheFindings) {
  sim::Config c;
  c.world = 3;
  c.faults = {{Fault::stop_in_forward, 2, 2, 1}};
  nlohmann::json j = hang_report_json(run(c));
  EXPECT_TRUE(j["cause_found"].get<bool>());
  EXPECT_EQ(j["stuck"][0]["group"], "world");
  EXPECT_EQ(j["stuck"][0]["seq"], seq_of(c, 2, 0));
  EXPECT_EQ(j["culprits"][0]["rank"], 2);
  EXPECT_EQ(j["culprits"][0]["cause"], "outside-comm");
}

TEST(HangDoctor, FormatRanksCompressesRuns) {
  EXPECT_EQ(format_ranks({3, 0, 1, 2, 5, 7, 8, 9}), "0-3, 5, 7-9");
  EXPECT_EQ(format_ranks({4, 5}), "4, 5");
  EXPECT_EQ(format_ranks({}), "");
}

