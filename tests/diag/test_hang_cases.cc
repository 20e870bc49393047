// Hand-written dump sets for layouts the simulator does not produce: several groups
// (tensor x data parallel), point-to-point (pipeline), and dumps cut off mid-write the way
// the recorder writes them (keys in alphabetical order, so "entries" comes before "rank").
#include <gtest/gtest.h>

#include "diag/flight_dump.h"
#include "diag/hang_doctor.h"
#include "dump_sim.h"
#include "test_util.h"

using namespace strata::diag;
using nlohmann::json;

namespace {

json phase(int64_t step, int layer, const char* kind) { return {{"step", step}, {"layer", layer}, {"kind", kind}}; }

json entry(const char* group, std::vector<int> ranks, int64_t seq, const char* op, int64_t count,
           const char* state, json ph, bool p2p = false, int peer = -1) {
  int64_t t = 1'000'000'000 + seq * 10'000'000;
  bool done = std::string(state) == "completed";
  return {{"group", group}, {"group_ranks", ranks}, {"seq", seq}, {"p2p", p2p}, {"op", op},
          {"dtype", "float"}, {"count", count}, {"peer", peer}, {"tag", 0}, {"root", -1},
          {"redop", "sum"}, {"state", state}, {"t_scheduled_ns", t}, {"t_started_ns", t + 1000},
          {"t_completed_ns", done ? t + 2'000'000 : 0}, {"phase", ph}};
}

json dump(int rank, int world, const char* reason, json ph, json entries) {
  return {{"rank", rank}, {"world", world}, {"pid", 100 + rank}, {"host", "n0"}, {"reason", reason},
          {"detail", "hand-written"}, {"time_ns", 60'000'000'000}, {"phase", ph},
          {"recorder_capacity", 2000}, {"entries", entries}};
}

DumpSet set_of(const std::vector<json>& dumps) {
  DumpSet set;
  set.dir = "hand";
  for (const json& j : dumps) set.dumps.push_back(parse_flight_dump(j, "f"));
  set.world = set.dumps.front().world;
  return set;
}

}  // namespace

// 2 x 2 grid: tensor-parallel groups tp0 = {0,1}, tp1 = {2,3}; data-parallel groups
// dp0 = {0,2}, dp1 = {1,3}. Rank 3 is stuck in forward of layer 1: rank 2 waits for it in
// tp1, rank 1 in dp1, and rank 0 waits in dp0 for rank 2, which is blocked in tp1.
TEST(HangCases, WaitChainAcrossGroupsNamesTheRankAtItsEnd) {
  json fwd = phase(5, 1, "forward"), bwd = phase(4, 0, "backward");
  std::vector<json> d = {
      dump(0, 4, "timeout", bwd,
           {entry("tp0", {0, 1}, 9, "allreduce", 64, "completed", fwd), entry("dp0", {0, 2}, 3, "allreduce", 512, "completed", bwd),
            entry("tp0", {0, 1}, 10, "allreduce", 64, "completed", fwd),
            entry("dp0", {0, 2}, 4, "allreduce", 512, "failed", fwd)}),
      dump(1, 4, "timeout", fwd,
           {entry("tp1x", {9}, 0, "barrier", 0, "completed", bwd), entry("tp0", {0, 1}, 9, "allreduce", 64, "completed", fwd),
            entry("dp1", {1, 3}, 3, "allreduce", 512, "completed", bwd), entry("tp0", {0, 1}, 10, "allreduce", 64, "completed", fwd),
            entry("dp1", {1, 3}, 4, "allreduce", 512, "failed", fwd)}),
      dump(2, 4, "timeout", fwd,
           {entry("tp1", {2, 3}, 9, "allreduce", 64, "completed", fwd), entry("dp0", {0, 2}, 3, "allreduce", 512, "completed", bwd),
            entry("tp1", {2, 3}, 10, "allreduce", 64, "failed", fwd)}),
      dump(3, 4, "timeout", fwd,
           {entry("tp1", {2, 3}, 9, "allreduce", 64, "completed", fwd), entry("dp1", {1, 3}, 3, "allreduce", 512, "completed", bwd)}),
  };
  d[1]["entries"].erase(0);  // keep the groups exactly as described
  HangReport r = diagnose_hang(set_of(d));
  ASSERT_EQ(r.culprits.size(), 1u) << format_hang_report(r);
  EXPECT_EQ(r.culprits[0].rank, 3);
  EXPECT_EQ(r.culprits[0].cause, Cause::outside_comm);
  EXPECT_NE(r.culprits[0].text.find("forward of layer 1 (step 5)"), std::string::npos);
  ASSERT_EQ(r.stuck.size(), 3u);
  // Roots first: tp1 #10 and dp1 #4 wait on rank 3 directly; dp0 #4 waits on rank 2.
  EXPECT_TRUE(r.stuck[0].root && r.stuck[1].root);
  EXPECT_FALSE(r.stuck[2].root);
  EXPECT_EQ(r.stuck[2].group, "dp0");
  EXPECT_EQ(r.stuck[2].missing, std::vector<int>{2});
  ASSERT_EQ(r.ranks.size(), 0u);  // rank 2's wait is shown under dp0, not as a culprit
  EXPECT_NE(format_hang_report(r).find("Also stuck (waits on the above): allreduce #4 of group \"dp0\""),
            std::string::npos)
      << format_hang_report(r);
}

// Pipeline: rank 0 sends activations to rank 1, which never posts the matching recv.
TEST(HangCases, PointToPointPeerThatNeverReceivesIsNamed) {
  json f0 = phase(2, 1, "forward"), b1 = phase(2, 3, "backward");
  std::vector<json> d = {
      dump(0, 2, "timeout", f0,
           {entry("world", {0, 1}, 2, "send", 4096, "completed", phase(1, 1, "forward"), true, 1),
            entry("world", {0, 1}, 3, "send", 4096, "failed", f0, true, 1)}),
      dump(1, 2, "timeout", b1,
           {entry("world", {0, 1}, 2, "recv", 4096, "completed", phase(1, 2, "forward"), true, 0)}),
  };
  HangReport r = diagnose_hang(set_of(d));
  ASSERT_EQ(r.stuck.size(), 1u) << format_hang_report(r);
  EXPECT_TRUE(r.stuck[0].p2p);
  EXPECT_EQ(r.stuck[0].seq, 3);
  EXPECT_EQ(r.stuck[0].missing, std::vector<int>{1});
  ASSERT_EQ(r.culprits.size(), 1u) << format_hang_report(r);
  EXPECT_EQ(r.culprits[0].rank, 1);
  EXPECT_EQ(r.culprits[0].cause, Cause::outside_comm);
  EXPECT_NE(r.culprits[0].text.find("backward of layer 3 (step 2)"), std::string::npos);
}

TEST(HangCases, BothSidesOfAPointToPointPosted) {
  json f = phase(2, 1, "forward");
  std::vector<json> d = {
      dump(0, 2, "timeout", f, {entry("world", {0, 1}, 3, "send", 4096, "failed", f, true, 1)}),
      dump(1, 2, "timeout", f, {entry("world", {0, 1}, 3, "recv", 4096, "failed", f, true, 0)}),
  };
  HangReport r = diagnose_hang(set_of(d));
  ASSERT_EQ(r.culprits.size(), 1u) << format_hang_report(r);
  EXPECT_EQ(r.culprits[0].cause, Cause::comm_stalled);
}

TEST(HangCases, DifferentOpAtTheSameSeqIsAMismatch) {
  json b = phase(3, 0, "backward");
  std::vector<json> d = {
      dump(0, 3, "error", b, {entry("world", {0, 1, 2}, 7, "allreduce", 100, "failed", b)}),
      dump(1, 3, "error", b, {entry("world", {0, 1, 2}, 7, "allgather", 100, "failed", b)}),
      dump(2, 3, "error", b, {entry("world", {0, 1, 2}, 7, "allreduce", 100, "failed", b)}),
  };
  HangReport r = diagnose_hang(set_of(d));
  ASSERT_EQ(r.mismatches.size(), 1u);
  EXPECT_EQ(r.mismatches[0].what, "op");
  ASSERT_EQ(r.culprits.size(), 1u) << format_hang_report(r);
  EXPECT_EQ(r.culprits[0].rank, 1);
  EXPECT_EQ(r.culprits[0].cause, Cause::mismatch);
  EXPECT_EQ(r.stuck[0].failed, (std::vector<int>{0, 1, 2}));
}

// The recorder writes keys in alphabetical order, so a dump cut inside "entries" loses
// "rank", "world" and "phase": rank from the file name, world from the other dumps.
TEST(HangCases, DumpCutBeforeItsRankFieldStillCounts) {
  strata::test::TempDir dir;
  sim::Config c;
  c.world = 3;
  c.faults = {{sim::Fault::stop_in_forward, 2, 2, 1}};
  auto dumps = sim::simulate(c);
  strata::test::write_dumps(dir, dumps);
  std::string text = dumps[1].dump();
  ASSERT_LT(text.find("\"entries\""), text.find("\"rank\""));
  strata::test::write_file(dir.file("flight-rank1.json"), text.substr(0, text.size() / 2));
  DumpSet set = load_flight_dumps(dir.str());
  ASSERT_EQ(set.dumps.size(), 3u);
  EXPECT_EQ(set.dumps[1].rank, 1);
  EXPECT_EQ(set.dumps[1].world, 3);
  EXPECT_TRUE(set.dumps[1].truncated);
  HangReport r = diagnose_hang(set);
  ASSERT_EQ(r.culprits.size(), 1u) << format_hang_report(r);
  EXPECT_EQ(r.culprits[0].rank, 2);
  EXPECT_EQ(r.stuck[0].unknown, std::vector<int>{1});
}

TEST(HangCases, DifferentReduceOpIsNamedAsSuch) {
  json b = phase(3, 0, "optimizer");
  json odd = entry("world", {0, 1, 2, 3}, 11, "allreduce", 1, "failed", b);
  odd["redop"] = "max";
  std::vector<json> d = {
      dump(0, 4, "error", b, {entry("world", {0, 1, 2, 3}, 11, "allreduce", 1, "failed", b)}),
      dump(1, 4, "error", b, {entry("world", {0, 1, 2, 3}, 11, "allreduce", 1, "failed", b)}),
      dump(2, 4, "error", b, {odd}),
      dump(3, 4, "error", b, {entry("world", {0, 1, 2, 3}, 11, "allreduce", 1, "failed", b)}),
  };
  HangReport r = diagnose_hang(set_of(d));
  ASSERT_EQ(r.mismatches.size(), 1u);
  EXPECT_EQ(r.mismatches[0].what, "reduce op");
  EXPECT_EQ(r.mismatches[0].culprits, std::vector<int>{2});
  EXPECT_NE(r.mismatches[0].sides[1].call.find("(max)"), std::string::npos) << r.mismatches[0].sides[1].call;
}

// The interleaved pipeline's eval hang: both stages blocked in a send to the other, neither
// posting the receive. No transport can finish that: it is the program's order.
TEST(HangCases, TwoRanksSendingToEachOtherIsAnOrderDeadlock) {
  json ev = phase(8, 2, "eval");
  std::vector<json> d = {
      dump(0, 2, "timeout", ev,
           {entry("pp(dp=0,tp=0)", {0, 1}, 115, "recv", 4096, "completed", ev, true, 1),
            entry("pp(dp=0,tp=0)", {0, 1}, 116, "send", 4096, "failed", ev, true, 1)}),
      dump(1, 2, "timeout", ev,
           {entry("pp(dp=0,tp=0)", {0, 1}, 115, "send", 4096, "completed", ev, true, 0),
            entry("pp(dp=0,tp=0)", {0, 1}, 116, "send", 4096, "failed", ev, true, 0)}),
  };
  HangReport r = diagnose_hang(set_of(d));
  ASSERT_EQ(r.culprits.size(), 1u) << format_hang_report(r);
  EXPECT_EQ(r.culprits[0].cause, Cause::order_deadlock);
  const std::string& t = r.culprits[0].text;
  EXPECT_NE(t.find("ranks 0 -> 1 -> 0"), std::string::npos) << t;
  EXPECT_NE(t.find("rank 0 is in send #116 of group \"pp(dp=0,tp=0)\" (send float x 4096 to rank 1 from eval"),
            std::string::npos) << t;
  EXPECT_NE(t.find("rank 1 is in send #116"), std::string::npos) << t;
  EXPECT_EQ(format_hang_report(r).find("transport or a link is stuck"), std::string::npos) << format_hang_report(r);
}

// Three stages each receiving from the next around a ring: a cycle longer than a pair,
// where no neighbour's op faces the other's.
TEST(HangCases, ThreeRankReceiveCycleIsAnOrderDeadlock) {
  json f = phase(3, 1, "forward");
  std::vector<int> g = {0, 1, 2};
  std::vector<json> d;
  for (int k = 0; k < 3; ++k)
    d.push_back(dump(k, 3, "timeout", f, {entry("pp(dp=0,tp=0)", g, 7, "recv", 64, "failed", f, true, (k + 1) % 3)}));
  HangReport r = diagnose_hang(set_of(d));
  ASSERT_EQ(r.culprits.size(), 1u) << format_hang_report(r);
  EXPECT_EQ(r.culprits[0].cause, Cause::order_deadlock);
  EXPECT_NE(r.culprits[0].text.find("ranks 0 -> 1 -> 2 -> 0"), std::string::npos) << r.culprits[0].text;
}

// 3D kill: rank 2 died; ranks 0 and 1 then stalled together in tp0 #4, an operation both
// reached. The death is the cause and leads; the stall is folded under it.
TEST(HangCases, DeathLeadsAndExplainsTheSurvivorsStalls) {
  json f = phase(3, 1, "forward");
  std::vector<json> d = {
      dump(0, 3, "timeout", f, {entry("tp0", {0, 1}, 4, "allreduce", 64, "failed", f)}),
      dump(1, 3, "peer-dead", f,
           {entry("tp0", {0, 1}, 4, "allreduce", 64, "failed", f), entry("dp1", {1, 2}, 3, "allreduce", 512, "failed", f)}),
  };
  d[1]["dead_peers"] = {2};
  HangReport r = diagnose_hang(set_of(d));
  ASSERT_FALSE(r.culprits.empty()) << format_hang_report(r);
  EXPECT_EQ(r.culprits[0].rank, 2) << format_hang_report(r);
  EXPECT_EQ(r.culprits[0].cause, Cause::dead);
  for (const Culprit& c : r.culprits) EXPECT_NE(c.cause, Cause::comm_stalled) << format_hang_report(r);
  EXPECT_NE(format_hang_report(r).find("after the death of rank 2"), std::string::npos) << format_hang_report(r);
}

// skip-collective on two ranks with no earlier step recorded: at one seq rank 1 calls from
// step 4 and rank 0 from step 3, so rank 1 has passed step 3's call without making it.
TEST(HangCases, TwoRanksTheOneCallingFromALaterStepSkipped) {
  json b3 = phase(3, 0, "backward"), b4 = phase(4, 0, "backward");
  std::vector<json> d = {
      dump(0, 2, "timeout", b3, {entry("dp(pp=0,tp=0)", {0, 1}, 6, "allreduce", 100, "failed", b3)}),
      dump(1, 2, "timeout", b4, {entry("dp(pp=0,tp=0)", {0, 1}, 6, "allreduce", 100, "failed", b4)}),
  };
  HangReport r = diagnose_hang(set_of(d));
  ASSERT_EQ(r.mismatches.size(), 1u) << format_hang_report(r);
  EXPECT_EQ(r.mismatches[0].how, "step");
  ASSERT_EQ(r.culprits.size(), 1u) << format_hang_report(r);
  EXPECT_EQ(r.culprits[0].rank, 1);
  EXPECT_EQ(r.culprits[0].cause, Cause::skipped);
  EXPECT_NE(r.culprits[0].text.find("group \"dp(pp=0,tp=0)\""), std::string::npos) << r.culprits[0].text;
  EXPECT_NE(r.culprits[0].text.find("step 4"), std::string::npos) << r.culprits[0].text;
}

// skip-collective under tp 2: rank 1 skipped step 3's loss all-reduce (world #5) and went on
// to step 4, where it waits in a tp reduce-scatter that rank 0, still in world #5, never
// reaches. The wait in tp is a consequence: world #5 is the root and rank 1 skipped it.
TEST(HangCases, RankBlockedInALaterStepSkippedTheCollective) {
  json o3 = phase(3, -1, "optimizer"), f4 = phase(4, 0, "forward");
  std::vector<json> d = {
      dump(0, 2, "timeout", o3,
           {entry("world", {0, 1}, 4, "allreduce", 1, "completed", phase(2, -1, "optimizer")),
            entry("tp(dp=0)", {0, 1}, 95, "allreduce", 64, "completed", phase(3, 1, "backward")),
            entry("world", {0, 1}, 5, "allreduce", 1, "failed", o3)}),
      dump(1, 2, "timeout", f4,
           {entry("world", {0, 1}, 4, "allreduce", 1, "completed", phase(2, -1, "optimizer")),
            entry("tp(dp=0)", {0, 1}, 95, "allreduce", 64, "completed", phase(3, 1, "backward")),
            entry("tp(dp=0)", {0, 1}, 96, "reducescatter", 1024, "failed", f4)}),
  };
  HangReport r = diagnose_hang(set_of(d));
  const std::string text = format_hang_report(r);
  ASSERT_EQ(r.culprits.size(), 1u) << text;
  EXPECT_EQ(r.culprits[0].rank, 1) << text;
  EXPECT_EQ(r.culprits[0].cause, Cause::skipped) << text;
  EXPECT_NE(r.culprits[0].text.find("optimizer (step 3)"), std::string::npos) << text;
  EXPECT_NE(r.culprits[0].text.find("forward of layer 0 (step 4)"), std::string::npos) << text;
  ASSERT_EQ(r.stuck.size(), 2u) << text;
  EXPECT_EQ(r.stuck[0].group, "world") << text;
  EXPECT_TRUE(r.stuck[0].root);
  EXPECT_FALSE(r.stuck[1].root) << text;
  EXPECT_EQ(text.find("cross-group deadlock"), std::string::npos) << text;
}

// The same when the later wait is point-to-point (a pipeline stage's receive in step 4).
TEST(HangCases, StageReceivingInALaterStepSkippedTheCollective) {
  json o3 = phase(3, -1, "optimizer"), f4 = phase(4, -1, "forward");
  std::vector<json> d = {
      dump(0, 2, "timeout", o3, {entry("world", {0, 1}, 7, "allreduce", 1, "failed", o3)}),
      dump(1, 2, "timeout", f4,
           {entry("world", {0, 1}, 6, "allreduce", 1, "completed", phase(2, -1, "optimizer")),
            entry("pp(dp=0,tp=0)", {0, 1}, 15, "recv", 2048, "failed", f4, true, 0)}),
  };
  HangReport r = diagnose_hang(set_of(d));
  const std::string text = format_hang_report(r);
  ASSERT_EQ(r.culprits.size(), 1u) << text;
  EXPECT_EQ(r.culprits[0].rank, 1) << text;
  EXPECT_EQ(r.culprits[0].cause, Cause::skipped) << text;
  EXPECT_NE(r.culprits[0].text.find("blocked in recv #15"), std::string::npos) << text;
}

// skip-collective under ep: after the loss all-reduce each step reduces the experts' load
// (18 values) on the same group, in the same phase. Rank 1 left the first out, so at #18 it
// calls the second: its step 3 is its step 2 less that call. Skipped, not a different count.
TEST(HangCases, CallLeftOutOfTheStepIsSkippedNotADifferentCount) {
  json o2 = phase(2, -1, "optimizer"), o3 = phase(3, -1, "optimizer");
  auto step2 = [&] {
    return std::vector<json>{entry("world", {0, 1}, 16, "allreduce", 1, "completed", o2),
                             entry("world", {0, 1}, 17, "allreduce", 18, "completed", o2)};
  };
  std::vector<json> e0 = step2(), e1 = step2();
  e0.push_back(entry("world", {0, 1}, 18, "allreduce", 1, "failed", o3));
  e1.push_back(entry("world", {0, 1}, 18, "allreduce", 18, "failed", o3));
  HangReport r = diagnose_hang(set_of({dump(0, 2, "error", o3, e0), dump(1, 2, "error", o3, e1)}));
  const std::string text = format_hang_report(r);
  ASSERT_EQ(r.mismatches.size(), 1u) << text;
  EXPECT_EQ(r.mismatches[0].how, "history") << text;
  EXPECT_TRUE(r.mismatches[0].left_out) << text;
  ASSERT_EQ(r.culprits.size(), 1u) << text;
  EXPECT_EQ(r.culprits[0].rank, 1) << text;
  EXPECT_EQ(r.culprits[0].cause, Cause::skipped) << text;
  // Both calls head the report, not rank 0's as if both had made it.
  ASSERT_EQ(r.stuck.size(), 1u) << text;
  ASSERT_EQ(r.stuck[0].calls.size(), 2u) << text;
  EXPECT_NE(text.find("called differently: rank 0: allreduce float x 1 from optimizer (step 3); rank 1: "
                      "allreduce float x 18 from optimizer (step 3)"),
            std::string::npos)
      << text;
}

// 3D kill: pipeline stages stopped with receives posted ahead on both channels face each
// other in two receives. That is the dead rank's doing, not an order deadlock of its own.
TEST(HangCases, FacingReceivesAfterADeathAreFoldedUnderIt) {
  json b = phase(3, -1, "backward"), f = phase(3, -1, "forward");
  std::vector<json> d = {
      dump(0, 3, "peer-dead", f, {entry("pp.grad", {0, 1}, 2, "recv", 512, "failed", b, true, 1)}),
      dump(1, 3, "peer-dead", f, {entry("pp", {0, 1}, 14, "recv", 512, "failed", f, true, 0)}),
  };
  d[0]["dead_peers"] = {2};
  d[1]["dead_peers"] = {2};
  HangReport r = diagnose_hang(set_of(d));
  const std::string text = format_hang_report(r);
  ASSERT_EQ(r.culprits.size(), 1u) << text;
  EXPECT_EQ(r.culprits[0].rank, 2) << text;
  EXPECT_EQ(r.culprits[0].cause, Cause::dead) << text;
  EXPECT_NE(text.find("after the death of rank 2: ranks 0 -> 1 -> 0"), std::string::npos) << text;
}

// kill-during-save: rank 2 died while the others saved or waited. Rank 1, in its save,
// never reached either stuck operation; where it was is said once, not once per operation.
TEST(HangCases, SurvivorStoppedAfterADeathIsDescribedOnce) {
  json f = phase(3, 0, "forward"), c = phase(3, -1, "checkpoint save");
  const std::vector<int> world = {0, 1, 2, 3};
  std::vector<json> d = {
      dump(0, 4, "peer-dead", f,
           {entry("tp0", {0, 1}, 5, "allgather", 64, "failed", f), entry("world", world, 7, "allreduce", 1, "failed", f)}),
      dump(1, 4, "signal", c,
           {entry("tp0", {0, 1}, 4, "allgather", 64, "completed", f),
            entry("world", world, 6, "allreduce", 1, "completed", f)}),
      dump(3, 4, "peer-dead", f, {entry("world", world, 7, "allreduce", 1, "failed", f)}),
  };
  d[0]["dead_peers"] = {2};
  d[2]["dead_peers"] = {2};
  HangReport r = diagnose_hang(set_of(d));
  const std::string text = format_hang_report(r);
  ASSERT_FALSE(r.culprits.empty()) << text;
  EXPECT_EQ(r.culprits[0].rank, 2) << text;
  EXPECT_EQ(r.stuck.size(), 2u) << text;
  int lines = 0;
  for (const RankFinding& x : r.ranks) lines += x.rank == 1;
  EXPECT_EQ(lines, 1) << text;
}
