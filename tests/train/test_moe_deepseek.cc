// DeepSeek-style MoE blocks (docs/moe.md): fine-grained routed experts (--expert-ffn), shared
// experts beside them (--shared-experts), sigmoid scores (--router-score sigmoid), the balance
// loss per sequence (--aux-loss-scope sequence), routing limited to the best of G expert groups
// (--route-groups, --route-max-groups) and the balancing bias, all at once, in GPT-2 and Llama
// blocks: every layout gives one process's losses (1e-5 over 8 steps), the same tokens per
// expert and the same balance loss at every step; a checkpoint written at tp 2 x ep 2 resumes
// on one process; bad settings stop before any rank starts with one line.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "cli_util.h"

namespace strata::test::test_moe_deepseek {
namespace {

using nlohmann::json;

const std::string kModel =
    "train --layers 4 --dim 32 --heads 2 --seq 16 --max-seq 16 --vocab 256 --batch 8 --steps 8 "
    "--lr 3e-3 --data synthetic:600 --eval-every 0 --eval-batches 2 --sample-tokens 0 "
    "--peak-gflops 100 --threads 1 --experts 4 --top-k 2 --moe-every 2 ";
// Experts of 32 hidden units (a quarter of the dense 128), one shared expert, sigmoid scores,
// the balance loss per sequence, each token's experts in 1 of 2 groups, the balancing bias.
const std::string kDeepSeek =
    "--expert-ffn 32 --shared-experts 1 --router-score sigmoid --aux-loss-scope sequence "
    "--aux-loss-coef 0.01 --route-groups 2 --route-max-groups 1 --router-bias-update-rate 0.01 ";

TrainRun run(const std::string& args, const std::string& tag) {
  TrainRun r = train_run(args, tag);
  EXPECT_EQ(r.cli.status, 0) << args << ": " << r.cli.err;
  return r;
}

void expect_same_run(const TrainRun& ref, const TrainRun& r, const std::string& layout) {
  ASSERT_EQ(r.losses.size(), ref.losses.size()) << layout;
  EXPECT_LE(max_abs_diff(ref.losses, r.losses), 1e-5) << layout;
  ASSERT_EQ(r.records.size(), ref.records.size()) << layout;
  for (size_t i = 0; i < r.records.size(); ++i) {
    const json &got = r.records[i]["moe"], &want = ref.records[i]["moe"];
    ASSERT_EQ(got.size(), want.size()) << layout;
    for (size_t b = 0; b < want.size(); ++b) {
      EXPECT_EQ(got[b]["wanted_per_expert"], want[b]["wanted_per_expert"]) << layout << " step " << i + 1;
      EXPECT_EQ(got[b]["router_bias"], want[b]["router_bias"]) << layout << " step " << i + 1;
    }
    EXPECT_NEAR(r.records[i]["aux_loss"].get<double>(), ref.records[i]["aux_loss"].get<double>(), 1e-6)
        << layout << " step " << i + 1;
  }
}

// Each layout against one process. Micro-batches of 2 sequences under dp: the balance loss
// per sequence does not depend on how the sequences are grouped (the group-wise one does).
void expect_layouts_match(const std::string& model, const std::vector<std::string>& layouts) {
  const TrainRun ref = run(model, "ds_ref");
  ASSERT_EQ(ref.losses.size(), 8u);
  ASSERT_TRUE(ref.records[0].contains("moe"));
  for (const std::string& layout : layouts) expect_same_run(ref, run(model + layout, "ds"), layout);
}

TEST(DeepSeekMoE, Gpt2BlocksMatchOneProcessInEveryLayout) {
  expect_layouts_match(kModel + kDeepSeek + "--dropless --micro-batch 2 ",
                       {"--nproc 2 --dp 2", "--nproc 2 --ep 2", "--nproc 2 --tp 2", "--nproc 2 --cp 2",
                        "--nproc 2 --pp 2", "--nproc 2 --pp 2 --schedule interleaved --virtual-stages 2",
                        "--nproc 2 --pp 2 --schedule zb", "--nproc 4 --ep 4",
                        "--nproc 4 --tp 2 --ep 2 --zero 3", "--nproc 4 --pp 2 --dp 2 --ep 2"});
}

TEST(DeepSeekMoE, LlamaBlocksMatchOneProcessInEveryLayout) {
  expect_layouts_match(kModel + kDeepSeek + "--arch llama --kv-heads 1 --ffn 64 --dropless --micro-batch 2 ",
                       {"--nproc 2 --ep 2", "--nproc 2 --tp 2", "--nproc 2 --pp 2 --schedule zb",
                        "--nproc 4 --tp 2 --ep 2"});
}

// With a capacity the router's group is the micro-batch (one sequence each here), and the
// group order decides the drops on every rank.
TEST(DeepSeekMoE, CapacityDropsMatchOneProcess) {
  expect_layouts_match(kModel + kDeepSeek + "--capacity-factor 0.75 --micro-batch 1 ",
                       {"--nproc 2 --ep 2", "--nproc 4 --tp 2 --ep 2", "--nproc 2 --pp 2"});
}

// The shared experts and the narrow routed experts are checkpoint tensors like any other: a
// run saved at tp 2 x ep 2 resumes on one process with the uninterrupted run's losses.
TEST(DeepSeekMoE, CheckpointAtTp2Ep2ResumesOnOneProcess) {
  TempDir dir("ds_resume");
  const std::string model = kModel + kDeepSeek + "--dropless --micro-batch 2 ";
  const std::string full = dir.file("full");
  RunResult r = run_strata(model + "--nproc 4 --tp 2 --ep 2 --ckpt-every 4 --run-dir " + full, "",
                           Streams::separate);
  ASSERT_EQ(r.status, 0) << r.err;
  const std::vector<json> want = step_records(full + "/metrics.jsonl");
  ASSERT_EQ(want.size(), 8u);
  const json manifest = json::parse(read_file(full + "/ckpt/step-000004/manifest.json"));
  EXPECT_NE(manifest.dump().find("h.1.mlp.shared_experts.c_fc.weight"), std::string::npos);
  const std::string resumed = dir.file("resumed");
  std::filesystem::create_directories(resumed);
  r = run_strata(model + "--resume " + full + "/ckpt/step-000004 --run-dir " + resumed, "", Streams::separate);
  ASSERT_EQ(r.status, 0) << r.err;
  const std::vector<json> got = step_records(resumed + "/metrics.jsonl");
  ASSERT_EQ(got.size(), 4u);
  for (size_t i = 0; i < 4; ++i)
    EXPECT_NEAR(got[i]["loss"].get<double>(), want[4 + i]["loss"].get<double>(), 1e-5) << "step " << 5 + i;
}

// The planner's parameter count is the run's: fine-grained and shared experts included.
TEST(DeepSeekMoE, SummaryCountsTheSharedAndNarrowExperts) {
  const TrainRun r = run(kModel + kDeepSeek + "--dropless --steps 1 ", "ds_params");
  // Per MoE block (2 of 4): router 4·32, 4 experts of 2·32·32 + 32 + 32 and a shared one of the
  // same size, instead of the dense MLP (2·32·128 + 128 + 32).
  const int64_t dense = 256 * 32 + 16 * 32 + 4 * (12 * 32 * 32 + 13 * 32) + 2 * 32;
  const int64_t per_block = 4 * 32 + 5 * (2 * 32 * 32 + 64) - (2 * 32 * 128 + 160);
  EXPECT_EQ(r.summary["params"].get<int64_t>(), dense + 2 * per_block);
}

TEST(DeepSeekMoE, BadSettingsStopBeforeAnyRankStarts) {
  const std::string base =
      "train --layers 2 --dim 32 --heads 2 --seq 16 --max-seq 16 --batch 4 --steps 1 --nproc 2 ";
  for (const auto& [flags, says] : std::vector<std::pair<std::string, std::string>>{
           {"--shared-experts 1", "--shared-experts 1 needs routed experts"},
           {"--experts 4 --route-groups 3 --route-max-groups 1", "do not divide into --route-groups 3"},
           {"--experts 4 --route-groups 2 --route-max-groups 3", "--route-max-groups 3 is larger than the 2"},
           {"--experts 4 --route-max-groups 1", "needs --route-groups"},
           {"--experts 4 --router-bias-update-rate -1", "--router-bias-update-rate must be >= 0"},
           {"--experts 4 --router-bias-update-rate nan", "--router-bias-update-rate"},
           {"--experts 4 --expert-ffn 33 --tp 2", "does not divide the experts' hidden width 33"},
           {"--experts 4 --router-score relu", "--router-score"}}) {
    const RunResult r = run_strata(base + flags, "", Streams::separate);
    EXPECT_NE(r.status, 0) << flags;
    EXPECT_NE(r.err.find(says), std::string::npos) << flags << ": " << r.err;
    EXPECT_EQ(r.err.find("[rank"), std::string::npos) << flags << ": a rank started: " << r.err;
  }
}

// Each token's experts in 1 of 2 groups, and each group one ep rank's experts (P = G = 2):
// every token sends exactly one row per block, so a dropless step's rows and all-to-all bytes
// are strata plan's bound exactly (cost/comm.h: min(K, P, R) = 1 row per token).
TEST(DeepSeekMoE, GroupLimitedAllToAllBytesEqualThePlanBound) {
  const TrainRun r = run(kModel + kDeepSeek + "--dropless --steps 2 --micro-batch 2 --nproc 2 --ep 2 ", "ds_ep_rows");
  const RunResult plan = run_strata(
      "plan --local --layers 4 --dim 32 --heads 2 --seq 16 --max-seq 16 --vocab 256 --experts 4 --top-k 2 "
      "--moe-every 2 --expert-ffn 32 --shared-experts 1 --route-groups 2 --route-max-groups 1 --dp 2 --ep 2 "
      "--micro-batch 2 --accum 2 --json --precision fp32",
      "", Streams::separate);
  ASSERT_EQ(plan.status, 0) << plan.err;
  const json p = json::parse(plan.out);
  // 2 MoE blocks x 2 ranks x 2 micro-batches of 2 x 16 tokens, one row each.
  EXPECT_EQ(p["ep_rows_per_step_per_group"], 2 * 2 * 2 * 32);
  ASSERT_EQ(r.records.size(), 2u);
  for (const json& rec : r.records) {  // one ep group
    EXPECT_EQ(rec["ep_rows"], p["ep_rows_per_step_per_group"]);
    EXPECT_EQ(rec["ep_bytes"], p["ep_bytes_per_step_per_group"]);
  }
}

}  // namespace
}  // namespace strata::test::test_moe_deepseek
