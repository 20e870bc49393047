// Checkpoint, crash and resume of `strata train` on one process: a run killed at some step (or
// in the middle of a save) and resumed gives the loss sequence and final weights of the run
// that never failed, bit for bit. Weights are compared through the checkpoint manifests'
// xxHash64 of every block of every state (params, exp_avg, exp_avg_sq), so equal hashes mean
// equal bytes.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "cli_util.h"

namespace strata::test::test_resume {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// A tiny model, 8 steps: well under a second per run.
std::string train_args(const std::string& run_dir, const std::string& extra = "") {
  return "train --layers 1 --dim 32 --heads 2 --max-seq 16 --seq 16 --vocab 256 --batch 4 "
         "--steps 8 --warmup 2 --lr 1e-2 --threads 1 --sample-tokens 0 --eval-every 0 "
         "--eval-batches 1 --peak-gflops 1 --ckpt-every 2 --run-dir " +
         run_dir + " " + extra;
}

// (step, loss, grad_norm) of every step record, as exact doubles.
std::vector<std::vector<double>> step_records(const std::string& run_dir) {
  std::vector<std::vector<double>> out;
  for (const json& j : json_lines(read_file(run_dir + "/metrics.jsonl")))
    if (j.contains("loss"))
      out.push_back(
          {j["step"].get<double>(), j["loss"].get<double>(), j["grad_norm"].get<double>()});
  return out;
}

std::string latest(const std::string& run_dir) {
  std::string s = read_file(run_dir + "/ckpt/latest");
  while (!s.empty() && s.back() == '\n') s.pop_back();
  return s;
}

// The uninterrupted reference run, made once for the whole file.
const std::string& reference_run() {
  static TempDir* dir = new TempDir("resume_ref");
  static std::string run = dir->file("run");
  static bool done = [] {
    RunResult r = run_strata(train_args(run), "", Streams::separate);
    EXPECT_EQ(r.status, 0) << r.err;
    return true;
  }();
  (void)done;
  return run;
}

void expect_same_as_reference(const std::string& run, const std::string& what) {
  const std::string& ref = reference_run();
  auto a = step_records(ref), b = step_records(run);
  ASSERT_EQ(a.size(), 8u) << what;
  ASSERT_EQ(b.size(), a.size()) << what;
  for (size_t i = 0; i < a.size(); ++i)
    for (size_t k = 0; k < 3; ++k) EXPECT_EQ(a[i][k], b[i][k]) << what << ": step " << i + 1;
  EXPECT_EQ(state_hashes(ref + "/ckpt/step-000008"), state_hashes(run + "/ckpt/step-000008"))
      << what;
}

TEST(Resume, KilledRunResumesBitExact) {
  TempDir dir("resume_kill");
  const std::string run = dir.file("run");
  // Step index 5 (the sixth step) kills the process at its start: steps 1-5 are done. The
  // save of step 4 runs in the background and may or may not have committed by then, so the
  // latest checkpoint is step 4 or step 2.
  RunResult killed = run_strata(train_args(run, "--inject kill --inject-step 6"), "", Streams::separate);
  EXPECT_NE(killed.status, 0);
  const std::string at = latest(run);
  ASSERT_TRUE(at == "step-000004" || at == "step-000002") << at;
  const int k = at == "step-000004" ? 4 : 2;
  EXPECT_EQ(step_records(run).size(), 5u);

  RunResult resumed = run_strata(train_args(run, "--resume auto"), "", Streams::separate);
  ASSERT_EQ(resumed.status, 0) << resumed.err;
  EXPECT_NE(resumed.err.find("resuming from step " + std::to_string(k)), std::string::npos)
      << resumed.err;
  EXPECT_NE(resumed.err.find(std::to_string(5 - k) + " step(s) lost"), std::string::npos)
      << resumed.err;
  expect_same_as_reference(run, "kill at step index 5");

  json summary = json::parse(read_file(run + "/summary.json"));
  ASSERT_TRUE(summary.contains("ckpt")) << summary.dump();
  EXPECT_EQ(summary["ckpt"]["resumed_step"], k);
  EXPECT_EQ(summary["ckpt"]["saves"], (8 - k) / 2);
  EXPECT_GE(summary["ckpt"]["stall_s"]["max"].get<double>(), 0.0);
}

TEST(Resume, SaveRecordsInMetricsAndSummary) {
  const std::string& ref = reference_run();
  int saves = 0;
  for (const json& j : json_lines(read_file(ref + "/metrics.jsonl")))
    if (j.contains("ckpt")) {
      ++saves;
      EXPECT_TRUE(j["ckpt"]["ok"].get<bool>());
      EXPECT_GT(j["ckpt"]["bytes"].get<int64_t>(), 0);
      EXPECT_GE(j["ckpt"]["stall_ms"].get<double>(), 0.0);
      EXPECT_GE(j["ckpt"]["write_ms"].get<double>(), 0.0);
    }
  EXPECT_EQ(saves, 4);
  json s = json::parse(read_file(ref + "/summary.json"));
  EXPECT_EQ(s["ckpt"]["saves"], 4);
  EXPECT_EQ(s["ckpt"]["failed"], 0);
  // Retention: --ckpt-keep 2 (the default) leaves steps 6 and 8.
  EXPECT_FALSE(fs::exists(ref + "/ckpt/step-000004"));
  EXPECT_TRUE(fs::exists(ref + "/ckpt/step-000006"));
  EXPECT_EQ(latest(ref), "step-000008");
}

TEST(Resume, ResumeAutoWithoutCheckpointStartsFresh) {
  TempDir dir("resume_fresh");
  RunResult r = run_strata(train_args(dir.file("run"), "--resume auto"), "", Streams::separate);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.err.find("starting fresh"), std::string::npos) << r.err;
  expect_same_as_reference(dir.file("run"), "fresh start under --resume auto");
}

TEST(Resume, KillDuringSaveKeepsPreviousCheckpoint) {
  TempDir dir("resume_save_kill");
  const std::string run = dir.file("run");
  // Step index 3 ends with the save of step 4; the writer dies with its shard half written.
  RunResult killed = run_strata(train_args(run, "--inject kill-during-save --inject-step 4"), "", Streams::separate);
  EXPECT_NE(killed.status, 0);
  EXPECT_EQ(latest(run), "step-000002");
  EXPECT_FALSE(fs::exists(run + "/ckpt/step-000004"));
  EXPECT_TRUE(fs::exists(run + "/ckpt/.tmp-step-000004"));
  RunResult verify = run_strata("ckpt verify " + run, "", Streams::separate);
  EXPECT_EQ(verify.status, 0) << verify.out << verify.err;

  RunResult resumed = run_strata(train_args(run, "--resume auto"), "", Streams::separate);
  ASSERT_EQ(resumed.status, 0) << resumed.err;
  EXPECT_NE(resumed.err.find("resuming from step 2"), std::string::npos) << resumed.err;
  expect_same_as_reference(run, "kill during the save of step 4");
}

TEST(Resume, CorruptLatestFallsBackToPrevious) {
  TempDir dir("resume_corrupt");
  const std::string run = dir.file("run");
  ASSERT_EQ(run_strata(train_args(run, "--steps 8 --ckpt-keep 3"), "", Streams::separate).status, 0);
  // Flip bytes in the middle of the latest shard: its block checksum no longer matches.
  std::string shard;
  for (const auto& e : fs::directory_iterator(run + "/ckpt/step-000008"))
    if (e.path().extension() == ".bin") shard = e.path().string();
  ASSERT_FALSE(shard.empty());
  {
    std::fstream f(shard, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(std::streamoff(fs::file_size(shard) / 2));
    f.write("garbage!", 8);
  }
  RunResult r = run_strata(train_args(run, "--resume auto"), "", Streams::separate);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.err.find("checksum mismatch"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("falling back"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("resuming from step 6"), std::string::npos) << r.err;
  // The damaged directory is set aside and step 8 saved again, identical to the reference.
  EXPECT_TRUE(fs::exists(run + "/ckpt/.damaged-step-000008"));
  expect_same_as_reference(run, "fallback from a corrupt step 8");
}

TEST(Resume, CheckpointOfAnotherModelIsOneLineError) {
  const std::string& ref = reference_run();
  TempDir dir("resume_other_model");
  const std::string run = dir.file("run");
  RunResult r = run_strata(train_args(run, "--dim 64 --resume " + ref), "", Streams::separate);
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("different model"), std::string::npos) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  // Same shapes, another head count: caught by the configuration check.
  RunResult h = run_strata(train_args(run, "--heads 4 --resume " + ref), "", Streams::separate);
  EXPECT_EQ(h.status, 1);
  EXPECT_NE(h.err.find("--heads 2 in the checkpoint, 4 in this run"), std::string::npos) << h.err;
}

TEST(Resume, ResumeFromNamedStepDirectory) {
  const std::string& ref = reference_run();
  TempDir dir("resume_named");
  const std::string run = dir.file("run");
  RunResult r = run_strata(train_args(run, "--resume " + ref + "/ckpt/step-000006"), "", Streams::separate);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.err.find("resuming from step 6"), std::string::npos) << r.err;
  EXPECT_EQ(state_hashes(ref + "/ckpt/step-000008"), state_hashes(run + "/ckpt/step-000008"));
}

TEST(Resume, BadCheckpointFlags) {
  TempDir dir("resume_flags");
  RunResult no_dir = run_strata(
      "train --layers 1 --dim 32 --heads 2 --max-seq 16 --vocab 256 --steps 2 --ckpt-every 1", "", Streams::separate);
  EXPECT_EQ(no_dir.status, 1);
  EXPECT_NE(no_dir.err.find("--ckpt-every needs --run-dir"), std::string::npos) << no_dir.err;
  RunResult bad_save =
      run_strata(train_args(dir.file("run"), "--inject kill-during-save --inject-step 3"), "", Streams::separate);
  EXPECT_EQ(bad_save.status, 1);
  EXPECT_NE(bad_save.err.find("needs a save after that step"), std::string::npos) << bad_save.err;
  RunResult bad_mtbf = run_strata(train_args(dir.file("run"), "--mtbf soon"), "", Streams::separate);
  EXPECT_EQ(bad_mtbf.status, 1);
  EXPECT_NE(bad_mtbf.err.find("soon"), std::string::npos) << bad_mtbf.err;
  RunResult missing = run_strata(train_args(dir.file("run"), "--resume " + dir.file("nowhere")), "", Streams::separate);
  EXPECT_EQ(missing.status, 1);
  EXPECT_NE(missing.err.find("nowhere"), std::string::npos) << missing.err;
}

// A save is reported when it completes, not when the next one starts: step 3 sleeps 2 s (far
// longer than the tiny model's save), so step 2's save is done before step 3 ends and its line
// comes before step 4's progress line; reported at the next save, it came after it.
TEST(Resume, SaveLineFollowsItsCompletion) {
  TempDir dir("resume_ckpt_line");
  RunResult r = run_strata(train_args(dir.file("run"), "--log-every 1 --inject sleep:2 "
                                                       "--inject-rank 0 --inject-step 3"),
                           "", Streams::separate);
  ASSERT_EQ(r.status, 0) << r.err;
  auto line_of = [&](const std::string& text) {
    const size_t at = r.out.find(text);
    EXPECT_NE(at, std::string::npos) << text << " missing from\n" << r.out;
    return at;
  };
  const size_t ckpt2 = line_of("ckpt  step 2 |");
  EXPECT_LT(line_of("step     3/8 |"), ckpt2) << r.out;  // the save overlaps step 3
  EXPECT_LT(ckpt2, line_of("step     4/8 |")) << r.out;
  // The last save, finished by the end of training, is reported too.
  EXPECT_NE(line_of("ckpt  step 8 |"), std::string::npos);
}

TEST(Resume, MtbfPrintsIntervalAdvice) {
  TempDir dir("resume_mtbf");
  RunResult r = run_strata(train_args(dir.file("run"), "--mtbf 4h"), "", Streams::separate);
  ASSERT_EQ(r.status, 0) << r.err;
  json s = json::parse(read_file(dir.file("run/summary.json")));
  ASSERT_TRUE(s["ckpt"].contains("advice")) << s.dump();
  EXPECT_GT(s["ckpt"]["advice"]["young_s"].get<double>(), 0.0);
  EXPECT_NE(r.out.find("Young"), std::string::npos) << r.out;
}

// The supervisor: `strata launch --max-restarts` around a single-process run, killed at
// random steps by several fault kinds, always ends where the uninterrupted run ends.
TEST(Resume, SupervisedRestartsAtRandomStepsAreBitExact) {
  std::random_device rd;
  const unsigned seed = rd();
  std::mt19937 gen(seed);
  const char* kinds[] = {"kill", "exit", "kill-during-save"};
  for (int trial = 0; trial < 10; ++trial) {
    const std::string kind = kinds[trial % 3];
    int step = std::uniform_int_distribution<int>(0, 7)(gen);
    if (kind == "kill-during-save") step = 1 + 2 * std::uniform_int_distribution<int>(0, 3)(gen);
    TempDir dir("resume_sup" + std::to_string(trial));
    const std::string run = dir.file("run");
    const std::string what = "trial " + std::to_string(trial) + " (seed " + std::to_string(seed) +
                             "): " + kind + " at step index " + std::to_string(step);
    RunResult r = run_strata(
        "launch -n 1 --max-restarts 2 --no-prefix -- " + std::string(STRATA_BINARY) + " " +
        train_args(run, "--inject " + kind + " --inject-step " + std::to_string(step + 1)), "", Streams::separate);
    ASSERT_EQ(r.status, 0) << what << "\n" << r.err;
    EXPECT_NE(r.err.find("strata launch: restart 1/2 after rank 0"), std::string::npos)
        << what << r.err;
    EXPECT_EQ(r.err.find("restart 2/2"), std::string::npos) << what << r.err;
    expect_same_as_reference(run, what);
  }
}

}  // namespace
}  // namespace strata::test::test_resume

namespace strata::test::test_resume {
namespace {

// A fresh run into a run dir that already holds checkpoints would overwrite them: refused,
// and the checkpoints stay as they were.
TEST(Resume, FreshRunDoesNotOverwriteAnotherRunsCheckpoints) {
  TempDir dir("resume_refuse");
  const std::string run = dir.file("run");
  ASSERT_EQ(run_strata(train_args(run), "", Streams::separate).status, 0);
  const std::vector<std::string> before = state_hashes(run + "/ckpt/step-000008");
  RunResult again = run_strata(train_args(run, "--seed 7"), "", Streams::separate);
  EXPECT_EQ(again.status, 1);
  EXPECT_NE(again.err.find("already holds checkpoints"), std::string::npos) << again.err;
  EXPECT_NE(again.err.find("--resume auto"), std::string::npos) << again.err;
  EXPECT_EQ(state_hashes(run + "/ckpt/step-000008"), before);
}

}  // namespace
}  // namespace strata::test::test_resume
