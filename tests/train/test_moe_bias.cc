// Balancing without an auxiliary loss (`--router-bias-update-rate`, docs/moe.md): the bias
// moves after every step from the step's load summed over every rank, so every layout routes
// with the one process's bias: the same tokens per expert and the same bias at every step,
// the losses within the MoE layout tests' bound; a run resumed from a checkpoint continues
// with the saved bias bit for bit.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>

#include "cli_util.h"

using namespace strata::test;
using nlohmann::json;

namespace {

const std::string kBias =
    "train --layers 2 --dim 32 --heads 2 --seq 16 --max-seq 16 --batch 4 --steps 6 "
    "--peak-gflops 1000 --data synthetic:300 --sample-tokens 0 --eval-every 0 --experts 4 "
    "--top-k 2 --dropless --aux-loss-coef 0 --router-bias-update-rate 0.01 ";

struct BiasRun {
  std::vector<double> losses;
  std::vector<json> blocks;  // per step: the "moe" array of its record
};

BiasRun run(const std::string& args, const std::string& run_dir) {
  RunResult r = run_strata(args + " --run-dir " + run_dir, "OMP_NUM_THREADS=1 ", Streams::separate);
  EXPECT_EQ(r.status, 0) << args << ": " << r.err;
  BiasRun out;
  if (r.status != 0) return out;
  for (const json& rec : step_records(run_dir + "/metrics.jsonl")) {
    out.losses.push_back(rec["loss"].get<double>());
    out.blocks.push_back(rec["moe"]);
  }
  return out;
}

std::vector<float> bias_of(const json& blocks, size_t m) { return blocks[m]["router_bias"].get<std::vector<float>>(); }

TEST(MoEBiasTrain, EveryLayoutRoutesWithTheOneProcessBias) {
  TempDir dir("moe_bias");
  const BiasRun ref = run(kBias, dir.file("ref"));
  ASSERT_EQ(ref.losses.size(), 6u);
  // The bias moves by ±rate per step toward the mean load, from zero.
  for (size_t m = 0; m < 2; ++m) {
    const std::vector<float> b1 = bias_of(ref.blocks[0], m), b6 = bias_of(ref.blocks[5], m);
    ASSERT_EQ(b1.size(), 4u);
    for (float v : b1) EXPECT_TRUE(v == 0.01f || v == -0.01f || v == 0.0f) << v;
    EXPECT_NE(b6, std::vector<float>(4, 0.0f));
  }
  // Without it, no bias is recorded and the routing differs.
  const BiasRun plain = run(kBias + "--router-bias-update-rate 0", dir.file("plain"));
  ASSERT_EQ(plain.blocks.size(), 6u);
  EXPECT_FALSE(plain.blocks[5][0].contains("router_bias"));
  EXPECT_GT(max_abs_diff(plain.losses, ref.losses), 0.0);
  EXPECT_NE(plain.blocks[5][0]["wanted_per_expert"], ref.blocks[5][0]["wanted_per_expert"]);
  int k = 0;
  for (const char* layout : {"--nproc 2 --dp 2", "--nproc 2 --ep 2", "--nproc 2 --tp 2 --micro-batch 1",
                             "--nproc 2 --pp 2", "--nproc 4 --tp 2 --dp 2 --ep 2 --micro-batch 1"}) {
    const BiasRun got = run(kBias + layout, dir.file("l" + std::to_string(k++)));
    ASSERT_EQ(got.losses.size(), ref.losses.size()) << layout;
    EXPECT_LE(max_abs_diff(got.losses, ref.losses), 1e-5) << layout;
    for (size_t s = 0; s < 6; ++s)
      for (size_t m = 0; m < 2; ++m) {
        EXPECT_EQ(got.blocks[s][m]["wanted_per_expert"], ref.blocks[s][m]["wanted_per_expert"])
            << layout << " step " << s + 1 << " block " << m;
        EXPECT_EQ(bias_of(got.blocks[s], m), bias_of(ref.blocks[s], m)) << layout << " step " << s + 1;
      }
  }
}

// A bias rate far above the probabilities sends every token of a step to the experts the
// step before left underloaded: whole experts, and under ep 2 whole ranks' experts, receive
// no token at some steps. Every layout (capacity and dropless, ep, ep x tp, pp with a stage
// that holds no MoE block) still trains as one process does.
TEST(MoEBiasTrain, ExpertsThatReceiveNoTokensInEveryLayout) {
  TempDir dir("moe_bias_empty");
  for (const std::string mode : {"--dropless", "--capacity-factor 1.0 --micro-batch 1"}) {
    std::string base = kBias + "--top-k 1 --router-bias-update-rate 10 --moe-every 2 " + mode + " ";
    if (mode != "--dropless") base.replace(base.find("--dropless "), std::strlen("--dropless "), "");
    const BiasRun ref = run(base, dir.file("ref"));
    ASSERT_EQ(ref.losses.size(), 6u) << mode;
    bool empty = false;
    for (const json& b : ref.blocks)
      for (int64_t n : b[0]["wanted_per_expert"].get<std::vector<int64_t>>()) empty = empty || n == 0;
    EXPECT_TRUE(empty) << mode << ": no expert went without tokens";
    int k = 0;
    for (const char* layout : {"--nproc 2 --ep 2", "--nproc 4 --tp 2 --ep 2", "--nproc 2 --pp 2"}) {
      const BiasRun got = run(base + layout, dir.file("e" + std::to_string(k++)));
      ASSERT_EQ(got.losses.size(), 6u) << mode << " " << layout;
      EXPECT_LE(max_abs_diff(got.losses, ref.losses), 1e-5) << mode << " " << layout;
      for (size_t s = 0; s < 6; ++s)
        EXPECT_EQ(got.blocks[s][0]["tokens_per_expert"], ref.blocks[s][0]["tokens_per_expert"])
            << mode << " " << layout << " step " << s + 1;
    }
  }
}

// Resumed from the checkpoint of step 3, on one process and on ep 2 (and across them), a
// run continues with the saved bias: the uninterrupted run's losses and bias bit for bit.
TEST(MoEBiasTrain, ResumedRunContinuesWithTheSavedBias) {
  TempDir dir("moe_bias_resume");
  for (const std::string layout : {"", "--nproc 2 --ep 2 --micro-batch 1"}) {
    const std::string full = dir.file("full");
    std::filesystem::remove_all(full);
    const BiasRun want = run(kBias + layout + " --ckpt-every 1 --ckpt-keep 0", full);
    ASSERT_EQ(want.losses.size(), 6u) << layout;
    const json m = json::parse(read_file(full + "/ckpt/step-000003/manifest.json"));
    ASSERT_EQ(m["train"]["extra"]["router_bias"].size(), 8u) << "2 blocks x 4 experts";
    const std::string resumed = dir.file("resumed");
    std::filesystem::remove_all(resumed);
    std::filesystem::create_directories(resumed);
    const BiasRun got = run(kBias + layout + " --resume " + full + "/ckpt/step-000003", resumed);
    ASSERT_EQ(got.losses.size(), 3u) << layout;
    for (size_t i = 0; i < 3; ++i) {
      EXPECT_EQ(got.losses[i], want.losses[3 + i]) << layout << " step " << 4 + i;
      EXPECT_EQ(bias_of(got.blocks[i], 1), bias_of(want.blocks[3 + i], 1)) << layout << " step " << 4 + i;
    }
  }
}

// 2 MoE blocks of 512 experts: 1,024 bias values, some 22 KB of JSON, more than the 16 KiB
// an in-memory copy's state record once had. A rank killed under the supervisor resumes from
// memory with the bias it had: the uninterrupted run's losses, bit for bit.
TEST(MoEBiasTrain, ManyExpertsBiasSurvivesAKillFromMemory) {
  TempDir dir("moe_bias_mem");
  const std::string model = "--experts 512 --top-k 2 --dropless --aux-loss-coef 0 --router-bias-update-rate 0.01 "
                            "--layers 2 --nproc 2 --ep 2 ";
  RunResult ref = run_strata(small_fault_run(dir.file("ref"), model), dump_env(dir), Streams::separate);
  ASSERT_EQ(ref.status, 0) << ref.err;
  RunResult r = run_strata(small_fault_run(dir.file("run"), model + "--mem-ckpt-every 1 --ckpt-every 100 "
                                           "--max-restarts 1 --inject kill --inject-rank 1 --inject-step 5"),
                           dump_env(dir), Streams::separate);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.err.find("resuming from the in-memory copy of step "), std::string::npos) << r.err;
  const std::vector<json> want = step_records(dir.file("ref/metrics.jsonl"));
  const std::vector<json> got = step_records(dir.file("run/metrics.jsonl"));
  ASSERT_EQ(want.size(), 8u);
  ASSERT_EQ(got.size(), 8u);
  for (size_t i = 0; i < 8; ++i) {
    EXPECT_EQ(got[i]["loss"], want[i]["loss"]) << "step " << i + 1;
    EXPECT_EQ(got[i]["moe"][1]["router_bias"], want[i]["moe"][1]["router_bias"]) << "step " << i + 1;
  }
}

}  // namespace
