// What the launcher reads out of a failed mpirun job (launcher/mpirun_failure.h): the failing
// rank or lost host from mpirun's report, the ranks' timeout lines, the host that went silent.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "launcher/mpirun_failure.h"
#include "launcher/rank_status.h"

namespace strata::launcher {
namespace {

const std::vector<HostSlots> kHosts = {{"a", 2}, {"b", 2}};

TEST(MpirunFailure, SignalReportNamesRankAndHost) {
  int rank = -1;
  std::string host;
  const std::string msg = parse_mpirun_failure(
      {"mpirun noticed that process rank 3 with PID 4242 on node b exited on signal 9 (Killed)."},
      true, rank, host);
  EXPECT_EQ(msg, "rank 3 was killed by signal 9 (Killed)");
  EXPECT_EQ(rank, 3);
  EXPECT_EQ(host, "b");
}

TEST(MpirunFailure, ExitCodeNeedsTheProcessNameFirst) {
  int rank = -1;
  std::string host;
  EXPECT_EQ(parse_mpirun_failure({"  Exit code:    3"}, false, rank, host), "");
  EXPECT_EQ(rank, -1);
  EXPECT_EQ(parse_mpirun_failure({"  Process name: [[4711,1],2]", "  Exit code:    3"}, false, rank,
                                 host),
            "rank 2 exited with code 3");
  EXPECT_EQ(rank, 2);
}

TEST(MpirunFailure, LostDaemonNamesTheHostOnlyAcrossHosts) {
  const std::vector<std::string> lines = {
      "ORTE has lost communication with a remote daemon.", "  Remote daemon: [[4711,0],1] on node b"};
  int rank = -1;
  std::string host;
  EXPECT_EQ(parse_mpirun_failure(lines, false, rank, host), "");
  EXPECT_EQ(parse_mpirun_failure(lines, true, rank, host).rfind("host b was lost", 0), 0u);
  EXPECT_EQ(host, "b");
  EXPECT_EQ(rank, -1);
  host.clear();
  EXPECT_EQ(parse_mpirun_failure({"  Peer host: a"}, true, rank, host).rfind("host a was lost", 0), 0u);
  EXPECT_EQ(host, "a");
}

TEST(MpirunFailure, HostOfRankFillsHostsInOrder) {
  EXPECT_EQ(host_of_rank(kHosts, 0), "a");
  EXPECT_EQ(host_of_rank(kHosts, 1), "a");
  EXPECT_EQ(host_of_rank(kHosts, 2), "b");
  EXPECT_EQ(host_of_rank(kHosts, 4), "");
  EXPECT_EQ(host_of_rank({}, 0), "");
}

// A survivor on host a that exits because host b died must not lead the restart line: the
// lost host does, and --elastic drops it.
TEST(MpirunFailure, LostHostLeadsASurvivorsRecord) {
  const std::string lost = "host b was lost (its daemon ...)";
  int rank = 0;
  EXPECT_EQ(leading_failure("rank 0 exited with code 1", rank, lost, -1, "b", kHosts),
            "host b was lost (its daemon ...); then rank 0 exited with code 1");
  EXPECT_EQ(rank, -1);
  rank = 3;  // the record is from the failed host itself: it leads
  EXPECT_EQ(leading_failure("rank 3 was killed by signal 9", rank, lost, -1, "b", kHosts),
            "rank 3 was killed by signal 9");
  EXPECT_EQ(rank, 3);
  rank = 1;  // mpirun names the rank that died on b
  EXPECT_EQ(leading_failure("rank 1 exited with code 1", rank, "rank 2 was killed by signal 9", 2, "b", kHosts),
            "rank 2 was killed by signal 9; then rank 1 exited with code 1");
  EXPECT_EQ(rank, 2);
  rank = 1;  // one host: the first record is the first failure
  EXPECT_EQ(leading_failure("rank 1 exited with code 1", rank, "rank 0 was killed by signal 9", 0, "node", {}),
            "rank 1 exited with code 1");
  rank = -1;  // no record: mpirun's report
  EXPECT_EQ(leading_failure("", rank, lost, -1, "b", kHosts), lost);
}

TEST(MpirunFailure, TimedOutRanksNameHostAndPeerOncePerRank) {
  const std::string out = timed_out_ranks(
      {{0, "strata: error: rank 0: group world recv #881 with rank 2 tag 0: timed out after 4 s"},
       {0, "strata: error: rank 0: a second line of the same rank"},
       {1, "timeout: group world barrier #3: timed out after 4 s"}},
      kHosts);
  EXPECT_EQ(out,
            "; rank 0 (host a) timed out waiting on rank 2 (host b): group world recv #881 with "
            "rank 2 tag 0: timed out after 4 s; rank 1 (host a) timed out: group world barrier "
            "#3: timed out after 4 s");
}

TEST(MpirunFailure, TimedOutRanksNameTheWorldRankOfASubGroupPeer) {
  // In group pp(dp=0,tp=1) group rank 1 is world rank 3: the runtime names it.
  const std::string out = timed_out_ranks(
      {{1, "strata: rank 1: timeout: group pp(dp=0,tp=1) recv #2 with rank 1 tag 0: timed out after 2 s "
           "(0 bytes moved) (peer: world rank 3); flight recorder written to x"}},
      kHosts);
  EXPECT_EQ(out.rfind("; rank 1 (host a) timed out waiting on rank 3 (host b): ", 0), 0u) << out;
}

// A hung rank says nothing; the rank that timed out waiting on it exits 1 first.
TEST(MpirunFailure, UnansweringRankIsThePeerOfTheFirstOwnTimeout) {
  int rank = -1;
  EXPECT_EQ(unanswering_rank(
                {{0, "strata: rank 0: timeout: group world allreduce #7: timed out waiting for rank 1 (rank 1 "
                     "last finished allreduce #6; waited 2 s) (peer: world rank 1); flight recorder written to x"},
                 {1, "strata: rank 1: timeout: group world: rank 0 reported: group world allreduce #7: timed "
                     "out waiting for rank 1 (...) (peer: world rank 1); flight recorder written to x"}},
                rank),
            "rank 1 stopped answering (rank 0 timed out waiting on it in group world allreduce #7)");
  EXPECT_EQ(rank, 1);
  // The group rank is not the world rank in a sub-group: the world rank is named.
  rank = -1;
  EXPECT_EQ(unanswering_rank({{4, "strata: rank 4: timeout: group pp(dp=0,tp=0) recv #3 with rank 0 tag 0: "
                                  "timed out after 2 s (0 bytes moved) (peer: world rank 0)"}},
                             rank),
            "rank 0 stopped answering (rank 4 timed out waiting on it in group pp(dp=0,tp=0) recv #3)");
  EXPECT_EQ(rank, 0);
  // Rank 0 waited on rank 2, which itself timed out waiting on rank 5: rank 5 is named.
  rank = -1;
  EXPECT_EQ(unanswering_rank({{0, "strata: rank 0: timeout: group world allreduce #9: timed out waiting for "
                                  "rank 2 (...) (peer: world rank 2)"},
                              {2, "strata: rank 2: timeout: group tp(dp=1) allreduce #4: timed out waiting "
                                  "for rank 1 (...) (peer: world rank 5)"}},
                             rank),
            "rank 5 stopped answering (rank 2 timed out waiting on it in group tp(dp=1) allreduce #4)");
  EXPECT_EQ(rank, 5);
  // A cascade in 3D on a loaded host (as CI saw it, rank 5 hung): rank 2's timeout came
  // first and points at rank 0, which only relayed a report; every other chain ends at 5.
  rank = -1;
  EXPECT_EQ(unanswering_rank(
                {{2, "strata: rank 2: timeout: group dp(pp=0,tp=0) allreduce #2: timed out waiting for rank 0 (...) "
                     "(peer: world rank 0); flight recorder written to x"},
                 {3, "strata: rank 3: timeout: group dp(pp=0,tp=1) allreduce #2: timed out waiting for rank 0 (...) "
                     "(peer: world rank 1); flight recorder written to x"},
                 {4, "strata: rank 4: timeout: group tp(pp=1,dp=0) allgather #36: timed out waiting for rank 1 (...) "
                     "(peer: world rank 5); flight recorder written to x"},
                 {6, "strata: rank 6: timeout: group dp(pp=1,tp=0) allreduce #2: timed out waiting for rank 0 (...) "
                     "(peer: world rank 4); flight recorder written to x"},
                 {7, "strata: rank 7: timeout: group dp(pp=1,tp=1) allreduce #2: timed out waiting for rank 0 (...) "
                     "(peer: world rank 5); flight recorder written to x"},
                 {0, "strata: rank 0: timeout: group pp(dp=0,tp=0).grad recv #2: aborted because rank 1 reported: "
                     "group tp(pp=1,dp=0) failed: ... (peer: world rank 5); flight recorder written to x"},
                 {1, "strata: rank 1: timeout: group pp(dp=0,tp=1).grad recv #2 with rank 1 tag 1: timed out after "
                     "2 s (0 bytes moved) (peer: world rank 5); flight recorder written to x"}},
                rank),
            "rank 5 stopped answering (rank 1 timed out waiting on it in group pp(dp=0,tp=1).grad recv #2)");
  EXPECT_EQ(rank, 5);
  // Another cascade under load (rank 5 hung): rank 2's own wait on rank 0 came first and
  // rank 3's on rank 1, but ranks 0 and 1 were themselves waiting in a receive when the abort
  // reached them (their lines name the operation), so they are not hung; the hung rank's
  // watchdog relays a report from no operation. Rank 4's chain names rank 5.
  rank = -1;
  EXPECT_EQ(unanswering_rank(
                {{2, "strata: rank 2: timeout: group dp(pp=0,tp=0) allreduce #4: timed out waiting for rank 0 (rank 0 "
                     "last finished allreduce #3; waited 2.00224 s) (peer: world rank 0); flight recorder written to x"},
                 {4, "strata: rank 4: timeout: group tp(pp=1,dp=0) allgather #36: timed out waiting for rank 1 (rank 1 "
                     "last finished allreduce #35; waited 2.00007 s) (peer: world rank 5); flight recorder written to x"},
                 {6, "strata: rank 6: timeout: group dp(pp=1,tp=0) allreduce #6: aborted because rank 0 reported: group "
                     "tp(pp=1,dp=0) failed: ... (peer: world rank 5); flight recorder written to x"},
                 {5, "strata: rank 5: timeout: group world: rank 4 reported: group tp(pp=1,dp=0) failed: ... (peer: "
                     "world rank 5); flight recorder written to x"},
                 {3, "strata: rank 3: timeout: group dp(pp=0,tp=1) allreduce #4: timed out waiting for rank 0 (rank 0 "
                     "last finished allreduce #3; waited 2.00851 s) (peer: world rank 1); flight recorder written to x"},
                 {0, "strata: rank 0: timeout: group pp(dp=0,tp=0).grad recv #2: aborted because rank 1 reported: group "
                     "tp(pp=1,dp=0) failed: ... (peer: world rank 5); flight recorder written to x"},
                 {1, "strata: rank 1: timeout: group pp(dp=0,tp=1).grad recv #2: aborted because rank 1 reported: group "
                     "world: ... (peer: world rank 5); flight recorder written to x"},
                 {7, "strata: rank 7: timeout: group world: rank 4 reported: group tp(pp=1,dp=0) failed: ... (peer: "
                     "world rank 5); flight recorder written to x"}},
                rank),
            "rank 5 stopped answering (rank 4 timed out waiting on it in group tp(pp=1,dp=0) allgather #36)");
  EXPECT_EQ(rank, 5);
  // Only relayed reports, or no peer named (the mpi backend): nothing to say.
  rank = -1;
  EXPECT_EQ(unanswering_rank({{1, "strata: rank 1: timeout: group world: rank 0 reported: ... (peer: world rank 1)"},
                              {0, "strata: rank 0: timeout: group world allreduce #3: timed out after 2 s "
                                  "waiting for the other ranks (mpi backend)"}},
                             rank),
            "");
  EXPECT_EQ(rank, -1);
}

TEST(MpirunFailure, SilentHostIsTheOneWhoseRanksNeverAnswered) {
  EXPECT_EQ(silent_host({0, 1}, kHosts), "b");  // a's ranks answered the stop, b's did not
  EXPECT_EQ(silent_host({2}, kHosts), "a");
  EXPECT_EQ(silent_host({}, kHosts), "");       // nobody answered: no picture
  EXPECT_EQ(silent_host({0}, {{"a", 1}, {"b", 1}, {"c", 1}}), "");  // two hosts silent
  EXPECT_EQ(silent_host({0, 2}, kHosts), "");   // every host answered
}

// A rank's line answers when mpirun's stop reached it or it reported a dead peer; another
// rank's report quoted, or an unrelated line, does not.
TEST(MpirunFailure, LinesThatShowARankOutlivedTheFailure) {
  EXPECT_TRUE(answers_after_failure(1, "strata: rank 1: peer-dead: group host: rank 0 (pid 7815) "
                                       "died; rank 0 last finished reducescatter #123; flight "
                                       "recorder written to /tmp/x/flight-rank1.json"));
  EXPECT_TRUE(answers_after_failure(2, "[h0:01234] *** Process received signal 15 ***"));
  EXPECT_FALSE(answers_after_failure(2, "strata: rank 1: peer-dead: group world: rank 3 died"));
  EXPECT_FALSE(answers_after_failure(0, "step    12/200 | loss 4.9464"));
}

// The ranks whose rank-exec parent recorded how they ended also answered: a host that died
// whole leaves no record (what the launcher adds to the ranks that answered mpirun's stop).
TEST(MpirunFailure, RecordedRanksAreThoseWithARecord) {
  char tmpl[] = "/tmp/strata-recorded-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  for (const char* f : {"rank-3", "rank-0", "other"}) std::ofstream(dir + "/" + f) << "256 1\n";
  EXPECT_EQ(recorded_ranks(dir), (std::vector<int>{0, 3}));
  EXPECT_EQ(silent_host(recorded_ranks(dir), {{"a", 1}, {"b", 1}, {"c", 2}}), "b");
  std::filesystem::remove_all(dir);
  EXPECT_TRUE(recorded_ranks(dir).empty());
}

}  // namespace
}  // namespace strata::launcher
