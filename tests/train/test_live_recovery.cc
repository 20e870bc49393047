// Live recovery (`strata train --recovery shrink|live`, train/distributed.cc): a rank
// SIGKILLed mid-run does not stop the job; the survivors re-form a world of one rank fewer in
// their own processes, load the newest step every old rank's in-memory copy holds (the dead
// rank's included, resharded at ZeRO 1), and continue. Their later losses equal, bit for bit,
// a run that never failed, resumed from disk on the smaller world at the step the recovery
// loaded. Under live a replacement then joins at a step boundary, and the steps after it equal
// a run resumed from disk on the original world at that step. No process, segment or marker of
// the job remains; bad flags are one line before any rank starts.
#include <gtest/gtest.h>

#include <dirent.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "ckpt/mem_slots.h"
#include "cli_util.h"
#include "live_util.h"
#include "core/error.h"

namespace strata::test {
namespace {

using nlohmann::json;


// Kills rank `rank` of 3 as step `step` starts under --recovery live at `zero`; the two
// survivors must continue and end as a 2-rank run resumed from disk at the step they loaded.
void kill_one_of_three(const std::string& zero, int rank, int step, const std::string& why) {
  TempDir dir("live_kill");
  const std::string run = dir.file("run");
  RunResult r = run_strata(live_run(run, "--nproc 3 " + zero + " --mem-ckpt-every 1 --recovery shrink "
                                         "--inject kill --inject-rank " + std::to_string(rank) +
                                         " --inject-step " + std::to_string(step)),
                           dump_env(dir), Streams::separate, 120);
  ASSERT_EQ(r.status, 0) << why << "\n" << r.err;
  const int64_t from = live_resume_step(r.err);
  // step - 1 steps were done; the dead rank's newest copy may still have been in its commit.
  ASSERT_TRUE(from == step - 1 || from == step - 2) << why << "\n" << r.err;
  EXPECT_NE(r.err.find(cat("strata launch: rank ", rank, " was killed by signal 9")), std::string::npos)
      << why << "\n" << r.err;
  EXPECT_NE(r.err.find(cat("live recovery: rank ", rank, " was killed by signal 9 (Killed) at step ", step,
                           "; continuing on 2 rank(s)")),
            std::string::npos)
      << why << "\n" << r.err;

  // The run that never failed, on 3 ranks with a checkpoint after every step; then from the
  // step the recovery loaded, on 2 ranks.
  const std::string ref3 = dir.file("ref3"), ref2 = dir.file("ref2");
  RunResult a = run_strata(live_run(ref3, "--nproc 3 " + zero + " --ckpt-every 1 --ckpt-keep 0"),
                           dump_env(dir), Streams::separate, 120);
  ASSERT_EQ(a.status, 0) << a.err;
  char step_dir[32];
  std::snprintf(step_dir, sizeof step_dir, "/ckpt/step-%06lld", (long long)from);
  RunResult b = run_strata(live_run(ref2, "--nproc 2 " + zero + " --resume " + ref3 + step_dir),
                           dump_env(dir), Streams::separate, 120);
  ASSERT_EQ(b.status, 0) << b.err;

  const auto live = steps_of(run), before = steps_of(ref3), after = steps_of(ref2);
  ASSERT_EQ(live.size(), 8u) << why << "\n" << r.err;
  ASSERT_EQ(after.size(), size_t(8 - from)) << b.err;
  for (int64_t s = 0; s < 8; ++s) {
    const auto& want = s < from ? before[size_t(s)] : after[size_t(s - from)];
    EXPECT_EQ(live[size_t(s)].first, want.first) << why << ": step " << s + 1;
    EXPECT_EQ(live[size_t(s)].second, want.second) << why << ": tokens of step " << s + 1;
  }
  const json summary = json::parse(read_file(run + "/summary.json"));
  ASSERT_EQ(summary["live_recovery"].size(), 1u) << summary.dump();
  const json& rec = summary["live_recovery"][0];
  EXPECT_EQ(rec["world_before"], 3);
  EXPECT_EQ(rec["world_after"], 2);
  EXPECT_EQ(rec["resumed_step"], from);
  EXPECT_EQ(rec["failed_step"], step);
  EXPECT_EQ(summary["world"], 2);

  expect_nothing_left(run, why);
}

TEST(LiveRecovery, SurvivorsContinueAsTheSmallerWorldResumedFromDisk) {
  std::random_device rd;
  const unsigned seed = rd();
  std::mt19937 gen(seed);
  for (const std::string zero : {"--zero 1", "--zero 0"}) {
    const int rank = std::uniform_int_distribution<int>(0, 2)(gen);
    const int step = std::uniform_int_distribution<int>(3, 6)(gen);
    kill_one_of_three(zero, rank, step,
                      cat(zero, ", rank ", rank, " killed at step ", step, " (seed ", seed, ")"));
  }
}

// The race three slots close, at ZeRO 0 (where nothing after its gradients holds the peers
// back): rank 1's commit of its copy of step 4 outlasts step 5, which its peers finish and copy
// before it dies. It holds step 3 and an incomplete 4; its peers hold 3, 4 and 5 (with two
// slots they would have written 5 over 3, and no step would be common: a restart from step 0).
TEST(LiveRecovery, AKillDuringTheCommitAtZeroZeroStillFindsACommonStep) {
  TempDir dir("live_commit");
  const std::string run = dir.file("run");
  RunResult r = run_strata(live_run(run, "--nproc 3 --zero 0 --mem-ckpt-every 1 --recovery shrink "
                                         "--inject kill-during-mem-commit --inject-rank 1 --inject-step 4"),
                           dump_env(dir), Streams::separate, 120);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.err.find("mem-ckpt: a copy every 1 step(s) in /dev/shm"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(": 3 slots, "), std::string::npos) << r.err;
  EXPECT_EQ(live_resume_step(r.err), 3) << r.err;
  EXPECT_NE(r.err.find("live recovery: rank 1 was killed by signal 9 (Killed)"), std::string::npos) << r.err;
  const json summary = json::parse(read_file(run + "/summary.json"));
  ASSERT_EQ(summary["live_recovery"].size(), 1u) << summary.dump();
  EXPECT_EQ(summary["live_recovery"][0]["resumed_step"], 3);
  EXPECT_EQ(summary["live_recovery"][0]["resumed_from"], "memory");
  EXPECT_EQ(summary["mem_ckpt"]["slots"], 3);
  EXPECT_EQ(steps_of(run).size(), 8u);
  expect_nothing_left(run, "kill during the commit");
}

// Under --recovery live the replacement joins: 3 ranks -> 2 at the kill -> 3 at a later step
// boundary S. Steps up to the loaded step k equal the 3-rank run that never failed, steps
// k+1..S a 2-rank run resumed from its step k, and steps after S a 3-rank run resumed from
// that one's step S, bit for bit.
TEST(LiveRecovery, AReplacementJoinsAndTheWorldGrowsBack) {
  TempDir dir("live_join");
  // The survivors wait at a step boundary for the replacement (the test knob), so it joins
  // before the end however slow its start; the kill late enough that the reference runs below
  // save few checkpoints (every k steps).
  const int steps = 60, kill_at = 20;
  const std::string run = dir.file("run");
  RunResult r = run_strata(live_run(run, "--nproc 3 --zero 1 --mem-ckpt-every 1 --recovery live "
                                         "--inject kill --inject-rank 1 --inject-step " +
                                             std::to_string(kill_at), steps),
                           dump_env(dir) + "STRATA_LIVE_AWAIT_JOIN=1 ", Streams::separate, 120);
  ASSERT_EQ(r.status, 0) << r.err;
  const int64_t k = live_resume_step(r.err, 0), joined = live_resume_step(r.err, 1);
  ASSERT_TRUE(k == kill_at - 1 || k == kill_at - 2) << r.err;
  ASSERT_GT(joined, k) << "the replacement did not join before the run ended\n" << r.err;
  EXPECT_NE(r.err.find("strata launch: a replacement for rank 1 joins; live recovery: the job goes "
                       "on with 3 rank(s) (world 2)"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find(cat("live recovery: a replacement for rank 1 joins at step ", joined,
                           "; continuing on 3 rank(s) from the in-memory copy of step ", joined)),
            std::string::npos)
      << r.err;
  const json summary = json::parse(read_file(run + "/summary.json"));
  ASSERT_EQ(summary["live_recovery"].size(), 2u) << summary.dump();
  EXPECT_EQ(summary["live_recovery"][1]["world_before"], 2);
  EXPECT_EQ(summary["live_recovery"][1]["world_after"], 3);
  EXPECT_EQ(summary["live_recovery"][1]["steps_lost"], 0);
  EXPECT_EQ(summary["world"], 3);

  const std::string ref3 = dir.file("ref3"), ref2 = dir.file("ref2"), ref3b = dir.file("ref3b");
  auto step_dir = [](const std::string& run_dir, int64_t step) {
    char name[32];
    std::snprintf(name, sizeof name, "/ckpt/step-%06lld", (long long)step);
    return run_dir + name;
  };
  RunResult a = run_strata(live_run(ref3, "--nproc 3 --zero 1 --ckpt-every " + std::to_string(k) +
                                              " --ckpt-keep 0", steps),
                           dump_env(dir), Streams::separate, 120);
  ASSERT_EQ(a.status, 0) << a.err;
  RunResult b = run_strata(live_run(ref2, "--nproc 2 --zero 1 --ckpt-every " + std::to_string(joined) +
                                              " --ckpt-keep 0 --resume " + step_dir(ref3, k), steps),
                           dump_env(dir), Streams::separate, 120);
  ASSERT_EQ(b.status, 0) << b.err;
  RunResult c = run_strata(live_run(ref3b, "--nproc 3 --zero 1 --resume " + step_dir(ref2, joined), steps),
                           dump_env(dir), Streams::separate, 120);
  ASSERT_EQ(c.status, 0) << c.err;
  const auto live = steps_of(run), first = steps_of(ref3), second = steps_of(ref2), third = steps_of(ref3b);
  ASSERT_EQ(live.size(), size_t(steps)) << r.err;
  ASSERT_EQ(second.size(), size_t(steps - k));
  ASSERT_EQ(third.size(), size_t(steps - joined));
  for (int64_t s = 0; s < steps; ++s) {
    const auto& want = s < k ? first[size_t(s)] : s < joined ? second[size_t(s - k)] : third[size_t(s - joined)];
    EXPECT_EQ(live[size_t(s)], want) << "step " << s + 1 << " (loaded " << k << ", joined " << joined << ")";
  }
  expect_nothing_left(run, "");
}

// A whole data-parallel replica of a model-parallel job (`layout`: tp 2, pp 2 or cp 2, 2
// replicas of 2 ranks): a random rank is killed, the launcher kills the rest of its replica, and the
// other replica goes on alone from the in-memory copies (each survivor keeps its tp rank, cp
// rank or stage and reads only the copies of its tp rank and stage); then a replica of replacements joins as data-
// parallel index 1. Steps up to the loaded step k equal the 4-rank run that never failed,
// steps k+1..S the 2-rank replica resumed from its step k, and steps after S the 4-rank run
// resumed from that one's step S, bit for bit.
void replica_dies_and_a_replica_joins(const std::string& layout, int rank, const std::string& why) {
  TempDir dir("live_replica");
  // The survivors wait at a step boundary for the replacements (the test knob), so the join
  // comes before the end however slow their start.
  const int steps = 60, kill_at = 20;
  auto model = [&](const std::string& run_dir, const std::string& extra) {
    std::string cmd = live_run(run_dir, "--nproc 4 " + layout + " --zero 1 " + extra, steps);
    cmd.replace(cmd.find("--layers 1"), std::strlen("--layers 1"), "--layers 2");
    return cmd;
  };
  const std::string run = dir.file("run");
  RunResult r = run_strata(model(run, "--mem-ckpt-every 1 --recovery live --inject kill --inject-rank " +
                                          std::to_string(rank) + " --inject-step " + std::to_string(kill_at)),
                           dump_env(dir) + "STRATA_LIVE_AWAIT_JOIN=1 ", Streams::separate, 180);
  ASSERT_EQ(r.status, 0) << why << "\n" << r.err;
  const int64_t k = live_resume_step(r.err, 0), joined = live_resume_step(r.err, 1);
  ASSERT_TRUE(k == kill_at - 1 || k == kill_at - 2) << why << "\n" << r.err;
  ASSERT_GT(joined, k) << why << ": the replacements did not join before the run ended\n" << r.err;
  // Ranks (p, d, i) = (p * 2 + d) * 2 + i under tp 2 or cp 2 (i: the tp or cp rank), p * 2 + d
  // under pp 2: the dead rank's replica mate, and the members of the replacement replica by
  // the ranks they replace.
  const bool stages = layout.find("--pp") != std::string::npos;
  const int mate = stages ? (rank ^ 2) : (rank ^ 1);
  const int first = std::min(rank, mate), second = std::max(rank, mate);
  EXPECT_NE(r.err.find(cat("strata launch: rank ", mate, " goes with rank ", rank,
                           "'s data-parallel replica (killed)")),
            std::string::npos)
      << why << "\n" << r.err;
  EXPECT_NE(r.err.find(cat("strata launch: replacements for ranks ", first, ", ", second,
                           " join; live recovery: the job goes on with 4 rank(s) (world 2)")),
            std::string::npos)
      << why << "\n" << r.err;
  const json summary = json::parse(read_file(run + "/summary.json"));
  ASSERT_EQ(summary["live_recovery"].size(), 2u) << why << "\n" << summary.dump();
  EXPECT_EQ(summary["live_recovery"][0]["world_before"], 4) << why;
  EXPECT_EQ(summary["live_recovery"][0]["world_after"], 2) << why;
  EXPECT_EQ(summary["live_recovery"][1]["world_after"], 4) << why;
  EXPECT_EQ(summary["world"], 4) << why;

  auto step_dir = [](const std::string& run_dir, int64_t step) {
    char name[32];
    std::snprintf(name, sizeof name, "/ckpt/step-%06lld", (long long)step);
    return run_dir + name;
  };
  const std::string ref4 = dir.file("ref4"), ref2 = dir.file("ref2"), ref4b = dir.file("ref4b");
  RunResult a = run_strata(model(ref4, "--ckpt-every " + std::to_string(k) + " --ckpt-keep 0"),
                           dump_env(dir), Streams::separate, 180);
  ASSERT_EQ(a.status, 0) << a.err;
  std::string two = model(ref2, "--ckpt-every " + std::to_string(joined) + " --ckpt-keep 0 --resume " +
                                    step_dir(ref4, k));
  two.replace(two.find("--nproc 4"), std::strlen("--nproc 4"), "--nproc 2");
  RunResult b = run_strata(two, dump_env(dir), Streams::separate, 180);
  ASSERT_EQ(b.status, 0) << b.err;
  RunResult c = run_strata(model(ref4b, "--resume " + step_dir(ref2, joined)), dump_env(dir),
                           Streams::separate, 180);
  ASSERT_EQ(c.status, 0) << c.err;
  const auto live = steps_of(run), one = steps_of(ref4), mid = steps_of(ref2), last = steps_of(ref4b);
  ASSERT_EQ(live.size(), size_t(steps)) << why << "\n" << r.err;
  ASSERT_EQ(mid.size(), size_t(steps - k));
  ASSERT_EQ(last.size(), size_t(steps - joined));
  for (int64_t s = 0; s < steps; ++s) {
    const auto& want = s < k ? one[size_t(s)] : s < joined ? mid[size_t(s - k)] : last[size_t(s - joined)];
    ASSERT_EQ(live[size_t(s)], want) << why << ": step " << s + 1 << " (loaded " << k << ", joined " << joined << ")";
  }
  expect_nothing_left(run, why);
}

TEST(LiveRecovery, AWholeModelParallelReplicaGoesAndAReplicaOfReplacementsJoins) {
  std::random_device rd;
  const unsigned seed = rd();
  std::mt19937 gen(seed);
  for (const std::string layout : {"--tp 2", "--pp 2", "--cp 2"}) {
    const int rank = std::uniform_int_distribution<int>(0, 3)(gen);
    replica_dies_and_a_replica_joins(layout, rank, cat(layout, ", rank ", rank, " killed (seed ", seed, ")"));
  }
}

// A rank killed as step 1 starts, before any copy is committed: the survivors start again
// from step 0 on the smaller world (no disk checkpoint either), and equal a run that was
// always that world, bit for bit.
TEST(LiveRecovery, ADeathBeforeTheFirstCopyStartsTheSmallerWorldAtStepZero) {
  TempDir dir("live_first");
  const std::string run = dir.file("run"), ref = dir.file("ref");
  RunResult r = run_strata(live_run(run, "--nproc 3 --zero 1 --mem-ckpt-every 1 --recovery shrink "
                                         "--inject kill --inject-rank 2 --inject-step 1"),
                           dump_env(dir), Streams::separate, 120);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.err.find("live recovery: rank 2 was killed by signal 9 (Killed) at step 1; continuing "
                       "on 2 rank(s) from step 0 (no step has a complete in-memory copy on every rank)"),
            std::string::npos)
      << r.err;
  RunResult b = run_strata(live_run(ref, "--nproc 2 --zero 1"), dump_env(dir), Streams::separate, 120);
  ASSERT_EQ(b.status, 0) << b.err;
  const auto live = steps_of(run), want = steps_of(ref);
  ASSERT_EQ(live.size(), 8u) << r.err;
  EXPECT_EQ(live, want);
  const json summary = json::parse(read_file(run + "/summary.json"));
  ASSERT_EQ(summary["live_recovery"].size(), 1u) << summary.dump();
  EXPECT_EQ(summary["live_recovery"][0]["resumed_from"], "start");
  expect_nothing_left(run, "");
}


// A seeded schedule of kills under --recovery live: each time the world is whole again, a
// random rank is SIGKILLed a random 1-3 steps later. The job ends well, every step is
// recorded once, and every death and join is in summary.json; nothing of the job remains.
TEST(LiveRecovery, SeededKillsEachFollowedByAJoin) {
  std::random_device rd;
  const unsigned seed = rd();
  std::mt19937 gen(seed);
  const int kills = 20;
  // Each death costs up to 2 steps and its survivors wait at the next step boundary for the
  // replacement (the test knob): 20 kills, each 1-3 steps after a join, fit well in 1500.
  const int steps = 1500;
  TempDir dir("live_kills");
  const std::string run = dir.file("run");
  Proc p = start({"/bin/sh", "-c", "exec " + std::string(STRATA_BINARY) + " " +
                  live_run(run, "--nproc 3 --zero 1 --mem-ckpt-every 1 --recovery live", steps)},
                 {{"STRATA_DUMP_DIR", dir.str()}, {"STRATA_LIVE_AWAIT_JOIN", "1"}}, Streams::separate);
  const std::string why = cat("seed ", seed);
  if (!deal_seeded_kills(p, run, 3, kills, gen, why)) return;
  ASSERT_TRUE(wait_for(p, 120)) << why << "\n" << p.err;
  ASSERT_EQ(p.exit_code(), 0) << why << "\n" << p.err;
  expect_every_step_once(run, steps, why);
  const json summary = json::parse(read_file(run + "/summary.json"));
  EXPECT_EQ(summary["live_recovery"].size(), size_t(2 * kills)) << why << "\n" << p.err;
  if (!summary["live_recovery"].empty())  // the margin the step count leaves the kills
    std::printf("%d kills (%s): the last re-formation at step %lld of %d\n", kills, why.c_str(),
                (long long)summary["live_recovery"].back().value("resumed_step", int64_t(-1)), steps);
  EXPECT_EQ(summary["world"], 3) << why;
  expect_nothing_left(run, why);
}

// A rank stopped (SIGSTOP) does not die: once a survivor's watchdog fires (--timeout), the
// launcher finds it stopped, kills it, and the others continue without it.
TEST(LiveRecovery, AStoppedRankIsKilledAndTheOthersContinue) {
  std::random_device rd;
  const unsigned seed = rd();
  std::mt19937 gen(seed);
  const int steps = 1000;
  TempDir dir("live_stop");
  const std::string run = dir.file("run");
  std::string cmd = live_run(run, "--nproc 3 --zero 1 --mem-ckpt-every 1 --recovery shrink", steps);
  cmd.replace(cmd.find("--timeout 20"), std::strlen("--timeout 20"), "--timeout 2");
  Proc p = start({"/bin/sh", "-c", "exec " + std::string(STRATA_BINARY) + " " + cmd},
                 {{"STRATA_DUMP_DIR", dir.str()}}, Streams::separate);
  const std::string why = cat("seed ", seed);
  const int64_t at = std::uniform_int_distribution<int>(3, 8)(gen);
  for (int i = 0; i < 6000 && newest_step(run + "/metrics.jsonl") < at; ++i) usleep(10000);
  const std::vector<pid_t> ranks = children_of(p.pid);
  ASSERT_EQ(ranks.size(), 3u) << why;
  const size_t victim = size_t(std::uniform_int_distribution<int>(0, 2)(gen));
  ASSERT_EQ(kill(ranks[victim], SIGSTOP), 0) << why;
  ASSERT_TRUE(wait_for(p, 120)) << why << "\n" << p.err;
  ASSERT_EQ(p.exit_code(), 0) << why << "\n" << p.err;
  EXPECT_NE(p.err.find("was stopped while its peers waited on it (killed); live recovery: the job "
                       "goes on with 2 rank(s)"),
            std::string::npos)
      << why << "\n" << p.err;
  expect_every_step_once(run, steps, why);
  const json summary = json::parse(read_file(run + "/summary.json"));
  ASSERT_EQ(summary["live_recovery"].size(), 1u) << why << "\n" << p.err;
  EXPECT_EQ(summary["live_recovery"][0]["world_after"], 2) << why;
  expect_nothing_left(run, why);
}

// A rank that hangs without dying or stopping (--inject hang: it sleeps in pause(), outside
// any collective) at a random step: its peers' watchdogs fire (--timeout 2) and they say their
// world broke; the hung rank never does, and the launcher kills it half a timeout later. The
// others go on without it, every step recorded once.
TEST(LiveRecovery, AHungRankIsKilledAndTheOthersContinue) {
  std::random_device rd;
  const unsigned seed = rd();
  std::mt19937 gen(seed);
  const int rank = std::uniform_int_distribution<int>(0, 2)(gen);
  const int at = std::uniform_int_distribution<int>(3, 8)(gen);
  TempDir dir("live_hang");
  const std::string run = dir.file("run");
  std::string cmd = live_run(run, cat("--nproc 3 --zero 1 --mem-ckpt-every 1 --recovery shrink --inject hang "
                                      "--inject-rank ", rank, " --inject-step ", at), 200);
  cmd.replace(cmd.find("--timeout 20"), std::strlen("--timeout 20"), "--timeout 2");
  const std::string why = cat("rank ", rank, " hung at step ", at, " (seed ", seed, ")");
  RunResult r = run_strata(cmd, dump_env(dir), Streams::separate, 120);
  ASSERT_EQ(r.status, 0) << why << "\n" << r.err;
  EXPECT_NE(r.err.find(cat("strata launch: rank ", rank, " did not answer its peers (hung: its world broke 1 s "
                           "ago and it did not say so; killed); live recovery: the job goes on with 2 rank(s)")),
            std::string::npos)
      << why << "\n" << r.err;
  expect_every_step_once(run, 200, why);
  const json summary = json::parse(read_file(run + "/summary.json"));
  ASSERT_EQ(summary["live_recovery"].size(), 1u) << why << "\n" << r.err;
  EXPECT_EQ(summary["live_recovery"][0]["world_after"], 2) << why;
  expect_nothing_left(run, why);
}

// Over the tcp backend down to one rank: the survivor of 2 goes on alone (a world of one
// needs no transport), every step recorded once, nothing left.
TEST(LiveRecovery, TwoRanksOverTcpShrinkToOne) {
  TempDir dir("live_tcp_one");
  const std::string run = dir.file("run");
  RunResult r = run_strata(live_run(run, "--nproc 2 --backend tcp --zero 1 --mem-ckpt-every 1 --recovery shrink "
                                         "--inject kill --inject-rank 1 --inject-step 5"),
                           dump_env(dir), Streams::separate, 120);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.err.find("live recovery: rank 1 was killed by signal 9 (Killed) at step 5; continuing on 1 rank(s) "
                       "from the in-memory copy of step "),
            std::string::npos)
      << r.err;
  expect_every_step_once(run, 8, "");
  const json summary = json::parse(read_file(run + "/summary.json"));
  EXPECT_EQ(summary["world"], 1);
  expect_nothing_left(run, "");
}

// The survivors end training while their replacement is being named: a rank dies in the last
// step with one copy every 8 steps, so the survivors start again at step 0 and pass no step
// boundary a larger world could join at (one every 8 steps, the last of them the end), whatever
// the replacement's start takes. Their final evaluation outlasts that start, so the launcher
// names it in a world the survivors never form. It is stopped with one line, and the job ends as
// the survivors' world of 1 (it waited forever before).
TEST(LiveRecovery, AReplacementNamedAfterTrainingEndedIsStoppedAndTheJobExitsZero) {
  TempDir dir("live_late");
  const std::string run = dir.file("run");
  std::string flags = live_run(run, "--nproc 2 --zero 1 --mem-ckpt-every 8 --recovery live --inject kill "
                                    "--inject-rank 1 --inject-step 7");
  flags.replace(flags.find("--eval-batches 1 "), 17, "--eval-batches 1500 ");
  RunResult r = run_strata(flags, dump_env(dir), Streams::separate, 120);
  ASSERT_EQ(r.status, 0) << r.err;
  const bool named = r.err.find("strata launch: a replacement for rank 1 joins") != std::string::npos;
  ASSERT_TRUE(named) << "the replacement was not named before the survivors ended\n" << r.err;
  EXPECT_NE(r.err.find("strata launch: the replacement for rank 1 was named in world 2 after the job's "
                       "training ended; stopped"),
            std::string::npos)
      << r.err;
  const json summary = json::parse(read_file(run + "/summary.json"));
  EXPECT_EQ(summary["world"], 1) << summary.dump();
  EXPECT_EQ(steps_of(run).size(), 8u);
  expect_nothing_left(run, "late replacement");
}

TEST(LiveRecovery, BadFlagsAreOneLineBeforeAnyRankStarts) {
  TempDir dir("live_bad");
  const std::string base = live_run(dir.file("run"), "");
  expect_one_line_errors(
      base, {{"--nproc 2 --recovery sometimes --mem-ckpt-every 1",
              "--recovery sometimes: expected restart"},
             {"--nproc 2 --recovery live", "--recovery live continues from the in-memory copies: it "
                                            "needs --mem-ckpt-every K"},
             {"--nproc 2 --tp 2 --recovery live --mem-ckpt-every 1",
              "--recovery live continues on the data-parallel replicas left after one dies: it needs "
              "--dp 2 or more, this run has 2 rank(s) = 2 per replica (tp 2 x cp 1 x pp 1) x dp 1"},
             {"--nproc 4 --ep 2 --experts 4 --recovery live --mem-ckpt-every 1",
              "--recovery live re-forms data-parallel replicas (tp x cp x pp groups) at ZeRO 0-2 with "
              "ep 1, this run has ep 2"},
             {"--nproc 2 --zero 3 --recovery shrink --mem-ckpt-every 1",
              "--recovery shrink re-forms data-parallel replicas (tp x cp x pp groups) at ZeRO 0-2 "
              "with ep 1, this run has ZeRO 3"},
             {"--recovery live --mem-ckpt-every 1", "--recovery live needs 2 or more ranks started by strata"},
             {"--hosts a:2,b:2 --backend mpi --recovery live --mem-ckpt-every 1",
              "(across hosts: OpenMPI cannot shrink a communicator)"},
             {"--nproc 4 --batch 4 --recovery live --mem-ckpt-every 1",
              "--recovery live continues on 3 rank(s) after a replica's death, and --batch 4"},
             {"--nproc 6 --tp 2 --batch 3 --recovery live --mem-ckpt-every 1",
              "--recovery live continues on 2 data-parallel replica(s) of 2 rank(s) after a replica's "
              "death, and --batch 3"}});
  EXPECT_FALSE(std::filesystem::exists(dir.file("run/metrics.jsonl")));
}

}  // namespace
}  // namespace strata::test
