// --max-activation-mb under --pp compares each stage's own activations (what the summary
// reports per stage), not the one-process figure: a budget between the two is accepted, and
// one under a stage's figure is refused naming that stage and every stage's figure.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "cli_util.h"

namespace strata::test {
namespace {

using nlohmann::json;

// Vocabulary 4096: the logits make the one-process figure (every layer and the head at once)
// larger than either stage's. --pp-split 2,2 fixes the split (the default follows measured
// costs).
const std::string kPipe =
    "train --layers 4 --dim 64 --heads 2 --seq 64 --vocab 4096 --batch 8 --steps 2 "
    "--sample-tokens 0 --eval-every 0 --eval-batches 1 --peak-gflops 1 --threads 1 "
    "--nproc 2 --pp 2 --micro-batches 4 --pp-split 2,2 ";

std::string mib(int64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f MiB", double(bytes) / (1 << 20));
  return buf;
}

TEST(StageActivations, EachStageIsCheckedAgainstItsOwnFigure) {
  // The stages' figures, as the summary reports them.
  const TrainRun free = train_run(kPipe, "stage_acts");
  ASSERT_EQ(free.cli.status, 0) << free.cli.err;
  const json& stages = free.summary["pipeline"]["stages"];
  ASSERT_EQ(stages.size(), 2u);
  const int64_t s0 = stages[0]["activation_bytes"].get<int64_t>();
  const int64_t s1 = stages[1]["activation_bytes"].get<int64_t>();
  ASSERT_GT(s1, s0) << "stage 1 holds the logits";
  // The one-process figure for the same micro-batch (2 sequences), from its refusal.
  TempDir dir("stage_acts_one");
  const RunResult one = run_strata(
      "train --layers 4 --dim 64 --heads 2 --seq 64 --vocab 4096 --batch 8 --micro-batch 2 "
      "--steps 1 --sample-tokens 0 --peak-gflops 1 --max-activation-mb 0.01 --run-dir " +
          dir.str(),
      "", Streams::separate);
  ASSERT_NE(one.status, 0);
  const size_t at = one.err.find("needs ");
  ASSERT_NE(at, std::string::npos) << one.err;
  const double whole_mb = std::stod(one.err.substr(at + 6));
  const double s1_mb = double(s1) / (1 << 20);
  ASSERT_GT(whole_mb, s1_mb + 1) << one.err;

  // Between the largest stage and the one-process figure: both stages fit, it trains.
  const std::string fits = std::to_string((whole_mb + s1_mb) / 2);
  const TrainRun ok = train_run(kPipe + "--max-activation-mb " + fits, "stage_acts_ok");
  EXPECT_EQ(ok.cli.status, 0) << ok.cli.err;
  EXPECT_EQ(ok.losses.size(), 2u);

  // Between the stages: stage 1 does not fit, and the line says so with its own figure.
  const std::string tight = std::to_string((double(s0) + double(s1)) / 2 / (1 << 20));
  TempDir run("stage_acts_no");
  const RunResult no = run_strata(kPipe + "--max-activation-mb " + tight + " --run-dir " +
                                      run.str(), "", Streams::separate);
  EXPECT_EQ(no.status, 1) << no.err;
  for (const std::string& want : std::vector<std::string>{
           "strata: error: --max-activation-mb ", ": pipeline stage 1 (layers 2-3) needs " + mib(s1),
           "stage 0 " + mib(s0) + ", stage 1 " + mib(s1)})
    EXPECT_NE(no.err.find(want), std::string::npos) << want << "\n" << no.err;
  EXPECT_EQ(no.out.find("step     1/2"), std::string::npos) << "refused before step 1";
}

}  // namespace
}  // namespace strata::test
