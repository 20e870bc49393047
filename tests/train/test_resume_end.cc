// What a resume says and refuses, and a resume at the last step: settings the checkpoint's
// data position depends on (--seq, --seed) are refused in one line before anything runs;
// every change of layout, precision and batch is named in the resume line; a run stopped
// after its last checkpoint but before its end (final eval, summary.json) does that end when
// resumed instead of saying "nothing to do".
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "cli_util.h"

namespace strata::test {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const std::string kTrain =
    "train --layers 2 --dim 32 --heads 2 --seq 16 --vocab 256 --batch 4 --lr 1e-2 --threads 1 "
    "--sample-tokens 0 --eval-every 0 --eval-batches 2 --peak-gflops 1 --ckpt-every 2 ";

RunResult train(const std::string& run_dir, const std::string& extra) {
  return run_strata(kTrain + "--run-dir " + run_dir + " " + extra, "", Streams::separate);
}

// A finished 4-step run in `run_dir` (checkpoints at steps 2 and 4).
void finished_run(const std::string& run_dir, const std::string& extra = "") {
  const RunResult r = train(run_dir, "--steps 4 " + extra);
  ASSERT_EQ(r.status, 0) << r.err;
}

TEST(ResumeChecks, ChangedSeqOrSeedIsRefusedInOneLineBeforeAnythingRuns) {
  TempDir dir("resume_seq");
  const std::string run = dir.file("run");
  finished_run(run);
  const std::string metrics = read_file(run + "/metrics.jsonl");
  for (const auto& [flag, want] :
       {std::pair{"--seq 8", "--seq 8: checkpoint "}, {"--seed 5", "--seed 5: checkpoint "}}) {
    const RunResult r = train(run, std::string("--steps 8 --resume auto ") + flag);
    EXPECT_EQ(r.status, 1) << flag << ": " << r.err;
    EXPECT_EQ(r.err.rfind(std::string("strata: error: ") + want, 0), 0u) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    const std::string was = flag == std::string("--seq 8") ? "at --seq 16" : "at --seed 1";
    EXPECT_NE(r.err.find(was), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find("resuming from"), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find("samples of 17 tokens"), std::string::npos) << r.err;
    EXPECT_EQ(read_file(run + "/metrics.jsonl"), metrics) << flag << ": the run dir is untouched";
  }
}

// The resume line of `extra` resuming step 4 of a run made with `from`.
std::string resume_line(const std::string& from, const std::string& extra) {
  TempDir dir("resume_line");
  const std::string run = dir.file("run");
  const RunResult first = train(run, "--steps 4 " + from);
  EXPECT_EQ(first.status, 0) << first.err;
  const RunResult r = train(run, "--steps 6 --resume auto " + extra);
  EXPECT_EQ(r.status, 0) << extra << ": " << r.err;
  const size_t at = r.err.find("resuming from step 4");
  if (at == std::string::npos) return "(no resume line) " + r.err;
  return r.err.substr(at, r.err.find('\n', at) - at);
}

TEST(ResumeChecks, ResumeLineNamesEveryChange) {
  struct Case {
    std::string from, to;
    std::vector<std::string> want;
  };
  const std::vector<Case> cases = {
      {"", "--nproc 2 --pp 2", {"resharded from 1 rank(s) at ZeRO 0 to 2 (pp 2) at ZeRO 0"}},
      {"", "--nproc 2 --cp 2", {"to 2 (cp 2) at ZeRO 0"}},
      {"--nproc 2 --tp 2", "--nproc 2 --pp 2", {"from 2 rank(s) (tp 2) at ZeRO 0 to 2 (pp 2)"}},
      {"--experts 2", "--experts 2 --nproc 2 --ep 2", {"to 2 (ep 2) at ZeRO 0"}},
      {"", "--precision bf16", {"precision fp32 -> bf16"}},
      {"", "--batch 8",
       {"--batch 4 -> 8", "(the data continues from the same sample; steps count as before)"}},
      {"", "--micro-batch 2", {"micro-batch 4 -> 2 sequences per rank"}},
  };
  for (const Case& c : cases) {
    const std::string line = resume_line(c.from, c.to);
    for (const std::string& w : c.want)
      EXPECT_NE(line.find(w), std::string::npos) << c.from << " -> " << c.to << ": " << line;
  }
  // Nothing changed: nothing named.
  const std::string same = resume_line("", "");
  EXPECT_EQ(same.find("resharded"), std::string::npos) << same;
  EXPECT_EQ(same.find("->"), std::string::npos) << same;
}

// The eval records of metrics.jsonl.
std::vector<json> evals(const std::string& run) {
  std::vector<json> out;
  for (const json& j : json_lines(read_file(run + "/metrics.jsonl")))
    if (j.contains("eval_loss")) out.push_back(j);
  return out;
}

// A run killed in its final eval has committed the checkpoint of its last step and written
// neither the eval record nor summary.json (written last). Resumed, it owes that end: the
// same eval (the same weights and sequences: the same loss, bit for bit), summary.json, exit 0.
TEST(ResumeAtEnd, RunStoppedBeforeItsEndDoesTheEnd) {
  TempDir dir("resume_end");
  const std::string run = dir.file("run");
  finished_run(run);
  const json done = json::parse(read_file(run + "/summary.json"));
  ASSERT_EQ(evals(run).size(), 1u);
  // What the kill left: no summary.json, no final eval record.
  fs::remove(run + "/summary.json");
  std::string kept;
  for (const json& j : json_lines(read_file(run + "/metrics.jsonl")))
    if (!j.contains("eval_loss")) kept += j.dump() + "\n";
  std::ofstream(run + "/metrics.jsonl") << kept;

  const RunResult r = train(run, "--steps 4 --resume auto");
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out.find("nothing to do"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("running its final eval and writing the summary"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("no step trained in this attempt (resumed at step 4)"), std::string::npos)
      << r.out;
  EXPECT_EQ(r.out.find(" 0 tok/s"), std::string::npos) << r.out;
  ASSERT_TRUE(fs::exists(run + "/summary.json"));
  const json s = json::parse(read_file(run + "/summary.json"));
  EXPECT_EQ(s["steps"], 4);
  EXPECT_EQ(s["steps_trained"], 0);
  EXPECT_EQ(s["eval_loss"].get<double>(), done["eval_loss"].get<double>());
  EXPECT_EQ(s["final_loss"].get<double>(), done["final_loss"].get<double>());
  const std::vector<json> e = evals(run);
  ASSERT_EQ(e.size(), 1u);
  EXPECT_EQ(e[0]["step"], 4);

  // Now it has ended: a further resume has nothing to do and leaves summary.json alone.
  const std::string summary = read_file(run + "/summary.json");
  const RunResult again = train(run, "--steps 4 --resume auto");
  EXPECT_EQ(again.status, 0) << again.err;
  EXPECT_NE(again.out.find("nothing to do"), std::string::npos) << again.out;
  EXPECT_EQ(read_file(run + "/summary.json"), summary);
}

// The same on two ranks: rank 0's answer is every rank's, and the eval runs on both.
TEST(ResumeAtEnd, TwoRanksDoTheEndTogether) {
  TempDir dir("resume_end2");
  const std::string run = dir.file("run");
  finished_run(run, "--nproc 2");
  const json done = json::parse(read_file(run + "/summary.json"));
  fs::remove(run + "/summary.json");
  const RunResult r = train(run, "--steps 4 --resume auto --nproc 2");
  EXPECT_EQ(r.status, 0) << r.err;
  ASSERT_TRUE(fs::exists(run + "/summary.json")) << r.out << r.err;
  EXPECT_EQ(json::parse(read_file(run + "/summary.json"))["eval_loss"].get<double>(),
            done["eval_loss"].get<double>());
}

// A run that trains again is no longer ended: the summary.json of the attempt before it goes
// (it would otherwise let a later resume at the last step take that run's end for its own).
TEST(ResumeAtEnd, TrainingAgainRemovesTheEarlierSummary) {
  TempDir dir("resume_stale");
  const std::string run = dir.file("run");
  finished_run(run);
  ASSERT_TRUE(fs::exists(run + "/summary.json"));
  // Retrain steps 3-4 from step 2; killed at the start of step 4, before any end.
  const RunResult killed =
      train(run, "--steps 4 --resume " + run + "/ckpt/step-000002 --inject kill --inject-step 4");
  EXPECT_NE(killed.status, 0) << killed.err;
  EXPECT_FALSE(fs::exists(run + "/summary.json"));
  // Resumed at step 4 (the first run's checkpoint), the end is done again.
  const RunResult r = train(run, "--steps 4 --resume auto");
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out.find("nothing to do"), std::string::npos) << r.out;
  EXPECT_TRUE(fs::exists(run + "/summary.json"));
}

}  // namespace
}  // namespace strata::test
