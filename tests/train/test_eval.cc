// The held-out eval is defined by sequences of the global batch: --eval-batches M covers the
// first M x --batch held-out sequences whatever the layout, so one run's eval loss is one
// process's under dp, tp, cp, pp, ZeRO-3 and any micro-batch split (fp32 reduction order
// aside), and every eval line and record names the global count.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cli_util.h"

namespace strata::test::test_eval {
namespace {

using nlohmann::json;

const std::string kModel =
    "train --layers 2 --dim 32 --heads 2 --seq 16 --vocab 256 --data synthetic --batch 8 "
    "--steps 4 --lr 3e-3 --eval-every 2 --eval-batches 2 --sample-tokens 0 --peak-gflops 100 "
    "--threads 1 ";

// The eval records (step, eval_loss, ...) of one run, in order.
std::vector<json> evals_of(const std::string& extra, RunResult* cli) {
  TempDir dir("eval");
  *cli = run_strata(kModel + extra + " --run-dir " + dir.str(), "", Streams::separate);
  std::vector<json> out;
  if (cli->status != 0) return out;
  for (const json& rec : json_lines(read_file(dir.file("metrics.jsonl"))))
    if (rec.contains("eval_loss")) out.push_back(rec);
  return out;
}

TEST(TrainEval, EveryLayoutEvaluatesOneProcessSequences) {
  RunResult ref_cli;
  const std::vector<json> ref = evals_of("", &ref_cli);
  ASSERT_EQ(ref_cli.status, 0) << ref_cli.err;
  ASSERT_EQ(ref.size(), 2u);  // steps 2 and 4
  for (const json& e : ref) {
    EXPECT_EQ(e["eval_sequences"].get<int64_t>(), 16) << e.dump();  // 2 x --batch 8
    EXPECT_EQ(e["eval_tokens"].get<int64_t>(), 16 * 16) << e.dump();
  }
  EXPECT_NE(ref_cli.out.find("eval  step 4 | loss "), std::string::npos) << ref_cli.out;
  EXPECT_NE(ref_cli.out.find("| 16 held-out sequences, 256 tokens"), std::string::npos)
      << ref_cli.out;
  for (const char* layout :
       {"--micro-batch 2", "--micro-batch 1", "--nproc 2", "--nproc 2 --micro-batch 1",
        "--nproc 2 --zero 3", "--nproc 2 --tp 2", "--nproc 2 --cp 2",
        "--nproc 2 --pp 2 --micro-batches 4", "--nproc 2 --pp 2 --micro-batches 2"}) {
    RunResult cli;
    const std::vector<json> got = evals_of(layout, &cli);
    ASSERT_EQ(cli.status, 0) << layout << ": " << cli.err;
    ASSERT_EQ(got.size(), ref.size()) << layout;
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_EQ(got[i]["step"], ref[i]["step"]) << layout;
      EXPECT_EQ(got[i]["eval_sequences"], ref[i]["eval_sequences"]) << layout;
      EXPECT_EQ(got[i]["eval_tokens"], ref[i]["eval_tokens"]) << layout;
      // The training losses agree to 1e-5 across these layouts (test_distributed.cc,
      // test_pipeline_train.cc): so does an eval of the same sequences.
      EXPECT_NEAR(got[i]["eval_loss"].get<double>(), ref[i]["eval_loss"].get<double>(), 1e-5)
          << layout << " eval at step " << got[i]["step"];
    }
  }
}

// A held-out split smaller than the set asked for gives what it has: the same (fewer)
// sequences on every layout, counted in the record.
TEST(TrainEval, SmallHeldOutSplitIsTheSameOnEveryLayout) {
  TempDir dir("eval_small");
  const std::string text = dir.file("tiny.txt");
  write_small_text(text, 7, 3000);  // 5% held out: 150 bytes, 8 windows of 17
  const std::string args = "--data " + text + " --eval-batches 4";
  RunResult ref_cli;
  const std::vector<json> ref = evals_of(args, &ref_cli);
  ASSERT_EQ(ref_cli.status, 0) << ref_cli.err;
  ASSERT_FALSE(ref.empty());
  const int64_t n = ref.back()["eval_sequences"].get<int64_t>();
  EXPECT_GT(n, 0);
  EXPECT_LT(n, 32) << "the split holds fewer than --eval-batches 4 x --batch 8";
  for (const char* layout : {"--nproc 2", "--nproc 3 --batch 9 --micro-batch 1"}) {
    RunResult cli;
    const std::string extra = args + " " + layout;
    const std::vector<json> got = evals_of(extra, &cli);
    ASSERT_EQ(cli.status, 0) << layout << ": " << cli.err;
    ASSERT_EQ(got.size(), ref.size()) << layout;
    EXPECT_EQ(got.back()["eval_sequences"].get<int64_t>(), n) << layout;
    if (std::string(layout) == "--nproc 2") {  // the same run on two ranks: the same loss
      EXPECT_NEAR(got.back()["eval_loss"].get<double>(), ref.back()["eval_loss"].get<double>(),
                  1e-5);
    }
  }
}

}  // namespace
}  // namespace strata::test::test_eval
