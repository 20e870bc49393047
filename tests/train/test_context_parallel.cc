// `strata train --cp 2`: the same losses as one process over 20 steps for ring (zigzag and
// contiguous chunks) and Ulysses, with dp, tp and ZeRO; the bytes each step's attention sent equal
// the formula recorded beside them; a cp run's checkpoint resumes under another layout (cp
// holds no shard of the parameters) with the same losses as the uninterrupted run.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "cli_util.h"

namespace strata::test {
namespace {

using nlohmann::json;

// seq 16 splits into 2 x 2 zigzag chunks; 2 heads split over 2 Ulysses ranks.
const std::string kModel =
    "train --layers 2 --dim 32 --heads 2 --seq 16 --vocab 256 --data synthetic --batch 4 "
    "--lr 3e-3 --eval-every 0 --eval-batches 1 --sample-tokens 0 --peak-gflops 100 --threads 1 ";

struct CpRun {
  std::vector<json> steps;
  json summary;
  RunResult cli;
  std::vector<double> losses() const {
    std::vector<double> v;
    for (const json& s : steps) v.push_back(s["loss"].get<double>());
    return v;
  }
};

CpRun train(const std::string& extra, const TempDir& dir) {
  CpRun r;
  r.cli = run_strata(kModel + "--run-dir " + dir.str() + " " + extra, "", Streams::separate);
  if (r.cli.status != 0) return r;
  for (const json& rec : json_lines(read_file(dir.file("metrics.jsonl"))))
    if (rec.contains("loss")) r.steps.push_back(rec);
  r.summary = json::parse(read_file(dir.file("summary.json")));
  return r;
}

TEST(TrainContextParallel, LossesMatchOneProcessAndBytesMatchTheFormula) {
  TempDir d0("cp0");
  const CpRun ref = train("--steps 20", d0);
  ASSERT_EQ(ref.cli.status, 0) << ref.cli.err;
  ASSERT_EQ(ref.steps.size(), 20u);
  std::vector<double> zigzag;
  for (const std::string mode : {"--cp-mode ring", "--cp-mode ring --cp-chunks contiguous",
                                 "--cp-mode ulysses", "--cp-mode ring --nproc 4 --zero 2",
                                 "--cp-mode ulysses --nproc 4 --zero 3",
                                 "--cp-mode ring --nproc 4 --tp 2 --zero 1"}) {
    TempDir d("cp2");
    const CpRun r = train("--steps 20 --nproc 2 --cp 2 " + mode, d);
    ASSERT_EQ(r.cli.status, 0) << mode << ": " << r.cli.err;
    EXPECT_LE(max_abs_diff(r.losses(), ref.losses()), 1e-5) << mode;
    for (const json& s : r.steps) {
      EXPECT_GT(s["cp_bytes"].get<int64_t>(), 0) << mode;
      EXPECT_EQ(s["cp_bytes"], s["cp_bytes_formula"]) << mode << " step " << s["step"];
    }
    const json& cp = r.summary["context_parallel"];
    EXPECT_EQ(cp["cp"], 2) << mode;
    EXPECT_EQ(cp["attention_ms_per_rank"].size(), r.summary["world"].get<size_t>()) << mode;
    for (const json& rank : r.summary.value("tensor_parallel", json::object()).value("ranks", json::array())) {
      EXPECT_EQ(rank["activations"], rank["activations_plan"]) << mode;
      EXPECT_EQ(rank["model_states"], rank["model_states_plan"]) << mode;
      EXPECT_EQ(rank["tp_bytes_per_step"], rank["tp_bytes_per_step_plan"]) << mode;
    }
    if (mode == "--cp-mode ring") zigzag = r.losses();
    if (mode == "--cp-mode ring --cp-chunks contiguous") {
      EXPECT_LE(max_abs_diff(r.losses(), zigzag), 1e-5);
    }
  }
}

// Sampling runs the model on prompts of every length: padded for the chunks (and for sequence
// parallelism under tp), then gathered; the text equals one process's.
TEST(TrainContextParallel, SamplesMatchOneProcess) {
  auto sample = [](const std::string& extra) {
    TempDir d("cpsample");
    const RunResult r = run_strata(kModel + "--steps 2 --sample-tokens 9 --run-dir " + d.str() +
                                   " " + extra, "", Streams::separate);
    EXPECT_EQ(r.status, 0) << extra << ": " << r.err;
    for (const json& rec : json_lines(read_file(d.file("metrics.jsonl"))))
      if (rec.contains("sample")) return rec["sample"].get<std::string>();
    return std::string("(none)");
  };
  const std::string want = sample("");
  EXPECT_NE(want, "(none)");
  EXPECT_EQ(sample("--nproc 2 --cp 2"), want);
  EXPECT_EQ(sample("--nproc 2 --cp 2 --cp-mode ulysses --cp-chunks contiguous"), want);
  EXPECT_EQ(sample("--nproc 4 --cp 2 --tp 2"), want);
}

TEST(TrainContextParallel, CheckpointResumesUnderAnotherLayout) {
  TempDir full("cpfull");
  const CpRun whole = train("--steps 20 --nproc 2 --cp 2 --zero 1 --ckpt-every 10", full);
  ASSERT_EQ(whole.cli.status, 0) << whole.cli.err;
  for (const std::string layout : {"--nproc 2 --dp 2 --zero 1", "--nproc 1", "--nproc 2 --cp 2 "
                                   "--cp-mode ulysses --zero 3"}) {
    TempDir d("cpresume");
    const CpRun r = train("--steps 20 --resume " + full.str() + "/ckpt/step-000010 " + layout, d);
    ASSERT_EQ(r.cli.status, 0) << layout << ": " << r.cli.err;
    ASSERT_EQ(r.steps.size(), 10u) << layout;
    for (size_t i = 0; i < 10; ++i)
      EXPECT_NEAR(r.steps[i]["loss"].get<double>(), whole.steps[10 + i]["loss"].get<double>(), 1e-5)
          << layout << " step " << 11 + i;
  }
}

}  // namespace
}  // namespace strata::test
