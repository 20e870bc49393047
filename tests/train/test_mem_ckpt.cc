// In-memory checkpoints (`--mem-ckpt-every`, recovery/mem_checkpoints.h) end to end: a rank
// killed under the supervisor resumes from memory, losing at most one step, and the run ends
// bit-identical to one that never failed (dp 2 at ZeRO 1, and tp 2); a flipped byte or a copy
// killed half-way is caught by its checksum and the previous copy or the disk is used, said
// in one line; a crashed unsupervised run continues from memory with --resume auto, and a
// copy of another layout is ignored in one line; no segment outlives its job; and
// --spike-action rollback equals a run that never saw the spiked batch.
#include <gtest/gtest.h>

#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "ckpt/mem_slots.h"
#include "cli_util.h"

namespace strata::test {
namespace {

using nlohmann::json;


// Whether rank `rank`'s in-memory checkpoint segment of `run_dir` exists on this host.
bool segment_exists(const std::string& run_dir, int rank) {
  const std::string key =
      std::filesystem::weakly_canonical(std::filesystem::absolute(run_dir)).string();
  return std::filesystem::exists("/dev/shm" + ckpt::MemSegment::name_for(key, rank));
}

// One process, no supervisor, SIGKILLed as step 5 starts: its copies stay in /dev/shm.
void crash_unsupervised(const std::string& run_dir, const TempDir& dir) {
  RunResult r = run_strata(small_fault_run(run_dir, "--mem-ckpt-every 1 --inject kill --inject-step 5"),
                           dump_env(dir), Streams::separate);
  ASSERT_NE(r.status, 0);
  ASSERT_TRUE(segment_exists(run_dir, 0)) << r.err;
}

// The step of "resuming from the in-memory copy of step N" in `err`, -1 when absent.
int64_t memory_resume_step(const std::string& err) {
  const std::string key = "resuming from the in-memory copy of step ";
  const size_t at = err.find(key);
  return at == std::string::npos ? -1 : std::stoll(err.substr(at + key.size()));
}

TEST(MemCkpt, SupervisedKillResumesFromMemoryBitForBit) {
  std::random_device rd;
  const unsigned seed = rd();
  std::mt19937 gen(seed);
  for (const std::string layout : {"--nproc 2 --zero 1", "--nproc 2 --tp 2"}) {
    TempDir dir("mem_kill");
    RunResult ref = run_strata(small_fault_run(dir.file("ref"), layout), dump_env(dir), Streams::separate);
    ASSERT_EQ(ref.status, 0) << ref.err;
    const int rank = std::uniform_int_distribution<int>(0, 1)(gen);
    const int step = std::uniform_int_distribution<int>(3, 7)(gen);  // killed as step `step` starts
    const std::string what = layout + ", kill on rank " + std::to_string(rank) + " at step " +
                             std::to_string(step) + " (seed " + std::to_string(seed) + ")";
    RunResult r = run_strata(
        small_fault_run(dir.file("run"), layout + " --mem-ckpt-every 1 --ckpt-every 100 --max-restarts 1 "
                              "--inject kill --inject-rank " + std::to_string(rank) +
                              " --inject-step " + std::to_string(step)),
        dump_env(dir), Streams::separate);
    ASSERT_EQ(r.status, 0) << what << "\n" << r.err;
    // step - 1 steps were done; the newest copy may still have been in its commit.
    const int64_t from = memory_resume_step(r.err);
    EXPECT_TRUE(from == step - 1 || from == step - 2) << what << "\n" << r.err;
    EXPECT_NE(r.err.find("(disk: none;"), std::string::npos) << what << "\n" << r.err;
    EXPECT_NE(r.err.find("mem-ckpt: a copy every 1 step(s)"), std::string::npos) << r.err;
    const std::vector<double> a = run_dir_losses(dir.file("ref")), b = run_dir_losses(dir.file("run"));
    ASSERT_EQ(a.size(), 8u) << what;
    ASSERT_EQ(b.size(), 8u) << what;
    for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i], b[i]) << what << ": step " << i + 1;
    const json summary = json::parse(read_file(dir.file("run/summary.json")));
    EXPECT_GT(summary["mem_ckpt_bytes_per_rank"].get<int64_t>(), 0);
    EXPECT_EQ(summary["mem_ckpt"]["resumed_step"], from);
    for (int rk = 0; rk < 2; ++rk) EXPECT_FALSE(segment_exists(dir.file("run"), rk)) << what;
  }
}

// A rank killed in the commit of its copy of step 6, while its peer finished step 7 and wrote
// its copy: the supervised restart still finds a step every rank holds (the third slot) and
// loses at most two steps, not all of them, at ZeRO 0 and 1.
TEST(MemCkpt, AKillDuringTheCommitStillRestartsFromACommonStep) {
  for (const std::string layout : {"--nproc 2 --zero 0", "--nproc 2 --zero 1"}) {
    TempDir dir("mem_commit");
    RunResult ref = run_strata(small_fault_run(dir.file("ref"), layout), dump_env(dir), Streams::separate);
    ASSERT_EQ(ref.status, 0) << ref.err;
    RunResult r = run_strata(small_fault_run(dir.file("run"), layout + " --mem-ckpt-every 1 --max-restarts 2 "
                                             "--inject kill-during-mem-commit --inject-rank 1 --inject-step 6"),
                             dump_env(dir), Streams::separate);
    ASSERT_EQ(r.status, 0) << layout << "\n" << r.err;
    const int64_t from = memory_resume_step(r.err);
    EXPECT_TRUE(from == 5 || from == 4) << layout << "\n" << r.err;
    EXPECT_EQ(r.err.find("no step is held by every rank"), std::string::npos) << layout << "\n" << r.err;
    const std::vector<double> a = run_dir_losses(dir.file("ref")), b = run_dir_losses(dir.file("run"));
    ASSERT_EQ(b.size(), 8u) << layout;
    for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i], b[i]) << layout << ": step " << i + 1;
    EXPECT_EQ(json::parse(read_file(dir.file("run/summary.json")))["mem_ckpt"]["slots"], 3);
  }
}

TEST(MemCkpt, CorruptAndHalfWrittenCopiesAreCaughtByTheChecksum) {
  TempDir dir("mem_corrupt");
  const std::string layout = "--nproc 2 --zero 1";
  RunResult ref = run_strata(small_fault_run(dir.file("ref"), layout), dump_env(dir), Streams::separate);
  ASSERT_EQ(ref.status, 0) << ref.err;
  const std::vector<double> want = run_dir_losses(dir.file("ref"));

  // The complete copy of step 5 on rank 1 gets a byte flipped: step 4, the other slot.
  RunResult flipped = run_strata(
      small_fault_run(dir.file("flip"), layout + " --mem-ckpt-every 1 --max-restarts 1 --inject "
                                      "corrupt-mem-ckpt --inject-rank 1 --inject-step 5"),
      dump_env(dir), Streams::separate);
  ASSERT_EQ(flipped.status, 0) << flipped.err;
  EXPECT_NE(flipped.err.find("rank 1: ckpt: in-memory copy of step 5 (slot"), std::string::npos)
      << flipped.err;
  EXPECT_NE(flipped.err.find("failed its checksum"), std::string::npos) << flipped.err;
  EXPECT_EQ(memory_resume_step(flipped.err), 4) << flipped.err;
  EXPECT_NE(flipped.err.find("1 copy(ies) passed over"), std::string::npos) << flipped.err;
  EXPECT_EQ(run_dir_losses(dir.file("flip")), want);

  // Killed half-way through its only copy (step 4 of --mem-ckpt-every 4): rank 1 holds none,
  // so the disk checkpoint (step 2, or none yet) decides.
  RunResult half = run_strata(
      small_fault_run(dir.file("half"), layout + " --mem-ckpt-every 4 --ckpt-every 2 --max-restarts 1 "
                                      "--inject kill-during-mem-ckpt --inject-rank 1 --inject-step 4"),
      dump_env(dir), Streams::separate);
  ASSERT_EQ(half.status, 0) << half.err;
  EXPECT_NE(half.err.find("in-memory copy of step 4 (slot"), std::string::npos) << half.err;
  EXPECT_NE(half.err.find("is incomplete"), std::string::npos) << half.err;
  EXPECT_NE(half.err.find("1 rank(s) hold no usable copy"), std::string::npos) << half.err;
  EXPECT_NE(half.err.find("resuming from disk"), std::string::npos) << half.err;
  EXPECT_EQ(memory_resume_step(half.err), -1) << half.err;
  EXPECT_EQ(run_dir_losses(dir.file("half")), want);
  for (const char* run : {"flip", "half"})
    for (int rk = 0; rk < 2; ++rk) EXPECT_FALSE(segment_exists(dir.file(run), rk)) << run;
}

// Without a supervisor, a SIGKILLed process leaves its copies; --resume auto continues from
// them, and ignores (one line) a copy of another layout.
TEST(MemCkpt, ResumeAutoAfterACrashAndAnotherLayout) {
  TempDir dir("mem_auto");
  RunResult ref = run_strata(small_fault_run(dir.file("ref"), ""), dump_env(dir), Streams::separate);
  ASSERT_EQ(ref.status, 0) << ref.err;
  const std::string run = dir.file("run");
  crash_unsupervised(run, dir);

  RunResult resumed = run_strata(small_fault_run(run, "--mem-ckpt-every 1 --resume auto"), dump_env(dir),
                                 Streams::separate);
  ASSERT_EQ(resumed.status, 0) << resumed.err;
  const int64_t from = memory_resume_step(resumed.err);
  EXPECT_TRUE(from == 3 || from == 4) << resumed.err;
  EXPECT_EQ(run_dir_losses(run), run_dir_losses(dir.file("ref")));
  EXPECT_FALSE(segment_exists(run, 0)) << "the run ended: its copies go with it";

  const std::string other = dir.file("other");
  crash_unsupervised(other, dir);
  RunResult wider = run_strata(small_fault_run(other, "--nproc 2 --zero 1 --mem-ckpt-every 1 --resume auto"),
                               dump_env(dir), Streams::separate);
  ASSERT_EQ(wider.status, 0) << wider.err;
  EXPECT_NE(wider.err.find("was written at world 1 dp 1"), std::string::npos) << wider.err;
  EXPECT_NE(wider.err.find(", this run is world 2 dp 2"), std::string::npos) << wider.err;
  EXPECT_NE(wider.err.find("zero 1"), std::string::npos) << wider.err;  // and slots of another size
  EXPECT_NE(wider.err.find("; ignored"), std::string::npos) << wider.err;
  EXPECT_EQ(memory_resume_step(wider.err), -1) << wider.err;
  for (int rk = 0; rk < 2; ++rk) EXPECT_FALSE(segment_exists(other, rk));

  // A restart of a supervised job finds copies it did not write (this crashed run's, which
  // no supervisor started): ignored in one line, never loaded.
  const std::string foreign = dir.file("foreign");
  crash_unsupervised(foreign, dir);
  RunResult restarted = run_strata(small_fault_run(foreign, "--mem-ckpt-every 1"),
                                   dump_env(dir) + "STRATA_RESTART=1 STRATA_RUN_ID=job-b ",
                                   Streams::separate);
  ASSERT_EQ(restarted.status, 0) << restarted.err;
  EXPECT_NE(restarted.err.find("belongs to another job (unsupervised; this job is job-b); ignored"),
            std::string::npos)
      << restarted.err;
  EXPECT_EQ(memory_resume_step(restarted.err), -1) << restarted.err;
  EXPECT_FALSE(segment_exists(foreign, 0));
}

TEST(MemCkpt, AFailedJobLeavesNoSegment) {
  TempDir dir("mem_fail");
  RunResult r = run_strata(small_fault_run(dir.file("run"), "--nproc 2 --mem-ckpt-every 1 --inject kill "
                                                 "--inject-rank 1 --inject-step 4"),
                           dump_env(dir), Streams::separate);
  ASSERT_NE(r.status, 0);
  for (int rk = 0; rk < 2; ++rk) EXPECT_FALSE(segment_exists(dir.file("run"), rk)) << r.err;
  RunResult exhausted = run_strata(
      small_fault_run(dir.file("again"), "--nproc 2 --mem-ckpt-every 1 --max-restarts 1 --inject "
                              "wrong-count --inject-rank 0 --inject-step 3 --timeout 3"),
      dump_env(dir), Streams::separate);
  ASSERT_EQ(exhausted.status, 0) << exhausted.err;  // the fault fires in the first attempt only
  for (int rk = 0; rk < 2; ++rk) EXPECT_FALSE(segment_exists(dir.file("again"), rk));
}

// Every /dev/shm entry of the run directory's in-memory checkpoints: segments of any rank and
// the job's markers beside them (launcher/run_segments.h).
std::vector<std::string> shm_entries_of(const std::string& run_dir) {
  const std::string key =
      std::filesystem::weakly_canonical(std::filesystem::absolute(run_dir)).string();
  const std::string seg = ckpt::MemSegment::name_for(key, 0);  // "/strata-mem-<hex>-rank0"
  const std::string stem = seg.substr(1, seg.size() - 1 - std::strlen("rank0"));
  std::vector<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator("/dev/shm")) {
    const std::string n = e.path().filename().string();
    if (n.find(stem) != std::string::npos) out.push_back(n);
  }
  return out;
}

// `strata launch -- strata train`: the launcher knows neither the run directory nor that the
// ranks keep in-memory copies, and a supervised rank that fails leaves its copy for a restart.
// The job owns the copies, so none outlives it: not after a final failure (rank 1 killed, no
// restart left; rank 0 exits on its dead peer), not after a restart that then succeeded.
TEST(MemCkpt, NoSegmentRemainsAfterTheJobUnderStrataLaunch) {
  TempDir dir("mem_launch");
  for (const int restarts : {0, 1}) {
    const std::string run = dir.file("run" + std::to_string(restarts));
    const RunResult r = run_strata(
        "launch -n 2 --max-restarts " + std::to_string(restarts) + " -- " STRATA_BINARY " " +
            small_fault_run(run, "--mem-ckpt-every 1 --inject kill --inject-rank 1 --inject-step 4"),
        dump_env(dir), Streams::separate);
    EXPECT_EQ(r.status == 0, restarts == 1) << r.err;
    EXPECT_NE(r.err.find("mem-ckpt: a copy every 1 step(s) in /dev/shm"), std::string::npos) << r.err;
    if (restarts == 1) {
      EXPECT_GE(memory_resume_step(r.err), 2) << "the restart used the copies: " << r.err;
    }
    EXPECT_EQ(shm_entries_of(run), std::vector<std::string>{}) << "--max-restarts " << restarts;
  }
}

const std::string kSpikeRun =
    "train --layers 2 --dim 32 --heads 2 --seq 16 --vocab 256 --data synthetic --batch 8 "
    "--steps 16 --lr 3e-3 --eval-every 0 --eval-batches 1 --sample-tokens 0 --peak-gflops 100 "
    "--threads 1 --nproc 2 --zero 1 ";

// A 1000x gradient at step 12 (rank 1) rolled back to the newest copy, step `copy` (11 with
// --mem-ckpt-every 1, 10 with --mem-ckpt-every 2): the run then trains steps copy + 1 .. 16
// on the batches after the spiked one. Expected: exactly the run that never saw batches
// copy + 1 .. 12, i.e. one resumed from its own step-`copy` disk checkpoint with the
// checkpoint's data position moved on by those batches (bit for bit, every step; with
// --mem-ckpt-every 2 the record of step 11 before the spike is superseded by the one after).
void check_rollback(int every, int copy) {
  const std::string what = "--mem-ckpt-every " + std::to_string(every);
  TempDir dir("mem_rollback");
  const std::string rb = dir.file("rb");
  RunResult r = run_strata(kSpikeRun + "--run-dir " + rb + " " + what +
                               " --spike-zscore 6 --spike-action rollback "
                               "--inject spike-grad --inject-rank 1 --inject-step 12",
                           dump_env(dir), Streams::separate);
  ASSERT_EQ(r.status, 0) << what << "\n" << r.err;
  EXPECT_NE(r.out.find("step 12 rolled back to the in-memory copy of step " + std::to_string(copy)),
            std::string::npos)
      << what << "\n" << r.out;

  const std::string ref = dir.file("ref");
  const std::string save = " --ckpt-every " + std::to_string(copy);
  RunResult first =
      run_strata(kSpikeRun + "--run-dir " + ref + save, dump_env(dir), Streams::separate);
  ASSERT_EQ(first.status, 0) << first.err;
  char step_dir[32];
  std::snprintf(step_dir, sizeof step_dir, "/ckpt/step-%06d", copy);
  const std::string manifest = ref + step_dir + "/manifest.json";
  json m = json::parse(read_file(manifest));
  m["train"]["loader"]["consumed"] =
      m["train"]["loader"]["consumed"].get<int64_t>() + 8 * (12 - copy);  // --batch 8
  std::ofstream(manifest) << m.dump(1);
  RunResult skipped = run_strata(kSpikeRun + "--run-dir " + ref + save + " --resume auto",
                                 dump_env(dir), Streams::separate);
  ASSERT_EQ(skipped.status, 0) << skipped.err;

  std::vector<json> rolled;
  std::map<int64_t, double> kept;  // the last record of each step: the run's curve
  for (const json& j : json_lines(read_file(rb + "/metrics.jsonl"))) {
    if (j.contains("rolled_back_to")) rolled.push_back(j);
    if (j.contains("loss")) kept[j["step"].get<int64_t>()] = j["loss"].get<double>();
  }
  ASSERT_EQ(rolled.size(), 1u) << what;
  EXPECT_EQ(rolled[0]["step"], 12);
  EXPECT_EQ(rolled[0]["rolled_back_to"], copy);
  EXPECT_EQ(rolled[0]["skipped"], true);
  EXPECT_NE(rolled[0]["skip_reason"].get<std::string>().find("gradient norm"), std::string::npos);
  const std::vector<json> want = step_records(ref + "/metrics.jsonl");
  ASSERT_EQ(kept.size(), 16u) << what;
  ASSERT_EQ(want.size(), 16u);
  for (const json& w : want) {
    const int64_t step = w["step"].get<int64_t>();
    EXPECT_EQ(kept[step], w["loss"].get<double>()) << what << ": step " << step;
  }
  const json summary = json::parse(read_file(rb + "/summary.json"));
  EXPECT_EQ(summary["rolled_back_steps"], 1);
  EXPECT_EQ(summary["skipped_steps"], 1);
}

TEST(MemCkpt, RollbackEqualsARunThatNeverSawTheBatch) {
  check_rollback(1, 11);
  check_rollback(2, 10);
}

// More ranks on the host than /dev/shm holds copies for (a rank started from the
// environment, which names its host's rank count): refused before training, in one line.
TEST(MemCkpt, RefusedWhenDevShmCannotHoldTheCopies) {
  TempDir dir("mem_full");
  const RunResult r = run_strata(
      small_fault_run(dir.file("run"), "--mem-ckpt-every 1"),
      "STRATA_RANK=0 STRATA_WORLD_SIZE=1 STRATA_LOCAL_RANK=0 STRATA_LOCAL_WORLD_SIZE=1000000 ",
      Streams::separate);
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.err.find("strata: error: --mem-ckpt-every 1: in-memory checkpoints need "),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find(" per rank x 1000000 rank(s) on this host), but it has "), std::string::npos)
      << r.err;
  EXPECT_EQ(r.out.find("step "), std::string::npos) << "refused before training";
  EXPECT_FALSE(segment_exists(dir.file("run"), 0));
}

TEST(MemCkpt, BadFlagsAreOneLine) {
  TempDir dir("mem_flags");
  const std::string base =
      "train --layers 1 --dim 32 --heads 2 --seq 16 --vocab 256 --steps 4 --sample-tokens 0 "
      "--peak-gflops 1 --threads 1 ";
  const std::string run = " --run-dir " + dir.file("run");
  const std::pair<std::string, std::string> cases[] = {
      {"--mem-ckpt-every -1" + run, "--mem-ckpt-every must be >= 0 (got -1)"},
      {"--mem-ckpt-every 1", "--mem-ckpt-every needs --run-dir"},
      {"--mem-ckpt-every 1 --mem-ckpt-replicas 1" + run,
       "--mem-ckpt-replicas 1 needs a second host to copy to, and this job names none"},
      {"--mem-ckpt-every 1 --mem-ckpt-replicas 2 --hosts x:1,y:1" + run,
       "--mem-ckpt-replicas 2 needs 3 hosts to copy to, and --hosts names 2;"},
      {"--mem-ckpt-every 1 --mem-ckpt-replicas 2 --hosts x:1,y:1,z:1" + run,
       "--mem-ckpt-replicas 2: one replica per copy (on the next host) is supported, not more; "
       "use --mem-ckpt-replicas 1"},
      {"--mem-ckpt-replicas 1 --hosts x:1,y:1" + run,
       "--mem-ckpt-replicas 1 needs --mem-ckpt-every (it replicates the in-memory copies)"},
      {"--mem-ckpt-every 1 --mem-ckpt-replicas -1" + run, "--mem-ckpt-replicas must be >= 0 (got -1)"},
      {"--mem-ckpt-every 1 --mem-ckpt-replicas 1 --mem-ckpt-replica-mbps -5 --hosts x:1,y:1" + run,
       "--mem-ckpt-replica-mbps: -5 is not >= 0"},
      {"--mem-ckpt-every 1 --mem-ckpt-replica-mbps 50" + run,
       "--mem-ckpt-replica-mbps 50 paces the replicas of --mem-ckpt-replicas 1, which this run does not make"},
      {"--spike-zscore 3 --spike-action rollback" + run,
       "--spike-action rollback needs in-memory checkpoints to roll back to: add --mem-ckpt-every"},
      {"--mem-ckpt-every 2 --inject corrupt-mem-ckpt --inject-step 3" + run,
       "--inject corrupt-mem-ckpt at step 3 needs an in-memory copy after that step"},
      {"--mem-ckpt-every 2 --ckpt-every 3 --spike-action rollback" + run,
       "--spike-action rollback with --mem-ckpt-every 2 needs --ckpt-every a multiple of it (got 3)"},
  };
  expect_one_line_errors(base, {std::begin(cases), std::end(cases)});
}

}  // namespace
}  // namespace strata::test
