// Live recovery across hosts (`strata train --hosts ... --backend tcp --recovery shrink|live`):
// 2 namespace hosts x 2 ranks (tools/netns-cluster, each host with a /dev/shm of its own). The
// ranks run over strata's tcp backend, since OpenMPI cannot shrink a communicator; the
// launcher starts each through the remote shell and posts the worlds in the job's store. A
// rank SIGKILLed mid-run does not stop the job: the survivors on both hosts re-form a world of
// 3 in process, load the newest step every old rank's copy holds wherever it lies (the dead
// rank's copy is on its host only), and continue; their losses equal a run that never failed,
// resumed from disk on 3 ranks at that step, bit for bit. Under live a replacement starts on
// the dead rank's host and joins. Nothing of the job remains on any host.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <array>
#include <random>
#include <string>
#include <vector>

#include "cli_util.h"
#include "kernels/isa.h"
#include "live_util.h"

namespace strata::test {
namespace {

using nlohmann::json;

const std::string kCluster = std::string(STRATA_SOURCE_DIR) + "/tools/netns-cluster";

class LiveAcrossHosts : public ::testing::Test {
 public:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "needs root for network namespaces (tools/netns-cluster)";
    if (std::system("ip netns list >/dev/null 2>&1") != 0) GTEST_SKIP() << "`ip netns` is unavailable";
    name_ = cat("slh", getpid() % 100000);
    state_ = "/tmp/netns-cluster-" + name_;
    Proc r = run({kCluster, "up", "--name", name_, "--hosts", "2", "--ranks-per-host", "2", "--private-shm"}, {}, 60);
    ASSERT_EQ(r.exit_code(), 0) << r.output();
    up_ = true;
  }
  void TearDown() override {
    if (up_) run({kCluster, "down", "--name", name_}, {}, 60);
  }
  std::string h(int i) const { return cat(name_, "-h", i); }
  // The launch across the two hosts.
  std::string hosts() const {
    return cat("--hosts ", h(0), ":2,", h(1), ":2 --backend tcp --rsh-agent ", state_, "/rsh-agent ");
  }
  // After the job: nothing of `run` in any host's /dev/shm, this machine's, or its processes.
  void expect_nothing_left(const std::string& run, const std::string& why) {
    test::expect_nothing_left(run, why);
    for (int i = 0; i < 2; ++i)
      for (const auto& e : std::filesystem::directory_iterator(cat(state_, "/shm/", h(i))))
        EXPECT_NE(e.path().filename().string().rfind("strata-", 0), 0u)
            << "left on " << h(i) << ": " << e.path() << "; " << why;
  }
  std::string name_, state_;
  bool up_ = false;
};

// Rank `rank` of 4 (2 on each host) kills itself as step `step` starts under --recovery shrink
// at ZeRO 1: the 3 survivors continue, and equal an uninterrupted 4-rank run up to the step
// they loaded and a 3-rank run resumed from its disk checkpoint there after it, bit for bit
// (the references run on one host over the same tcp backend: the placement changes no number).
TEST_F(LiveAcrossHosts, SurvivorsOnBothHostsEqualTheSmallerWorld) {
  std::random_device rd;
  const unsigned seed = rd();
  std::mt19937 gen(seed);
  const int rank = std::uniform_int_distribution<int>(0, 3)(gen);
  const int step = std::uniform_int_distribution<int>(3, 6)(gen);
  const std::string why = cat("rank ", rank, " killed at step ", step, " (seed ", seed, ")");
  TempDir dir("live_hosts");
  const std::string run = dir.file("run");
  RunResult r = run_strata(live_run(run, hosts() + "--zero 1 --mem-ckpt-every 1 --recovery shrink --inject kill "
                                    "--inject-rank " + std::to_string(rank) + " --inject-step " + std::to_string(step)),
                           dump_env(dir), Streams::separate, 180);
  ASSERT_EQ(r.status, 0) << why << "\n" << r.err;
  const int64_t from = live_resume_step(r.err);
  ASSERT_TRUE(from == step - 1 || from == step - 2) << why << "\n" << r.err;
  EXPECT_NE(r.err.find(cat("live recovery: rank ", rank, " was killed by signal 9 (Killed) at step ", step,
                           "; continuing on 3 rank(s)")),
            std::string::npos)
      << why << "\n" << r.err;

  const std::string ref4 = dir.file("ref4"), ref3 = dir.file("ref3");
  RunResult a = run_strata(live_run(ref4, "--nproc 4 --backend tcp --zero 1 --ckpt-every 1 --ckpt-keep 0"),
                           dump_env(dir), Streams::separate, 120);
  ASSERT_EQ(a.status, 0) << a.err;
  char step_dir[32];
  std::snprintf(step_dir, sizeof step_dir, "/ckpt/step-%06lld", (long long)from);
  RunResult b = run_strata(live_run(ref3, "--nproc 3 --backend tcp --zero 1 --resume " + ref4 + step_dir),
                           dump_env(dir), Streams::separate, 120);
  ASSERT_EQ(b.status, 0) << b.err;
  const auto live = steps_of(run), before = steps_of(ref4), after = steps_of(ref3);
  ASSERT_EQ(live.size(), 8u) << why << "\n" << r.err;
  ASSERT_EQ(after.size(), size_t(8 - from)) << b.err;
  for (int64_t s = 0; s < 8; ++s) {
    const auto& want = s < from ? before[size_t(s)] : after[size_t(s - from)];
    EXPECT_EQ(live[size_t(s)], want) << why << ": step " << s + 1;
  }
  const json summary = json::parse(read_file(run + "/summary.json"));
  ASSERT_EQ(summary["live_recovery"].size(), 1u) << summary.dump();
  EXPECT_EQ(summary["live_recovery"][0]["world_before"], 4);
  EXPECT_EQ(summary["live_recovery"][0]["world_after"], 3);
  EXPECT_EQ(summary["live_recovery"][0]["resumed_from"], "memory");
  expect_nothing_left(run, why);
}

// The survivors of a death sit on other hosts than the old ranks of their new names: rank 1
// (host 0) dies, and the new ranks 1 and 2 are the old 2 and 3 (host 1). Once re-formed, each
// host's /dev/shm holds the segments of its own ranks only: host 0 no longer the dead rank's
// "rank1" (which would read as a copy of the new rank 1), host 1 no longer "rank3".
TEST_F(LiveAcrossHosts, EachHostKeepsOnlyItsRanksSegmentsAfterAReFormation) {
  TempDir dir("live_hosts_names");
  const std::string run = dir.file("run");
  Proc p = start({"/bin/sh", "-c", "exec " + std::string(STRATA_BINARY) + " " +
                  live_run(run, hosts() + "--zero 1 --mem-ckpt-every 1 --recovery shrink --inject kill "
                           "--inject-rank 1 --inject-step 10", 3000)},
                 {{"STRATA_DUMP_DIR", dir.str()}}, Streams::separate);
  const std::string key = segment_key(run);
  auto names_on = [&](int host) {
    std::vector<std::string> out;
    for (const auto& e : std::filesystem::directory_iterator(cat(state_, "/shm/", h(host)))) {
      const std::string f = e.path().filename().string();
      if (f.rfind("strata-mem-" + key, 0) == 0) out.push_back(f.substr(f.rfind('-') + 1));  // not the job's markers
    }
    std::sort(out.begin(), out.end());
    return out;
  };
  // Once the 3-rank world has trained some steps past its re-formation.
  bool seen = false;
  for (int i = 0; i < 6000 && !seen; ++i) {
    seen = occurrences(p.err_path, "strata train: live recovery: rank 1") > 0 &&
           newest_step(run + "/metrics.jsonl") > 30;
    if (!seen) usleep(10000);
  }
  const std::vector<std::string> h0 = names_on(0), h1 = names_on(1);
  ASSERT_TRUE(wait_for(p, 120)) << p.err;
  ASSERT_TRUE(seen) << read_file(p.err_path);
  EXPECT_EQ(p.exit_code(), 0) << p.err;
  EXPECT_EQ(h0, std::vector<std::string>{"rank0"}) << p.err;
  EXPECT_EQ(h1, (std::vector<std::string>{"rank1", "rank2"})) << p.err;
  expect_nothing_left(run, "");
}

// Under --tp 2 each host holds one data-parallel replica (tp peers are neighbours). A random
// rank is killed: the launcher kills its tp peer on the same host, the other host's replica
// goes on alone from the copies, and a replica of 2 replacements starts on the lost replica's
// host and joins (with --mem-ckpt-replicas 1, off while one host holds the world). Every step
// is recorded once; nothing is left on either host. (The numbers equal the one-host runs':
// LiveRecovery.AWholeModelParallelReplicaGoesAndAReplicaOfReplacementsJoins.)
TEST_F(LiveAcrossHosts, AHostsTensorParallelReplicaGoesAndAReplicaOfReplacementsJoinsThere) {
  std::random_device rd;
  const unsigned seed = rd();
  std::mt19937 gen(seed);
  const int rank = std::uniform_int_distribution<int>(0, 3)(gen);
  const std::string why = cat("rank ", rank, " killed (seed ", seed, ")");
  TempDir dir("live_hosts_tp");
  const std::string run = dir.file("run");
  const int steps = 1500;
  // The lost replica's copies are read from their replicas on the surviving host (each host
  // has its own /dev/shm), which trail by the replica thread's age (paced at 20 MB/s, each
  // chunk waiting for a gap in the training's traffic: a few steps, many under load). When no
  // replica had landed by the kill, the survivors rightly continue from step 0 and say so;
  // that depends on the load, not on the program, so the case runs again with a later kill
  // (up to 3 times) until the replicas are what it resumes from. No disk checkpoint is taken.
  // The smaller world waits at its next step boundary for the replacements (the test knob), so
  // they join from the copy of the step after its re-formation, which their host may also hold
  // from the 4-rank world, in that world's layout: only the smaller world's copy is read.
  RunResult r;
  int kill_at = 0;
  int64_t k = 0;
  for (int attempt = 0; attempt < 3 && k == 0; ++attempt) {
    kill_at = std::array<int, 3>{20, 100, 300}[size_t(attempt)];  // the join still comes well before 1500
    std::filesystem::remove_all(run);
    std::string cmd = live_run(run, hosts() + cat("--tp 2 --zero 1 --mem-ckpt-every 1 --mem-ckpt-replicas 1 "
                                                 "--recovery live --inject kill --inject-rank ", rank,
                                                 " --inject-step ", kill_at), steps);
    cmd.replace(cmd.find("--layers 1"), std::strlen("--layers 1"), "--layers 2");
    r = run_strata(cmd, dump_env(dir) + "STRATA_LIVE_AWAIT_JOIN=1 ", Streams::separate, 180);
    ASSERT_EQ(r.status, 0) << why << "\n" << r.err;
    k = live_resume_step(r.err, 0);
    ASSERT_GE(k, 0) << why << "\n" << r.err;
  }
  const int mate = rank ^ 1, host = rank / 2;
  EXPECT_NE(r.err.find(cat("strata launch: rank ", mate, " goes with rank ", rank, "'s data-parallel replica (killed)")),
            std::string::npos) << why << "\n" << r.err;
  EXPECT_NE(r.err.find(cat("strata launch: replacements for ranks ", 2 * host, ", ", 2 * host + 1,
                           " join; live recovery: the job goes on with 4 rank(s) (world 2)")),
            std::string::npos) << why << "\n" << r.err;
  EXPECT_NE(r.err.find(cat("mem-ckpt: replicas off: all 2 ranks run on one host (", h(1 - host), ")")),
            std::string::npos) << why << "\n" << r.err;
  EXPECT_TRUE(k >= 1 && k < kill_at) << why << "\n" << r.err;
  EXPECT_GT(live_resume_step(r.err, 1), k) << why << "\n" << r.err;
  expect_every_step_once(run, steps, why);
  const json summary = json::parse(read_file(run + "/summary.json"));
  ASSERT_EQ(summary["live_recovery"].size(), 2u) << why << "\n" << r.err;
  EXPECT_EQ(summary["live_recovery"][0]["world_after"], 2) << why;
  EXPECT_EQ(summary["world"], 4) << why;
  expect_nothing_left(run, why);
}

// A seeded schedule of 20 kills under --recovery live across the two hosts: each time the
// world is whole again, a random rank (on either host) is SIGKILLed 1-3 steps later, and a
// replacement starts on its host and joins. The job ends well, every step is recorded once,
// every death and join is in summary.json, and nothing of the job remains on any host.
TEST_F(LiveAcrossHosts, SeededKillsEachFollowedByAJoin) {
  std::random_device rd;
  const unsigned seed = rd();
  std::mt19937 gen(seed);
  const int kills = 20;
  // The survivors of each death wait at the next step boundary for the replacement (the test
  // knob): 20 kills, each 1-3 steps after a join, fit well in 1500 steps.
  const int steps = 1500;
  TempDir dir("live_hosts_kills");
  const std::string run = dir.file("run");
  Proc p = start({"/bin/sh", "-c", "exec " + std::string(STRATA_BINARY) + " " +
                  live_run(run, hosts() + "--zero 1 --mem-ckpt-every 1 --recovery live", steps)},
                 {{"STRATA_DUMP_DIR", dir.str()}, {"STRATA_LIVE_AWAIT_JOIN", "1"}}, Streams::separate);
  const std::string why = cat("seed ", seed);
  if (!deal_seeded_kills(p, run, 4, kills, gen, why)) return;
  ASSERT_TRUE(wait_for(p, 300)) << why << "\n" << p.err;
  ASSERT_EQ(p.exit_code(), 0) << why << "\n" << p.err;
  expect_every_step_once(run, steps, why);
  const json summary = json::parse(read_file(run + "/summary.json"));
  EXPECT_EQ(summary["live_recovery"].size(), size_t(2 * kills)) << why << "\n" << p.err;
  if (!summary["live_recovery"].empty())
    std::printf("%d kills across 2 hosts (%s): the last re-formation at step %lld of %d\n", kills, why.c_str(),
                (long long)summary["live_recovery"].back().value("resumed_step", int64_t(-1)), steps);
  EXPECT_EQ(summary["world"], 4) << why;
  expect_nothing_left(run, why);
}

}  // namespace
}  // namespace strata::test

namespace strata::test {
namespace {

// Hosts of different CPU kinds, on one machine: host 1's ranks are made to choose as a CPU
// without x86-64-v3 would (an rsh agent that adds STRATA_ISA=x86-64-v2 to their command
// line), host 0's choose the best this CPU has. Each rank picks its own kernels and the start
// line names both choices with their ranks; the ZeRO 0 replicas end with the same states, bit
// for bit (the update rounds alike on every level), and the losses follow a run on one kind
// within the layout tolerance (the levels' products differ by fused multiply-adds only).
// Replica groups, one per host (DiLoCo across sites): a rank of host 1's group dies mid-round;
// the launcher stops its group, host 0's group goes on alone from its own copies (host 1's
// copies, on host 1 only, are not needed) and leaves the lost group out of the round's outer
// sync: its losses up to the sync equal the uninterrupted run's, bit for bit. The replacement
// group starts on host 1 and joins at the end of a round; nothing is left on either host.
TEST_F(LiveAcrossHosts, AHostsReplicaGroupIsLeftOutOfTheRoundAndRejoinsThere) {
  std::random_device rd;
  const unsigned seed = rd();
  const int rank = 2 + int(seed % 2), H = 4, steps = 12, kill_at = 6;
  const std::string why = cat("rank ", rank, " killed at step ", kill_at, " (seed ", seed, ")");
  TempDir dir("live_hosts_groups");
  const std::string groups = cat("--replica-groups 2 --inner-steps ", H, " --zero 1 --mem-ckpt-every 1 --recovery live ");
  const std::string ref = dir.file("ref"), run = dir.file("run");
  RunResult a = run_strata(live_run(ref, "--nproc 4 --backend tcp " + groups, steps), dump_env(dir), Streams::separate, 120);
  ASSERT_EQ(a.status, 0) << a.err;
  RunResult r = run_strata(live_run(run, hosts() + groups + cat("--inject kill --inject-rank ", rank, " --inject-step ", kill_at), steps),
                           dump_env(dir) + "STRATA_LIVE_AWAIT_JOIN=1 ", Streams::separate, 180);
  ASSERT_EQ(r.status, 0) << why << "\n" << r.err;
  EXPECT_NE(r.err.find(cat("strata launch: rank ", rank ^ 1, " goes with rank ", rank)), std::string::npos)
      << why << "\n" << r.err;
  const int64_t joined = live_resume_step(r.err, 1);
  ASSERT_GT(joined, kill_at) << why << "\n" << r.err;
  EXPECT_EQ(joined % H, 0) << why << "\n" << r.err;
  const std::vector<json> want = group_losses(ref), got = group_losses(run);
  ASSERT_EQ(got.size(), size_t(steps)) << why << "\n" << r.err;
  for (int s = 1; s <= steps; ++s) {
    const bool lost = s >= kill_at && s <= joined;
    EXPECT_EQ(got[size_t(s - 1)][1].is_null(), lost) << "step " << s << "; " << why;
    if (s <= 2 * H) {
      EXPECT_EQ(got[size_t(s - 1)][0], want[size_t(s - 1)][0]) << "step " << s << "; " << why;
    }
  }
  EXPECT_NE(got[size_t(2 * H)][0], want[size_t(2 * H)][0]) << why;  // the sync without group 1 moved group 0
  const json summary = json::parse(read_file(run + "/summary.json"));
  ASSERT_EQ(summary["live_recovery"].size(), 2u) << why << "\n" << r.err;
  EXPECT_EQ(summary["live_recovery"][0]["groups_after"], json({0})) << why;
  EXPECT_EQ(summary["live_recovery"][1]["groups_after"], json({0, 1})) << why;
  EXPECT_EQ(summary["world"], 4) << why;
  expect_nothing_left(run, why);
}

TEST_F(LiveAcrossHosts, HostsOfDifferentCpuKindsEachPickTheirOwnKernels) {
  if (!strata::kernels::isa_available(strata::kernels::Isa::v3))
    GTEST_SKIP() << "this CPU has only the baseline level: no second kind to force";
  TempDir dir("mixed_cpus");
  const std::string agent = dir.file("agent");
  {
    std::ofstream a(agent);
    a << "#!/bin/sh\nwhile [ $# -gt 0 ] && [ \"${1#-}\" != \"$1\" ]; do shift; done\n"
      << "host=$1; shift\n"
      << "if [ \"$host\" = " << h(1) << " ]; then\n"
      << "  exec " << state_ << "/rsh-agent \"$host\" \"$(printf '%s' \"$*\" | "
      << "sed 's/^exec env /exec env STRATA_ISA=x86-64-v2 /')\"\nfi\n"
      << "exec " << state_ << "/rsh-agent \"$host\" \"$@\"\n";
  }
  ASSERT_EQ(::chmod(agent.c_str(), 0755), 0);
  const std::string run = dir.file("run"), ref = dir.file("ref");
  RunResult r = run_strata(live_run(run, cat("--hosts ", h(0), ":2,", h(1), ":2 --backend tcp --rsh-agent ",
                                             agent, " --zero 0")),
                           "", Streams::separate, 180);
  ASSERT_EQ(r.status, 0) << r.err;
  const std::string best = strata::kernels::isa_name(strata::kernels::isa());
  EXPECT_NE(r.out.find(cat("kernels x86-64-v2 on ranks 2-3, ", best, " on ranks 0-1,")), std::string::npos)
      << r.out;
  const json summary = json::parse(read_file(run + "/summary.json"));
  EXPECT_EQ(summary["dp_replicas_identical"], true) << summary.dump();
  EXPECT_EQ(summary["kernels"]["isa"], best);
  RunResult a = run_strata(live_run(ref, "--nproc 4 --backend tcp --zero 0"), "", Streams::separate, 120);
  ASSERT_EQ(a.status, 0) << a.err;
  const json ref_summary = json::parse(read_file(ref + "/summary.json"));
  EXPECT_EQ(ref_summary["dp_replicas_identical"], true);
  const auto mixed = steps_of(run), one_kind = steps_of(ref);
  ASSERT_EQ(mixed.size(), one_kind.size());
  for (size_t s = 0; s < mixed.size(); ++s)
    EXPECT_NEAR(mixed[s].first, one_kind[s].first, 1e-5 * std::fabs(one_kind[s].first)) << "step " << s + 1;
}

}  // namespace
}  // namespace strata::test
