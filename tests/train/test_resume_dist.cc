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
  return small_fault_run(run_dir, "--ckpt-every 2 " + extra);
}


TEST(ResumeDistributed, SupervisedKillIsBitExactAtEveryZeroStage) {
  std::random_device rd;
  const unsigned seed = rd();
  std::mt19937 gen(seed);
  const char* kinds[] = {"kill", "exit", "kill-during-save", "kill"};
  for (int stage = 0; stage <= 3; ++stage) {
    TempDir dir("dist_stage" + std::to_string(stage));
    const std::string zero = "--nproc 2 --zero " + std::to_string(stage);
    RunResult ref = run_strata(args(dir.file("ref"), zero), dump_env(dir), Streams::separate);
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
        dump_env(dir), Streams::separate);
    ASSERT_EQ(r.status, 0) << what << "\n" << r.err;
    EXPECT_NE(r.err.find("restart 1/2 after rank " + std::to_string(rank)), std::string::npos)
        << what << "\n"
        << r.err;
    EXPECT_NE(r.err.find("restart 1: "), std::string::npos) << what << "\n" << r.err;
    std::vector<double> a = run_dir_losses(dir.file("ref")), b = run_dir_losses(dir.file("run"));
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
  ASSERT_EQ(run_strata(args(dir.file("ref"), zero), dump_env(dir), Streams::separate).status, 0);
  for (const std::string kind : {"hang", "skip-collective", "wrong-count"}) {
    const std::string run = dir.file("run-" + kind);
    RunResult r = run_strata(
        args(run, zero + " --max-restarts 1 --inject " + kind + " --inject-rank 1 --inject-step 4"),
        dump_env(dir), Streams::separate);
    ASSERT_EQ(r.status, 0) << kind << "\n" << r.err;
    EXPECT_NE(r.err.find("strata launch: restart 1/1 after rank"), std::string::npos)
        << kind << r.err;
    EXPECT_EQ(run_dir_losses(dir.file("ref")), run_dir_losses(run)) << kind;
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
      run_strata(args(run, "--nproc 2 --zero 1 --max-restarts 2 --resume auto"), dump_env(dir), Streams::separate);
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
  RunResult ref = run_strata(args(dir.file("ref"), from_flags + " --ckpt-keep 0"), dump_env(dir), Streams::separate);
  ASSERT_EQ(ref.status, 0) << ref.err;
  RunResult r = run_strata(
      args(dir.file("run"), to_flags + " --resume " + (dir.file("ref/ckpt/step-000004"))), dump_env(dir), Streams::separate);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.err.find("resharded from"), std::string::npos) << r.err;
  std::vector<double> a = run_dir_losses(dir.file("ref")), b = run_dir_losses(dir.file("run"));
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
