// `strata train --experts` end to end (docs/moe.md): the per-step load in metrics.jsonl adds
// up, the aux and z losses are part of the reported loss, the collapse watch warns once per
// collapse with the flags' thresholds, and a 2-rank expert-parallel run reports the same
// figures summed over its ranks.
#include <gtest/gtest.h>

#include <cmath>

#include "cli_util.h"

using namespace strata::test;
using nlohmann::json;

namespace test_moe_train {  // its own names in a unity build
namespace {

const std::string kBase =
    "train --layers 2 --dim 32 --heads 2 --seq 16 --max-seq 16 --batch 4 --steps 4 "
    "--peak-gflops 1000 --data synthetic:50000 --sample-tokens 0 --eval-batches 1 "
    "--experts 4 --top-k 2 ";
const std::string kMoE = kBase + "--capacity-factor 0.5 ";

void check_load(const std::vector<json>& recs, int64_t tokens_per_step) {
  ASSERT_EQ(recs.size(), 4u);
  for (const json& r : recs) {
    EXPECT_NEAR(r["loss"].get<double>(),
                r["ce_loss"].get<double>() + r["aux_loss"].get<double>() + r["z_loss"].get<double>(),
                1e-9);
    EXPECT_GT(r["aux_loss"].get<double>(), 0.0);
    ASSERT_EQ(r["moe"].size(), 2u);  // both blocks are MoE blocks
    for (const json& b : r["moe"]) {
      int64_t served = 0, wanted = 0;
      for (int64_t n : b["tokens_per_expert"].get<std::vector<int64_t>>()) served += n;
      for (int64_t n : b["wanted_per_expert"].get<std::vector<int64_t>>()) wanted += n;
      EXPECT_EQ(wanted, 2 * tokens_per_step);  // K assignments per token
      EXPECT_EQ(served + b["dropped"].get<int64_t>(), wanted);
      EXPECT_GT(b["dropped"].get<int64_t>(), 0) << "capacity 0.5 drops";
      EXPECT_NEAR(b["dropped_fraction"].get<double>(),
                  double(b["dropped"].get<int64_t>()) / double(wanted), 1e-12);
      EXPECT_GT(b["router_entropy"].get<double>(), 0.0);
      EXPECT_LE(b["router_entropy"].get<double>(), std::log(4.0) + 1e-9);
    }
  }
}

TEST(MoETrain, LoadMetricsAddUpAndCollapseWarnsOnce) {
  TempDir dir("moe_train");
  RunResult r = run_strata(kMoE + "--collapse-pct 0 --collapse-steps 2 --run-dir " + dir.file("a"),
                           "", Streams::separate);
  ASSERT_EQ(r.status, 0) << r.err;
  check_load(step_records(dir.file("a/metrics.jsonl")), 4 * 16);
  // Share > 0% is always true: one warning per block, at the 2nd step, not repeated.
  const std::string all = r.out + r.err;
  int n = 0;
  for (size_t p = all.find("router collapse"); p != std::string::npos;
       p = all.find("router collapse", p + 1))
    ++n;
  EXPECT_EQ(n, 2) << all;
  EXPECT_NE(all.find("--collapse-pct 0"), std::string::npos) << all;
}

TEST(MoETrain, ExpertParallelRunSumsTheLoadOverRanks) {
  TempDir dir("moe_ep");
  RunResult r = run_strata(kMoE + "--nproc 2 --ep 2 --run-dir " + dir.file("b"), "",
                           Streams::separate);
  ASSERT_EQ(r.status, 0) << r.err;
  const std::vector<json> recs = step_records(dir.file("b/metrics.jsonl"));
  check_load(recs, 4 * 16);
  // Every served assignment was processed by exactly one rank's experts.
  for (const json& rec : recs) {
    int64_t served = 0, processed = 0;
    for (const json& b : rec["moe"])
      for (int64_t n : b["tokens_per_expert"].get<std::vector<int64_t>>()) served += n;
    for (double n : rec["expert_rows_per_rank"].get<std::vector<double>>()) processed += int64_t(n);
    EXPECT_EQ(processed, served);
  }
}

// A checkpoint describes tensors: each expert-parallel rank writes the experts it holds
// (docs/moe.md), and a load maps them onto whatever a rank of the new layout holds. Saved at
// ep 2, it resumes at ep 1, at ep 4 and at ep 2 over 4 ranks with ZeRO 3, and training goes
// on exactly as the uninterrupted run (dropless, no aux loss: the loss does not depend on
// how tokens are grouped into ranks, so every layout trains the same model).
TEST(MoETrain, CheckpointAtEp2ResumesAtEp1AndEp4) {
  TempDir dir("moe_ckpt");
  const std::string exact = kBase + "--dropless --aux-loss-coef 0 ";
  // The uninterrupted run, checkpointing at step 2 (the same learning-rate schedule).
  RunResult ref = run_strata(exact + "--nproc 2 --ep 2 --ckpt-every 2 --run-dir " + dir.file("a"),
                             "", Streams::separate);
  ASSERT_EQ(ref.status, 0) << ref.err;
  const std::vector<json> want = step_records(dir.file("a/metrics.jsonl"));
  ASSERT_EQ(want.size(), 4u);
  const std::string from = dir.file("a/ckpt/step-000002");
  // Each ep rank wrote its own experts; the export has every expert of both blocks, once.
  RunResult x = run_strata("ckpt export " + from + " --safetensors " + dir.file("m.safetensors"),
                           "", Streams::separate);
  ASSERT_EQ(x.status, 0) << x.err;
  RunResult in = run_strata("ckpt import " + dir.file("m.safetensors"), "", Streams::separate);
  ASSERT_EQ(in.status, 0) << in.err;
  for (int l = 0; l < 2; ++l)
    for (int e = 0; e < 4; ++e)
      EXPECT_NE(in.out.find("h." + std::to_string(l) + ".mlp.experts." + std::to_string(e) +
                            ".c_proj.weight"),
                std::string::npos)
          << in.out;
  int k = 0;
  for (const char* layout : {"--ep 1 --nproc 1", "--ep 4 --nproc 4", "--ep 2 --nproc 4 --zero 3"}) {
    const std::string to = dir.file("r" + std::to_string(k++));
    RunResult r = run_strata(exact + layout + " --resume " + from + " --run-dir " + to, "",
                             Streams::separate);
    ASSERT_EQ(r.status, 0) << layout << ": " << r.err;
    EXPECT_NE((r.out + r.err).find("resuming from step 2"), std::string::npos) << r.out << r.err;
    const std::vector<json> recs = step_records(to + "/metrics.jsonl");
    ASSERT_EQ(recs.size(), 2u) << layout;
    EXPECT_EQ(recs.front()["step"], 3);
    for (size_t i = 0; i < 2; ++i)
      EXPECT_NEAR(recs[i]["loss"].get<double>(), want[i + 2]["loss"].get<double>(), 1e-5)
          << layout << " step " << i + 3;
  }
}

// Each step's all-to-all bytes of `groups` ep groups are the plan's: its counts per pass and
// its bytes per token row for the rows the step dispatched, which are at most the plan's bound
// (one row per token and owner rank) and more than half of it.
void expect_ep_bytes_of_the_plan(const std::vector<json>& recs, const json& plan, int64_t groups) {
  for (const json& rec : recs) {
    const int64_t rows = rec["ep_rows"].get<int64_t>(), bytes = rec["ep_bytes"].get<int64_t>();
    EXPECT_EQ(bytes, groups * plan["ep_count_bytes_per_step_per_group"].get<int64_t>() +
                         rows * plan["ep_bytes_per_row"].get<int64_t>());
    EXPECT_LE(bytes, groups * plan["ep_bytes_per_step_per_group"].get<int64_t>());
    EXPECT_GT(2 * bytes, groups * plan["ep_bytes_per_step_per_group"].get<int64_t>());
  }
}

// The all-to-all bytes of a dropless ep step are strata plan's for the layout (exactly the
// bound at top-1, where every row carries one assignment), so are rank 0's model states and
// gradient reduce bytes (experts over edp), and summary.json's config records the MoE settings.
TEST(MoETrain, AllToAllBytesPerStepEqualThePlan) {
  TempDir dir("moe_bytes");
  const std::string model = "--layers 2 --dim 32 --heads 2 --seq 16 --max-seq 16 --experts 4 --top-k 2 ";
  RunResult r = run_strata("train " + model + "--batch 4 --steps 2 --peak-gflops 1000 "
                           "--data synthetic:50000 --sample-tokens 0 --eval-batches 1 --dropless "
                           "--nproc 4 --ep 2 --run-dir " + dir.file("d"),
                           "", Streams::separate);
  ASSERT_EQ(r.status, 0) << r.err;
  RunResult plan = run_strata("plan --local --layers 2 --dim 32 --heads 2 --seq 16 --max-seq 16 "
                              "--experts 4 --top-k 2 --dp 4 --ep 2 --micro-batch 1 --json "
                              "--precision fp32",
                              "", Streams::separate);
  ASSERT_EQ(plan.status, 0) << plan.err;
  const json p = json::parse(plan.out);
  const std::vector<json> recs = step_records(dir.file("d/metrics.jsonl"));
  ASSERT_EQ(recs.size(), 2u);
  expect_ep_bytes_of_the_plan(recs, p, 2);  // two ep groups of 2 ranks
  // Top-1: one row per kept assignment, the bound itself.
  std::string model1 = model;
  model1.replace(model1.find("--top-k 2"), 9, "--top-k 1");
  r = run_strata("train " + model1 + "--batch 4 --steps 2 --peak-gflops 1000 --data synthetic:50000 "
                 "--sample-tokens 0 --eval-batches 1 --dropless --nproc 4 --ep 2 --run-dir " + dir.file("k1"),
                 "", Streams::separate);
  ASSERT_EQ(r.status, 0) << r.err;
  RunResult plan1 = run_strata("plan --local --layers 2 --dim 32 --heads 2 --seq 16 --max-seq 16 --experts 4 --top-k 1 "
                               "--dp 4 --ep 2 --micro-batch 1 --json --precision fp32",
                               "", Streams::separate);
  ASSERT_EQ(plan1.status, 0) << plan1.err;
  for (const json& rec : step_records(dir.file("k1/metrics.jsonl")))
    EXPECT_EQ(rec["ep_bytes"].get<int64_t>(), 2 * json::parse(plan1.out)["ep_bytes_per_step_per_group"].get<int64_t>());
  const json s = json::parse(read_file(dir.file("d/summary.json")));
  EXPECT_EQ(s["config"]["moe"]["experts"], 4);
  EXPECT_EQ(s["config"]["moe"]["dropless"], true);
  const json& rank = p["ranks"][0];
  EXPECT_EQ(s["engine_memory"]["model_states"], rank["model_states"]);
  EXPECT_EQ(s["model_states_formula"]["total"], rank["model_states"]);
  EXPECT_EQ(s["parallel"]["grad_reduce_bytes_per_step"], rank["grad_reduce_bytes_per_step"]);
  EXPECT_EQ(s["experts"]["grad_reduce_bytes_experts"],
            s["experts"]["grad_reduce_bytes_experts_formula"]);
  for (const json& rec : recs)
    EXPECT_EQ(rec["grad_reduce_bytes"], rank["grad_reduce_bytes_per_step"]);
}

// A straggler line names the slow rank's expert load: --straggler-pct 0 names every rank
// above the median compute time.
TEST(MoETrain, StragglerLineNamesTheExpertLoad) {
  TempDir dir("moe_straggler");
  RunResult r = run_strata(kMoE + "--nproc 2 --ep 2 --straggler-every 2 --straggler-pct 0 "
                                  "--run-dir " + dir.file("c"),
                           "", Streams::separate);
  ASSERT_EQ(r.status, 0) << r.err;
  const std::string all = r.out + r.err;
  ASSERT_NE(all.find("stragglers at step"), std::string::npos) << all;
  EXPECT_NE(all.find("expert load: rank "), std::string::npos) << all;
}

// Fine-grained and shared experts at tp 2 x ep 2: rank 0's parameters, model states and the
// all-to-all bytes equal strata plan's for the layout (the rows stay C wide).
TEST(MoETrain, FineGrainedAndSharedExpertsEqualThePlan) {
  TempDir dir("moe_deepseek_plan");
  const std::string model = "--layers 2 --dim 32 --heads 2 --seq 16 --max-seq 16 --experts 4 --top-k 2 "
                            "--expert-ffn 32 --shared-experts 1 ";
  RunResult r = run_strata("train " + model + "--batch 2 --steps 2 --peak-gflops 1000 "
                           "--data synthetic:50000 --sample-tokens 0 --eval-batches 1 --dropless "
                           "--nproc 4 --ep 2 --tp 2 --run-dir " + dir.file("d"),
                           "", Streams::separate);
  ASSERT_EQ(r.status, 0) << r.err;
  RunResult plan = run_strata("plan --local " + model + "--tp 2 --dp 2 --ep 2 --micro-batch 1 --json "
                              "--precision fp32",
                              "", Streams::separate);
  ASSERT_EQ(plan.status, 0) << plan.err;
  const json p = json::parse(plan.out);
  const json s = json::parse(read_file(dir.file("d/summary.json")));
  const json& rank = p["ranks"][0];
  EXPECT_EQ(s["params"], p["moe"]["params"]);
  EXPECT_EQ(s["experts"]["dense_params"].get<int64_t>() + s["experts"]["expert_params"].get<int64_t>(),
            rank["params"].get<int64_t>());
  EXPECT_EQ(s["experts"]["expert_params"], rank["expert_params"]);
  EXPECT_EQ(s["engine_memory"]["model_states"], rank["model_states"]);
  EXPECT_EQ(s["model_states_formula"]["total"], rank["model_states"]);
  const std::vector<json> recs = step_records(dir.file("d/metrics.jsonl"));
  ASSERT_EQ(recs.size(), 2u);
  expect_ep_bytes_of_the_plan(recs, p, 2);  // an ep group of 2 ranks per tp rank
}

}  // namespace

}  // namespace test_moe_train
