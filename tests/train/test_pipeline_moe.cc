// `strata train --pp P --experts E [--ep N]`: MoE blocks in any pipeline stage give one
// process's losses (capacity drops, dropless, router jitter) under every schedule, with and
// without expert parallelism, and the step's load statistics (summed over the stages' blocks)
// are the one-process ones.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cli_util.h"

namespace strata::test {
namespace {

using nlohmann::json;

const std::string kModel =
    "train --layers 4 --dim 32 --heads 2 --seq 16 --max-seq 16 --vocab 256 --batch 8 --steps 8 "
    "--lr 3e-3 --data synthetic:600 --eval-every 0 --eval-batches 2 --sample-tokens 0 "
    "--peak-gflops 100 --threads 1 --experts 4 --top-k 2 ";

// Each layout trains as `moe` does on one process: the same losses (1e-5 over 8 steps, aux
// and z included), eval loss, and per step the same assignments per expert of every block.
void expect_layouts_match(const std::string& moe, const std::vector<std::string>& layouts) {
  const TrainRun ref = train_run(kModel + moe, "ppmoe_ref");
  ASSERT_EQ(ref.cli.status, 0) << ref.cli.err;
  ASSERT_EQ(ref.losses.size(), 8u);
  for (const std::string& layout : layouts) {
    const TrainRun r = train_run(kModel + moe + layout, "ppmoe");
    ASSERT_EQ(r.cli.status, 0) << layout << ": " << r.cli.err;
    ASSERT_EQ(r.losses.size(), ref.losses.size()) << layout;
    EXPECT_LE(max_abs_diff(ref.losses, r.losses), 1e-5) << layout;
    EXPECT_NEAR(r.summary["eval_loss"].get<double>(), ref.summary["eval_loss"].get<double>(), 1e-5)
        << layout;
    ASSERT_EQ(r.records.size(), ref.records.size()) << layout;
    for (size_t i = 0; i < r.records.size(); ++i) {
      if (!ref.records[i].contains("moe")) continue;
      ASSERT_TRUE(r.records[i].contains("moe")) << layout << " record " << i;
      const json &got = r.records[i]["moe"], &want = ref.records[i]["moe"];
      ASSERT_EQ(got.size(), want.size()) << layout;
      for (size_t b = 0; b < want.size(); ++b)
        EXPECT_EQ(got[b]["tokens_per_expert"], want[b]["tokens_per_expert"])
            << layout << " record " << i << " block " << b;
      EXPECT_NEAR(r.records[i]["aux_loss"].get<double>(), ref.records[i]["aux_loss"].get<double>(),
                  1e-6)
          << layout << " record " << i;
    }
  }
}

// Capacity 0.5 drops assignments; the router's group is the micro-batch, so every run takes
// micro-batches of one sequence. Every block is an MoE block; --moe-every 2 puts a dense
// block before each MoE block, so a stage holds both kinds.
TEST(PipelineMoE, CapacityDropsMatchOneProcessUnderEverySchedule) {
  expect_layouts_match(
      "--capacity-factor 0.5 --micro-batch 1 ",
      {"--nproc 2 --pp 2", "--nproc 2 --pp 2 --schedule gpipe",
       "--nproc 2 --pp 2 --schedule interleaved --virtual-stages 2",
       "--nproc 2 --pp 2 --schedule zb", "--nproc 4 --pp 4 --schedule 1f1b",
       "--nproc 4 --pp 2 --dp 2 --ep 2", "--nproc 4 --pp 2 --dp 2 --ep 2 --schedule zb",
       "--nproc 4 --pp 2 --dp 2 --ep 2 --zero 3",
       "--nproc 4 --pp 2 --tp 2"});
}

TEST(PipelineMoE, DenseAndMoEBlocksShareStages) {
  expect_layouts_match("--capacity-factor 0.5 --micro-batch 1 --moe-every 2 ",
                       {"--nproc 2 --pp 2", "--nproc 4 --pp 2 --dp 2 --ep 2 --zero 2",
                        "--nproc 2 --pp 2 --schedule interleaved --virtual-stages 2"});
}

// Dropless routing of micro-batches of 2 sequences: without the aux loss (a function of the
// router's group, which dp regroups) the loss is a sum over tokens, so every layout matches.
TEST(PipelineMoE, DroplessMatchesOneProcessWithExpertParallelism) {
  expect_layouts_match("--dropless --aux-loss-coef 0 --micro-batch 2 ",
                       {"--nproc 2 --pp 2", "--nproc 4 --pp 2 --dp 2 --ep 2",
                        "--nproc 4 --pp 2 --dp 2 --ep 2 --schedule interleaved --virtual-stages 2",
                        "--nproc 4 --pp 2 --dp 2 --ep 2 --reduce-dtype fp32 --zero 1"});
}

// The router's jitter noise is keyed by the rows' sample ids and positions (docs/moe.md):
// the stages draw what one process draws, and the noise moves the losses by far more than
// the bound.
TEST(PipelineMoE, RouterJitterDrawsTheOneProcessNoise) {
  const std::string jitter = "--dropless --aux-loss-coef 0 --router-jitter 0.05 --micro-batch 2 ";
  const TrainRun plain = train_run(kModel + "--dropless --aux-loss-coef 0 --micro-batch 2 ", "ppj0");
  const TrainRun ref = train_run(kModel + jitter, "ppj1");
  ASSERT_EQ(plain.cli.status, 0) << plain.cli.err;
  ASSERT_EQ(ref.cli.status, 0) << ref.cli.err;
  EXPECT_GT(max_abs_diff(ref.losses, plain.losses), 1e-4);
  expect_layouts_match(jitter, {"--nproc 2 --pp 2", "--nproc 4 --pp 2 --dp 2 --ep 2 --schedule zb",
                                "--nproc 4 --pp 2 --cp 2"});
}

}  // namespace
}  // namespace strata::test
