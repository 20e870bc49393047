// Fault tolerance of data-parallel `strata train --nproc 2`: a rank killed at a random step
// under the supervisor (--max-restarts) ends bit-identical to the run that never failed, at
// every ZeRO stage; a checkpoint resumes on another world size and stage within fp32
// tolerance (the global sample order is the same, only the reduction order differs).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "cli_util.h"

namespace strata::test {
namespace {

using nlohmann::json;

std::string args(const std::string& run_dir, const std::string& extra) {
  return "train --layers 1 --dim 32 --heads 2 --max-seq 16 --seq 16 --vocab 256 --batch 4 "
         "--steps 8 --warmup 2 --lr 1e-2 --threads 1 --sample-tokens 0 --eval-every 0 "
         "--eval-batches 1 --peak-gflops 1 --ckpt-every 2 --timeout 20 --run-dir " +
         run_dir + " " + extra;
}

// Flight-recorder dumps of the killed job's survivors go to the test's directory.
std::string env_for(const TempDir& dir) { return "STRATA_DUMP_DIR=" + dir.str() + " "; }

std::vector<double> losses(const std::string& run_dir) {
  std::vector<double> out;
  for (const json& j : json_lines(read_file(run_dir + "/metrics.jsonl")))
    if (j.contains("loss")) out.push_back(j["loss"].get<double>());
  return out;
}

TEST(ResumeDistributed, SupervisedKillIsBitExactAtEveryZeroStage) {
  std::random_device rd;
  const unsigned seed = rd();
  std::mt19937 gen(seed);
  const char* kinds[] = {"kill", "exit", "kill-during-save", "kill"};
  for (int stage = 0; stage <= 3; ++stage) {
    TempDir dir("dist_stage" + std::to_string(stage));
    const std::string zero = "--nproc 2 --zero " + std::to_string(stage);
    RunResult ref = run_strata(args(dir.file("ref"), zero), env_for(dir), Streams::separate);
    ASSERT_EQ(ref.status, 0) << ref.err;

    const std::string kind = kinds[stage];
    const int rank = std::uniform_int_distribution<int>(0, 1)(gen);
    int step = std::uniform_int_distribution<int>(1, 7)(gen);
    if (kind == "kill-during-save") step = 1 + 2 * std::uniform_int_distribution<int>(0, 3)(gen);
    const std::string what = "ZeRO " + std::to_string(stage) + ", " + kind + " on rank " +
                             std::to_string(rank) + " at step index " + std::to_string(step) +
                             " (seed " + std::to_string(seed) + ")";
    RunResult r = run_strata(
        args(dir.file("run"), zero + " --max-restarts 2 --inject " + kind + " --inject-rank " +
                              std::to_string(rank) + " --inject-step " + std::to_string(step + 1)),
        env_for(dir), Streams::separate);
    ASSERT_EQ(r.status, 0) << what << "\n" << r.err;
    EXPECT_NE(r.err.find("restart 1/2 after rank " + std::to_string(rank)), std::string::npos)
        << what << "\n"
        << r.err;
    EXPECT_NE(r.err.find("restart 1: "), std::string::npos) << what << "\n" << r.err;
    std::vector<double> a = losses(dir.file("ref")), b = losses(dir.file("run"));
    ASSERT_EQ(a.size(), 8u) << what;
    ASSERT_EQ(b.size(), 8u) << what;
    for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i], b[i]) << what << ": step " << i + 1;
    EXPECT_EQ(state_hashes(dir.file("ref/ckpt/step-000008")),
              state_hashes(dir.file("run/ckpt/step-000008")))
        << what;
  }
}

// A rank that hangs, or skips the loss all-reduce, makes its peer time out (--timeout 2) or
// detect the mismatch; the supervisor restarts the job, which ends as if nothing happened.
TEST(ResumeDistributed, CollectiveFailuresRestartAndMatch) {
  TempDir dir("dist_collective");
  const std::string zero = "--nproc 2 --zero 2 --timeout 2";
  ASSERT_EQ(run_strata(args(dir.file("ref"), zero), env_for(dir), Streams::separate).status, 0);
  for (const std::string kind : {"hang", "skip-collective", "wrong-count"}) {
    const std::string run = dir.file("run-" + kind);
    RunResult r = run_strata(
        args(run, zero + " --max-restarts 1 --inject " + kind + " --inject-rank 1 --inject-step 4"),
        env_for(dir), Streams::separate);
    ASSERT_EQ(r.status, 0) << kind << "\n" << r.err;
    EXPECT_NE(r.err.find("strata launch: restart 1/1 after rank"), std::string::npos)
        << kind << r.err;
    EXPECT_EQ(losses(dir.file("ref")), losses(run)) << kind;
    EXPECT_EQ(state_hashes(dir.file("ref/ckpt/step-000008")), state_hashes(run + "/ckpt/step-000008"))
        << kind;
  }
}

TEST(ResumeDistributed, MaxRestartsExhaustedFailsWithMessage) {
  // Every attempt fails the same way: the run's only checkpoint has a corrupt manifest, so
  // no attempt can resume.
  TempDir dir("dist_exhaust");
  const std::string run = dir.file("run");
  ASSERT_EQ(run_strata(args(run, "--steps 2 --ckpt-every 2"), "", Streams::separate).status, 0);
  std::ofstream(run + "/ckpt/step-000002/manifest.json") << "{ not json";
  RunResult r =
      run_strata(args(run, "--nproc 2 --zero 1 --max-restarts 2 --resume auto"), env_for(dir), Streams::separate);
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.err.find("restart 2/2 after rank"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("giving up after 2 restarts (--max-restarts 2)"), std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("no usable checkpoint"), std::string::npos) << r.err;
}

// Resumes step 4 of `from_flags` under `to_flags` and compares steps 5-8 with the run that
// wrote the checkpoint.
void expect_reshard_matches(const std::string& from_flags, const std::string& to_flags) {
  TempDir dir("dist_reshard");
  RunResult ref = run_strata(args(dir.file("ref"), from_flags + " --ckpt-keep 0"), env_for(dir), Streams::separate);
  ASSERT_EQ(ref.status, 0) << ref.err;
  RunResult r = run_strata(
      args(dir.file("run"), to_flags + " --resume " + (dir.file("ref/ckpt/step-000004"))), env_for(dir), Streams::separate);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.err.find("resharded from"), std::string::npos) << r.err;
  std::vector<double> a = losses(dir.file("ref")), b = losses(dir.file("run"));
  ASSERT_EQ(a.size(), 8u);
  ASSERT_EQ(b.size(), 4u);
  for (size_t i = 0; i < 4; ++i)
    EXPECT_NEAR(a[4 + i], b[i], 1e-5 * std::abs(a[4 + i]))
        << from_flags << " -> " << to_flags << ": step " << i + 5;
}

TEST(ResumeDistributed, TwoRanksZero1ResumeOnOneProcess) {
  expect_reshard_matches("--nproc 2 --zero 1", "");
}

TEST(ResumeDistributed, OneProcessResumesOnTwoRanksZero3) {
  expect_reshard_matches("", "--nproc 2 --zero 3");
}

TEST(ResumeDistributed, TwoRanksZero2ResumeOnFourRanksZero0) {
  expect_reshard_matches("--nproc 2 --zero 2", "--nproc 4 --zero 0");
}

}  // namespace
}  // namespace strata::test
