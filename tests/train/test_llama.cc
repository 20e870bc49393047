// Llama blocks end to end (--arch llama, model/block.h): every layout equals one process,
// recomputation changes no bit, the planner's bytes equal the run's, checkpoints reshard across
// layouts, and bad architecture flags fail in one line before any step.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cli_util.h"

namespace strata::test {
namespace {

using nlohmann::json;

// Grouped-query attention 4:2, a SwiGLU MLP of 96, untied lm_head.
const std::string kLlama =
    "train --model llama-tiny --layers 4 --dim 64 --heads 4 --kv-heads 2 --ffn 96 --max-seq 64 "
    "--seq 64 --batch 4 --steps 8 --lr 1e-2 --seed 5 --eval-batches 1 --sample-tokens 0";

TEST(Llama, EveryLayoutEqualsOneProcess) {
  const TrainRun one = train_run(kLlama, "llama-one");
  ASSERT_EQ(one.cli.status, 0) << one.cli.err;
  ASSERT_EQ(one.losses.size(), 8u);
  EXPECT_LT(one.losses.back(), one.losses.front());  // it learns
  const char* layouts[] = {
      "--nproc 2 --zero 0",
      "--nproc 2 --zero 1",
      "--nproc 2 --zero 3",
      "--nproc 2 --pp 2 --schedule gpipe",
      "--nproc 2 --tp 2 --sp",
      "--nproc 2 --tp 2 --no-sp",
      "--nproc 2 --cp 2",
      "--nproc 2 --cp 2 --cp-chunks contiguous",
      "--nproc 2 --cp 2 --cp-mode ulysses",
      "--nproc 2 --cp 2 --cp-mode ulysses --kv-heads 4",
      "--nproc 2 --pp 2",
      "--nproc 2 --pp 2 --schedule zb",
      "--nproc 2 --pp 2 --zero 3",
      "--nproc 2 --pp 2 --schedule interleaved --virtual-stages 2 --micro-batches 4",
      "--nproc 2 --pp 2 --tp 2 --sp --micro-batches 2",
      "--nproc 2 --tp 2 --cp 2",
  };
  const TrainRun mha = train_run(kLlama + " --kv-heads 4", "llama-mha");
  ASSERT_EQ(mha.cli.status, 0) << mha.cli.err;
  for (const char* layout : layouts) {
    const std::string l = layout;
    const bool four = l.find("--kv-heads 4") != std::string::npos;
    const int nproc = l.find("--tp 2 --sp --micro") != std::string::npos ||
                              l.find("--tp 2 --cp 2") != std::string::npos
                          ? 4
                          : 2;
    const std::string args = kLlama + " " + l + (nproc == 4 ? " --nproc 4" : "");
    const TrainRun r = train_run(args, "llama-layout");
    ASSERT_EQ(r.cli.status, 0) << layout << "\n" << r.cli.err;
    EXPECT_LT(max_abs_diff(r.losses, four ? mha.losses : one.losses), 1e-5) << layout;
  }
}

// Fewer key/value heads than tp or cp ranks: each head is replicated on the tp ranks (or the
// Ulysses cp ranks) whose query heads share it, its gradient summed over them. Multi-query
// (kv 1) and 2-group models equal one process in every such layout, the gradient norm too
// (a replicated head counted once), a checkpoint resumes in another layout, and the planner's
// tp bytes equal the run's.
TEST(Llama, SharedKeyValueHeadsEqualOneProcess) {
  const std::vector<std::pair<int, std::vector<std::string>>> cases = {
      {1,
       {"--nproc 2 --tp 2 --sp", "--nproc 4 --tp 4 --no-sp", "--nproc 2 --cp 2 --cp-mode ulysses",
        "--nproc 4 --tp 2 --cp 2 --cp-mode ulysses",
        "--nproc 4 --pp 2 --tp 2 --schedule zb --micro-batches 2"}},
      {2, {"--nproc 4 --tp 4 --sp", "--nproc 4 --cp 4 --cp-mode ulysses"}},
  };
  for (const auto& [kv, layouts] : cases) {
    const std::string model = kLlama + " --kv-heads " + std::to_string(kv);
    const TrainRun one = train_run(model, "llama-kv-one");
    ASSERT_EQ(one.cli.status, 0) << one.cli.err;
    for (const std::string& layout : layouts) {
      const TrainRun r = train_run(model + " " + layout, "llama-kv");
      ASSERT_EQ(r.cli.status, 0) << layout << "\n" << r.cli.err;
      EXPECT_LT(max_abs_diff(r.losses, one.losses), 1e-5) << "kv " << kv << " " << layout;
      EXPECT_LT(max_abs_diff(grad_norms(r), grad_norms(one)), 1e-4) << "kv " << kv << " " << layout;
      if (layout.find("--tp") != std::string::npos && layout.find("--pp") == std::string::npos) {
        for (const json& rank : r.summary["tensor_parallel"]["ranks"])
          for (const char* key : {"tp_bytes_per_step", "model_states", "activations"})
            EXPECT_EQ(rank[key], rank[std::string(key) + "_plan"]) << layout << " " << key;
      }
      if (layout.find("--cp") != std::string::npos) {
        for (const json& rec : r.records) EXPECT_EQ(rec["cp_bytes"], rec["cp_bytes_formula"]);
      }
    }
  }
  // bf16: the shared head's gradient is rounded once, as in one process.
  const std::string mqa = kLlama + " --kv-heads 1 --precision bf16";
  const TrainRun one = train_run(mqa, "llama-mqa-bf16");
  const TrainRun tp = train_run(mqa + " --nproc 2 --tp 2", "llama-mqa-bf16-tp");
  ASSERT_EQ(tp.cli.status, 0) << tp.cli.err;
  EXPECT_LT(max_abs_diff(tp.losses, one.losses), 1e-2);
  // A tp 4 checkpoint of a multi-query model resumes at tp 2 and in one process.
  TempDir dir("llama-kv-ckpt");
  const std::string fp32 = kLlama + " --kv-heads 1";
  const TrainRun whole = train_run(fp32, "llama-kv-whole");
  const RunResult first =
      run_strata(fp32 + " --nproc 4 --tp 4 --ckpt-every 4 --run-dir " + dir.file("a"));
  ASSERT_EQ(first.status, 0) << first.out;
  for (const std::string layout : {"", " --nproc 2 --tp 2"}) {
    const TrainRun r =
        train_run(fp32 + layout + " --resume " + dir.file("a") + "/ckpt/step-000004", "llama-kv-resume");
    ASSERT_EQ(r.cli.status, 0) << layout << "\n" << r.cli.err;
    ASSERT_EQ(r.losses.size(), 4u) << layout;
    for (size_t i = 0; i < 4; ++i) EXPECT_NEAR(r.losses[i], whole.losses[i + 4], 1e-5) << layout;
  }
}

// Documents packed into a sequence: attention stays inside each and the rotary positions
// restart at its first token, the same under context parallelism (global positions) and tp.
TEST(Llama, DocumentMaskInEveryLayout) {
  const std::string docs = kLlama + " --doc-mask --doc-token 32";  // a frequent token: documents
  const TrainRun one = train_run(docs, "llama-docs");
  ASSERT_EQ(one.cli.status, 0) << one.cli.err;
  const TrainRun plain = train_run(kLlama, "llama-nodocs");
  EXPECT_NE(one.losses, plain.losses);
  for (const std::string layout : {" --nproc 2 --cp 2", " --nproc 2 --cp 2 --cp-mode ulysses",
                                   " --nproc 2 --tp 2 --sp", " --nproc 2 --pp 2"}) {
    const TrainRun r = train_run(docs + layout, "llama-docs-layout");
    ASSERT_EQ(r.cli.status, 0) << layout << "\n" << r.cli.err;
    EXPECT_LT(max_abs_diff(r.losses, one.losses), 1e-5) << layout;
  }
}

TEST(Llama, RecomputationChangesNoBit) {
  for (const std::string layout : {"", " --nproc 2 --tp 2 --sp", " --precision bf16",
                                   " --nproc 2 --pp 2 --schedule zb"}) {
    const TrainRun plain = train_run(kLlama + layout, "llama-rc");
    ASSERT_EQ(plain.cli.status, 0) << plain.cli.err;
    for (const std::string policy : {" --recompute selective", " --recompute full"}) {
      const TrainRun r = train_run(kLlama + layout + policy, "llama-rc");
      ASSERT_EQ(r.cli.status, 0) << layout << policy << "\n" << r.cli.err;
      EXPECT_EQ(r.losses, plain.losses) << layout << policy;
      EXPECT_EQ(grad_norms(r), grad_norms(plain)) << layout << policy;
    }
  }
}

// Mixtral-style MoE blocks (SwiGLU experts) under expert, tensor and pipeline parallelism:
// dropless and without the per-rank aux loss the loss does not depend on the layout.
TEST(Llama, SwiGluExpertsInEveryLayout) {
  const std::string moe = kLlama + " --experts 4 --top-k 2 --moe-every 2 --dropless --aux-loss-coef 0";
  const TrainRun one = train_run(moe, "llama-moe");
  ASSERT_EQ(one.cli.status, 0) << one.cli.err;
  EXPECT_LT(one.losses.back(), one.losses.front());
  for (const std::string layout : {" --nproc 2 --ep 2", " --nproc 2 --ep 2 --zero 3", " --nproc 4 --ep 2 --tp 2",
                                   " --nproc 4 --pp 2 --ep 2", " --nproc 2 --pp 2 --schedule zb"}) {
    const TrainRun r = train_run(moe + layout, "llama-moe-layout");
    ASSERT_EQ(r.cli.status, 0) << layout << "\n" << r.cli.err;
    EXPECT_LT(max_abs_diff(r.losses, one.losses), 1e-5) << layout;
  }
}

// bf16 compute against one process in bf16 (both round their matmul inputs alike).
TEST(Llama, Bf16LayoutsEqualOneProcessBf16) {
  const TrainRun one = train_run(kLlama + " --precision bf16", "llama-bf16");
  ASSERT_EQ(one.cli.status, 0) << one.cli.err;
  const TrainRun fp32 = train_run(kLlama, "llama-fp32");
  EXPECT_LT(max_abs_diff(one.losses, fp32.losses), 5e-2);  // bf16 is close to fp32, not equal
  for (const std::string layout : {" --nproc 2 --zero 3", " --nproc 2 --tp 2 --sp", " --nproc 2 --pp 2",
                                   " --nproc 2 --pp 2 --zero 3", " --nproc 2 --cp 2"}) {
    const TrainRun r = train_run(kLlama + " --precision bf16" + layout, "llama-bf16");
    ASSERT_EQ(r.cli.status, 0) << layout << "\n" << r.cli.err;
    EXPECT_LT(max_abs_diff(r.losses, one.losses), 1e-2) << layout;
  }
  // Untied stages keep bf16 working copies as one process does: the same bits.
  const TrainRun pp = train_run(kLlama + " --precision bf16 --nproc 2 --pp 2", "llama-bf16-pp");
  EXPECT_EQ(pp.losses, one.losses);
}

// Multi-query attention (one key/value head) and tied embeddings train, and differ from the
// default: the flags reach the model.
TEST(Llama, MultiQueryAndTiedEmbeddings) {
  const TrainRun gqa = train_run(kLlama, "llama-gqa");
  const TrainRun mqa = train_run(kLlama + " --kv-heads 1", "llama-mqa");
  const TrainRun tied = train_run(kLlama + " --tie-embeddings", "llama-tied");
  for (const TrainRun* r : {&gqa, &mqa, &tied}) {
    ASSERT_EQ(r->cli.status, 0) << r->cli.err;
    EXPECT_LT(r->losses.back(), r->losses.front());
  }
  EXPECT_NE(mqa.losses, gqa.losses);
  EXPECT_NE(tied.losses, gqa.losses);
  EXPECT_LT(mqa.summary["params"].get<int64_t>(), gqa.summary["params"].get<int64_t>());
  EXPECT_LT(tied.summary["params"].get<int64_t>(), gqa.summary["params"].get<int64_t>());
  const TrainRun mqa_dp = train_run(kLlama + " --kv-heads 1 --nproc 2 --zero 2", "llama-mqa-dp");
  ASSERT_EQ(mqa_dp.cli.status, 0) << mqa_dp.cli.err;
  EXPECT_LT(max_abs_diff(mqa_dp.losses, mqa.losses), 1e-5);
  const TrainRun tied_pp = train_run(kLlama + " --tie-embeddings --nproc 2 --pp 2", "llama-tied-pp");
  ASSERT_EQ(tied_pp.cli.status, 0) << tied_pp.cli.err;
  EXPECT_LT(max_abs_diff(tied_pp.losses, tied.losses), 1e-5);
}

// The planner's per-rank parameters and activation bytes are the run's, to the byte.
TEST(Llama, PlanLocalEqualsTheRun) {
  for (const std::string tp : {"1", "2"}) {
    const TrainRun r = train_run(kLlama + " --steps 1 --micro-batch 2 --recompute selective --nproc " + tp +
                                     " --tp " + tp,
                                 "llama-plan");
    ASSERT_EQ(r.cli.status, 0) << r.cli.err;
    const RunResult plan = run_strata(
        "plan --local --model llama-tiny --layers 4 --dim 64 --heads 4 --kv-heads 2 --ffn 96 "
        "--max-seq 64 --seq 64 --micro-batch 2 --precision fp32 --json --recompute selective --tp " +
        tp);
    ASSERT_EQ(plan.status, 0) << plan.out;
    const json p = json::parse(plan.out);
    const json& rc = r.summary["recompute"];
    EXPECT_EQ(rc["activation_bytes"].get<int64_t>(), p["ranks"][0]["activations"].get<int64_t>()) << tp;
    for (const auto& [name, bytes] : p["ranks"][0]["activation_buffers"].items())
      EXPECT_EQ(rc["buffers_plan"][name], bytes) << tp << " " << name;
    if (tp == "2") {
      for (const json& rank : r.summary["tensor_parallel"]["ranks"])
        EXPECT_EQ(rank["tp_bytes_per_step"], rank["tp_bytes_per_step_plan"]);
    }
  }
  const TrainRun cp = train_run(kLlama + " --steps 2 --nproc 2 --cp 2", "llama-cp-bytes");
  ASSERT_EQ(cp.cli.status, 0) << cp.cli.err;
  for (const json& rec : cp.records) EXPECT_EQ(rec["cp_bytes"], rec["cp_bytes_formula"]);
}

// A pipeline stage's activation bytes equal the stage formula with Llama widths (qkv of the
// key/value heads, SwiGLU's gate | up, no position table), zero-bubble's stash and cp buffers
// included.
TEST(Llama, PipelineStageBytesEqualTheFormula) {
  for (const std::string layout : {" --nproc 2 --pp 2", " --nproc 2 --pp 2 --schedule zb --recompute selective",
                                   " --nproc 4 --pp 2 --tp 2 --sp --precision bf16",
                                   " --nproc 4 --pp 2 --cp 2 --recompute full"}) {
    const TrainRun r = train_run(kLlama + " --steps 1 --micro-batch 2" + layout, "llama-stage-bytes");
    ASSERT_EQ(r.cli.status, 0) << layout << "\n" << r.cli.err;
    const json& stages = r.summary["pipeline"]["stages"];
    ASSERT_EQ(stages.size(), 2u) << layout;
    for (const json& st : stages)
      EXPECT_EQ(st["activation_bytes"].get<int64_t>(), st["activation_bytes_planned"].get<int64_t>()) << layout;
  }
}

// A checkpoint of one layout resumes in another: the same losses as the uninterrupted run.
TEST(Llama, CheckpointsReshardAcrossLayouts) {
  TempDir dir("llama-ckpt");
  const TrainRun whole = train_run(kLlama, "llama-whole");
  ASSERT_EQ(whole.cli.status, 0) << whole.cli.err;
  const RunResult first = run_strata(kLlama + " --nproc 2 --tp 2 --sp --ckpt-every 4 --run-dir " +
                                     dir.file("a"));
  ASSERT_EQ(first.status, 0) << first.out;
  const std::string step4 = dir.file("a") + "/ckpt/step-000004";
  for (const std::string layout : {"", " --nproc 2 --pp 2", " --nproc 2 --zero 3", " --nproc 2 --cp 2"}) {
    const TrainRun r = train_run(kLlama + layout + " --resume " + step4, "llama-resume");
    ASSERT_EQ(r.cli.status, 0) << layout << "\n" << r.cli.err;
    ASSERT_EQ(r.losses.size(), 4u) << layout;
    for (size_t i = 0; i < 4; ++i) EXPECT_NEAR(r.losses[i], whole.losses[i + 4], 1e-5) << layout;
  }
  // Another architecture cannot load it: one line.
  const RunResult gpt = run_strata("train --layers 4 --dim 64 --heads 4 --max-seq 64 --seq 64 --batch 4 "
                                   "--steps 8 --resume " + step4);
  EXPECT_NE(gpt.status, 0);
  EXPECT_NE(gpt.out.find("written for a different model"), std::string::npos) << gpt.out;
}

TEST(Llama, BadArchitectureFlagsFailInOneLine) {
  const std::pair<std::string, std::string> cases[] = {
      {kLlama + " --kv-heads 3", "--kv-heads 3 does not divide"},
      {kLlama + " --dim 96 --heads 6 --kv-heads 3 --nproc 2 --tp 2", "key/value heads"},
      {kLlama + " --dim 96 --heads 6 --kv-heads 3 --nproc 2 --cp 2 --cp-mode ulysses",
       "key/value heads"},
      {kLlama + " --ffn 95 --nproc 2 --tp 2", "--ffn"},
      {kLlama + " --experts 6 --ep 4 --nproc 4", "--ep 4"},
      {"train --model tiny --kv-heads 2 --steps 1", "--kv-heads needs Llama blocks"},
      {"train --model tiny --arch mamba --steps 1", "--arch mamba"},
      {kLlama + " --dim 60 --heads 4 --kv-heads 2", "even head size"},
  };
  for (const auto& [args, want] : cases) {
    const RunResult r = run_strata(args);
    EXPECT_NE(r.status, 0) << args;
    EXPECT_NE(r.out.find(want), std::string::npos) << args << "\n" << r.out;
    EXPECT_EQ(r.out.find("step "), std::string::npos) << args << "\n" << r.out;
  }
}

}  // namespace
}  // namespace strata::test
