// `strata plan` as a user runs it: tables, JSON, and one-line errors with their exit codes.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "cost/memory.h"
#include "nlohmann/json.hpp"
#include "plan/model_spec.h"
#include "support/run.h"
#include "support/temp_dir.h"

namespace {

using CliRun = strata::test::RunResult;
using strata::test::run_strata;
using strata::test::Streams;

bool has(const std::string& s, const std::string& needle) {
  return s.find(needle) != std::string::npos;
}

}  // namespace

TEST(PlanCli, TableForAPreset) {
  CliRun r = run_strata("plan --model llama2-70b --gpus 256 --gpu h100-80g");
  ASSERT_EQ(r.status, 0) << r.out;
  for (const char* s : {"Best layout", "Memory per GPU", "Communication per step", "MFU",
                        "Why this layout", "runner-up", "Daly", "GPU-hours per day", "days",
                        "lost work per failure: restart from disk ",
                        "from in-memory copies every 1 step(s) (--mem-ckpt-every 1)"})
    EXPECT_TRUE(has(r.out, s)) << s << "\n" << r.out;
}

TEST(PlanCli, JsonHasTheDocumentedKeys) {
  CliRun r = run_strata("plan --model gpt3-175b --gpus 1024 --gpu a100-80g --json", "", Streams::separate);
  ASSERT_EQ(r.status, 0) << r.out;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["model"]["name"], "gpt3-175b");
  const auto& best = j["best"];
  ASSERT_TRUE(best.is_object());
  for (const char* k : {"parameters", "gradients", "optimizer", "total"})
    EXPECT_TRUE(best["memory"]["model_states"].contains(k)) << k;
  EXPECT_LE(best["memory"]["total"].get<double>(), best["memory"]["usable"].get<double>());
  EXPECT_GT(best["mfu"].get<double>(), 0);
  EXPECT_TRUE(j["compute"].contains("megatron_flops_per_step_full_recompute"));
  EXPECT_GT(j["compute"]["days_to_train"].get<double>(), 1);
  EXPECT_GT(j["reliability"]["daly_interval_s"].get<double>(), 0);
  // Lost work per failure by recovery mode: disk at Daly's interval, in-memory copies every
  // step of the best layout (cost/reliability.h).
  const auto& rel = j["reliability"];
  const double step = best["time"]["step_s"].get<double>(), R = rel["restart_s"].get<double>();
  EXPECT_DOUBLE_EQ(rel["step_s"].get<double>(), step);
  EXPECT_EQ(rel["memory_ckpt_every"], 1);
  EXPECT_DOUBLE_EQ(rel["lost_per_failure_s"]["disk"].get<double>(),
                   rel["daly_interval_s"].get<double>() / 2 + R);
  EXPECT_DOUBLE_EQ(rel["lost_per_failure_s"]["memory"].get<double>(), step + R);
  EXPECT_GE(j["ranking"].size(), 2u);
  EXPECT_LE(best["layout"]["tp"].get<int>(), 8);
}

// What the ZeRO engine's measured accounting is compared with: a strata GPT (explicit
// shape), N data-parallel ranks, one stage, bf16. Model states must be the shared formula.
TEST(PlanCli, ModelStatesForAZeroRunComeFromTheSharedFormula) {
  using namespace strata::plan;
  using namespace strata::cost;
  ModelSpec m;
  apply_arch(m, "gpt");
  m.layers = 2, m.hidden = 64, m.heads = 4, m.kv_heads = 4, m.ffn = 256, m.seq = 32, m.vocab = 100;
  const int64_t psi = count_params(m).total();
  for (int n : {1, 3, 4}) {
    for (int stage = 0; stage <= 3; ++stage) {
      CliRun r = run_strata("plan --layers 2 --dim 64 --heads 4 --seq 32 --vocab 100 --gpus " +
                                std::to_string(n) + " --tp 1 --pp 1 --cp 1 --zero " +
                                std::to_string(stage) + " --batch " + std::to_string(n) +
                                " --precision bf16 --json", "", Streams::separate);
      ASSERT_EQ(r.status, 0) << r.out;
      auto j = nlohmann::json::parse(r.out);
      EXPECT_EQ(j["model"]["params"].get<int64_t>(), psi);
      auto got = j["best"]["memory"]["model_states"];
      ModelStateBytes want = zero_model_state_bytes(psi, n, stage, Precision::bf16);
      EXPECT_EQ(got["parameters"].get<int64_t>(), want.parameters) << n << " " << stage;
      EXPECT_EQ(got["gradients"].get<int64_t>(), want.gradients) << n << " " << stage;
      EXPECT_EQ(got["optimizer"].get<int64_t>(), want.optimizer) << n << " " << stage;
    }
  }
}

TEST(PlanCli, UnknownPresetsListTheKnownOnes) {
  CliRun r = run_strata("plan --model gpt5");
  EXPECT_EQ(r.status, 1);
  EXPECT_TRUE(has(r.out, "unknown model preset 'gpt5'")) << r.out;
  EXPECT_TRUE(has(r.out, "llama3-405b")) << r.out;
  r = run_strata("plan --model gpt2 --gpu v100");
  EXPECT_EQ(r.status, 1);
  EXPECT_TRUE(has(r.out, "unknown GPU preset 'v100'")) << r.out;
  EXPECT_TRUE(has(r.out, "h200")) << r.out;
}

TEST(PlanCli, DegreesThatDoNotMultiplyShowTheNumbers) {
  CliRun r = run_strata("plan --model llama2-70b --gpus 1024 --tp 8 --pp 4 --cp 1 --dp 16");
  EXPECT_EQ(r.status, 1);
  EXPECT_TRUE(has(r.out, "tp 8 × pp 4 × cp 1 × dp 16 = 512 GPUs, but --gpus is 1024")) << r.out;
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << r.out;
}

TEST(PlanCli, HeadsNotDivisibleByTp) {
  CliRun r = run_strata("plan --model llama2-7b --gpus 48 --gpus-per-node 6 --tp 6");
  EXPECT_EQ(r.status, 1);
  EXPECT_TRUE(has(r.out, "--tp 6: the model's 32 attention heads are not divisible by 6")) << r.out;
}

TEST(PlanCli, FitsNowhereNamesTheSmallestCluster) {
  CliRun r = run_strata("plan --model llama3-405b --gpus 8 --gpu a100-40g");
  EXPECT_EQ(r.status, 3) << r.out;
  EXPECT_TRUE(has(r.out, "No layout fits")) << r.out;
  EXPECT_TRUE(has(r.out, "Smallest cluster that fits:")) << r.out;
  CliRun j = run_strata("plan --model llama3-405b --gpus 8 --gpu a100-40g --json", "", Streams::separate);
  EXPECT_EQ(j.status, 3);
  auto doc = nlohmann::json::parse(j.out);
  EXPECT_TRUE(doc["best"].is_null());
  EXPECT_GT(doc["fits_nowhere"]["smallest_cluster_gpus"].get<int64_t>(), 8);
}

TEST(PlanCli, BadFlagsAreOneLine) {
  for (const char* args :
       {"plan --model gpt2 --precision fp16", "plan --model gpt2 --recompute some",
        "plan --model gpt2 --optimizer lion", "plan --model gpt2 --tokens 3X",
        "plan --layers 2 --hidden 64", "plan --model gpt2 --zero 4",
        "plan --model gpt2 --gpu /nonexistent.json"}) {
    CliRun r = run_strata(args);
    EXPECT_EQ(r.status, 1) << args << "\n" << r.out;
    EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << args << "\n" << r.out;
    EXPECT_TRUE(has(r.out, "strata: error: ")) << r.out;
  }
  EXPECT_EQ(run_strata("plan --model gpt2 --tp").status, 2);  // CLI11 parse error
}

TEST(PlanCli, RlhfMode) {
  CliRun r = run_strata("plan --model llama2-7b --rlhf --gpus 8 --gpu a100-80g --json", "", Streams::separate);
  ASSERT_EQ(r.status, 0) << r.out;
  auto j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j["rlhf"]["models"].size(), 4u);
  EXPECT_EQ(j["rlhf"]["models"][2]["role"], "reference");
  EXPECT_GT(j["rlhf"]["kv_cache"].get<double>(), 0);
  CliRun t = run_strata("plan --model llama2-70b --rlhf --gpus 8 --gpu a100-80g");
  EXPECT_EQ(t.status, 3) << t.out;
  EXPECT_TRUE(has(t.out, "DOES NOT FIT")) << t.out;
  EXPECT_TRUE(has(t.out, "smallest cluster that fits")) << t.out;
}

// The one end-to-end check of the ZeRO memory model (the engine equals it in-process for
// every stage, precision and world size in tests/parallel/test_memory.cc): a real
// `strata train --nproc 3 --zero 2 --precision bf16` run (replicated bf16 parameters, sharded
// gradients and optimizer states, Ψ not divisible by 3) reports per-rank model-state bytes,
// in its engine and in the process's memory tracker, equal to the formula and to what
// `strata plan` plans for the same model, N and stage.
TEST(PlanCli, ModelStatesEqualAMeasuredZeroRun) {
  const std::string shape = "--layers 2 --heads 2 --seq 16 --vocab 257 ";  // Ψ = 34208
  const int n = 3, stage = 2;
  strata::test::TempDir dir;
  CliRun t = run_strata("train " + shape + "--dim 32 --max-seq 16 --batch 12 --steps 1 "
                        "--eval-batches 1 --sample-tokens 0 --peak-gflops 100 --nproc 3 --zero 2 "
                        "--precision bf16 --run-dir " + dir.str());
  ASSERT_EQ(t.status, 0) << t.out;
  const nlohmann::json summary = nlohmann::json::parse(strata::test::read_file(dir.file("summary.json")));
  const int64_t psi = summary["params"];
  ASSERT_NE(psi % n, 0) << "the check wants padding: choose a shape whose Ψ is not divisible by " << n;
  const auto want = strata::cost::zero_model_state_bytes(psi, n, stage, strata::cost::Precision::bf16);
  const nlohmann::json& engine = summary["engine_memory"];
  const nlohmann::json& tracked = summary["memory"];
  EXPECT_EQ(engine["parameters"], want.parameters);
  EXPECT_EQ(engine["gradients"], want.gradients);
  EXPECT_EQ(engine["optimizer"], want.optimizer);
  EXPECT_EQ(summary["model_states_formula"]["total"], want.total());
  EXPECT_EQ(tracked["parameters"]["current"], want.parameters);
  EXPECT_EQ(tracked["gradients"]["current"], want.gradients);
  EXPECT_EQ(tracked["optimizer"]["current"], want.optimizer);
  // bf16 gradients by default in both (DeepSpeed's convention; the engine's too).
  CliRun p = run_strata("plan --arch gpt2 " + shape + "--dim 32 --gpus 3 --dp 3 --tp 1 --pp 1 "
                        "--cp 1 --zero 2 --precision bf16 --batch 12 --json", "", Streams::separate);
  ASSERT_EQ(p.status, 0) << p.out << p.err;
  nlohmann::json planned = nlohmann::json::parse(p.out)["best"]["memory"]["model_states"];
  EXPECT_EQ(planned["parameters"], want.parameters);
  EXPECT_EQ(planned["gradients"], want.gradients);
  EXPECT_EQ(planned["optimizer"], want.optimizer);
}

// `strata plan --pp P --schedule S --virtual-stages V --micro-batches M`: the best layout runs
// that schedule over M micro-batches, and its bubble sits beside the schedule's formula.
TEST(PlanCli, PipelineScheduleAndMicroBatches) {
  CliRun r = run_strata("plan --model gpt3-175b --gpus 1024 --gpu a100-80g --tp 8 --pp 16 "
                        "--schedule interleaved --virtual-stages 2 --micro-batches 96 --json",
                        "", Streams::separate);
  ASSERT_EQ(r.status, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  const auto& best = j["best"];
  EXPECT_EQ(best["micro_batches"], 96);
  EXPECT_EQ(best["layout"]["pp"], 16);
  const auto& p = best["pipeline"];
  EXPECT_DOUBLE_EQ(p["bubble_formula"].get<double>(), 15.0 / (2 * 96 + 15));
  EXPECT_NEAR(p["bubble_no_transfer"].get<double>(), 15.0 / (2 * 96 + 15), 1e-9);
  EXPECT_GE(p["bubble_planned"].get<double>(), p["bubble_no_transfer"].get<double>());
  EXPECT_GT(p["transfer_s"].get<double>(), 0);
  CliRun t = run_strata("plan --model gpt3-175b --gpus 1024 --gpu a100-80g --tp 8 --pp 16 "
                        "--schedule zb --micro-batches 96", "", Streams::separate);
  ASSERT_EQ(t.status, 0) << t.err;
  EXPECT_NE(t.out.find("Pipeline  zb, pp 16, 96 micro-batches: bubble "), std::string::npos) << t.out;
  for (auto [flags, want] :
       {std::pair{"--schedule interleaved --virtual-stages 5 --pp 16",
                  "--pp 16 x --virtual-stages 5 = 80 chunks do not divide the 96 layers"},
        {"--virtual-stages 2", "--virtual-stages 2 needs --schedule interleaved (got 1f1b)"},
        {"--schedule wave", "--schedule wave is not a schedule"},
        {"--micro-batches 0", "--micro-batches must be in [1, 2^31] (got 0)"}}) {
    CliRun b = run_strata(std::string("plan --model gpt3-175b --gpus 1024 ") + flags, "",
                          Streams::separate);
    EXPECT_NE(b.status, 0) << flags;
    EXPECT_NE(b.err.find(want), std::string::npos) << flags << ": " << b.err;
  }
}

// A run config `strata train --print-config` writes plans the model it trains: one preset
// table, the train names (--dim) and the preset's sizing rules (MHA's key/value heads follow
// --heads, the MLP width follows --dim) as train applies them.
TEST(PlanCli, PlansTheModelOfATrainRunConfig) {
  strata::test::TempDir dir("plan-train-config");
  const CliRun printed = run_strata(
      "train --model tiny --dim 128 --heads 2 --steps 2 --print-config", "", Streams::separate);
  ASSERT_EQ(printed.status, 0) << printed.err;
  std::ofstream(dir.file("run.toml")) << printed.out;
  const CliRun plan = run_strata("plan --config " + dir.file("run.toml") +
                                     " --gpus 8 --batch 16 --json",
                                 "", Streams::separate);
  ASSERT_EQ(plan.status, 0) << plan.err;
  const nlohmann::json m = nlohmann::json::parse(plan.out)["model"];
  EXPECT_EQ(m["name"], "tiny (modified)");
  EXPECT_EQ(m["hidden"], 128);
  EXPECT_EQ(m["heads"], 2);
  EXPECT_EQ(m["kv_heads"], 2);
  EXPECT_EQ(m["ffn"], 512);
  EXPECT_EQ(m["layers"], 4);
}
