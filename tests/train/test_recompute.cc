// --recompute end to end: selective and full recomputation change no number (losses and
// gradient norms bit-identical to the same layout without it) in every layout, keep exactly
// the activation bytes the formula (and `strata plan --local --recompute`) gives, cost the
// time summary.json reports, and resume from checkpoints as before.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "cli_util.h"

namespace strata::test {
namespace {

using nlohmann::json;

const std::string kModel =
    "train --layers 4 --dim 32 --heads 4 --max-seq 64 --seq 64 --batch 4 --steps 6 --lr 1e-2 "
    "--seed 5 --eval-batches 1 --sample-tokens 0";

const char* kPolicies[] = {"--recompute selective", "--recompute full",
                           "--recompute full --recompute-layers 1"};

// Each layout with each policy against the same layout without recomputation: the same bits.
TEST(Recompute, ChangesNoNumberInAnyLayout) {
  const TrainRun one = train_run(kModel, "rc-one");
  ASSERT_EQ(one.cli.status, 0) << one.cli.err;
  const char* layouts[] = {
      "",
      "--nproc 2 --zero 3",
      "--nproc 2 --tp 2 --sp",
      "--nproc 2 --cp 2",
      "--nproc 2 --cp 2 --cp-mode ulysses",
      "--nproc 2 --pp 2",
      "--nproc 2 --pp 2 --schedule zb",
      "--nproc 2 --pp 2 --schedule interleaved --virtual-stages 2 --micro-batches 4",
      "--nproc 2 --experts 4 --top-k 2 --moe-every 2 --ep 2",
      "--precision bf16",
  };
  for (const char* layout : layouts) {
    const TrainRun plain = train_run(kModel + " " + layout, "rc-plain");
    ASSERT_EQ(plain.cli.status, 0) << layout << "\n" << plain.cli.err;
    if (std::string(layout).find("bf16") == std::string::npos &&
        std::string(layout).find("experts") == std::string::npos) {
      EXPECT_LT(max_abs_diff(plain.losses, one.losses), 1e-5) << layout;
    }
    for (const char* policy : kPolicies) {
      const TrainRun r = train_run(kModel + " " + layout + " " + policy, "rc-policy");
      ASSERT_EQ(r.cli.status, 0) << layout << " " << policy << "\n" << r.cli.err;
      EXPECT_EQ(r.losses, plain.losses) << layout << " " << policy;
      EXPECT_EQ(grad_norms(r), grad_norms(plain)) << layout << " " << policy;
      ASSERT_TRUE(r.summary.contains("recompute")) << layout << " " << policy;
      EXPECT_GT(r.summary["recompute"]["seconds_per_step"].get<double>(), 0.0) << layout << " " << policy;
      if (std::string(policy) != "--recompute selective") continue;
      // The elementwise work the summary counts (cost::selective_recompute_per_token): per
      // token, two LayerNorms (16·C) and, under fp32, a dense block's GELU (20·4C); twice
      // under zero-bubble. 4 blocks, C 32, 4 x 64 tokens a step.
      const std::string l = layout;
      const bool bf16 = l.find("bf16") != std::string::npos, moe = l.find("experts") != std::string::npos;
      const double C = 32, dense = moe ? 2 : 4, passes = l.find("zb") != std::string::npos ? 2 : 1;
      EXPECT_DOUBLE_EQ(r.summary["recompute"]["flops_per_step"].get<double>(),
                       passes * (4 * 16 * C + dense * (bf16 ? 0 : 20 * 4 * C)) * 4 * 64)
          << layout;
    }
  }
}

// The bytes kept: the model's buffers equal the formula by buffer and `strata plan --local`,
// and the memory tracker's activation peak falls by the planned amount.
TEST(Recompute, ActivationBytesEqualThePlanAndFallByIt) {
  for (const std::string layout : {"", " --nproc 2 --tp 2 --sp"}) {
    int64_t plain_peak = 0, plain_plan = 0;
    for (const std::string policy : {"none", "selective", "full"}) {
      const TrainRun r = train_run(kModel + layout + " --micro-batch 2 --recompute " + policy, "rc-bytes");
      ASSERT_EQ(r.cli.status, 0) << layout << " " << policy << "\n" << r.cli.err;
      const int64_t peak = r.summary["memory"]["activations"]["peak"].get<int64_t>();
      const std::string tp = layout.empty() ? "" : " --tp 2";
      const RunResult plan = run_strata("plan --local --model tiny --layers 4 --dim 32 --heads 4 --max-seq 64 "
                                        "--seq 64 --micro-batch 2 --precision fp32 --json --recompute " + policy + tp);
      ASSERT_EQ(plan.status, 0) << plan.out;
      const json p = json::parse(plan.out);
      const int64_t planned = p["ranks"][0]["activations"].get<int64_t>();
      if (policy == "none") {
        plain_peak = peak, plain_plan = planned;
        EXPECT_FALSE(r.summary.contains("recompute"));
        continue;
      }
      const json& rc = r.summary["recompute"];
      EXPECT_EQ(rc["activation_bytes"].get<int64_t>(), rc["activation_bytes_plan"].get<int64_t>()) << layout << policy;
      EXPECT_EQ(rc["activation_bytes_plan"].get<int64_t>(), planned) << layout << " " << policy;
      for (const auto& [name, bytes] : p["ranks"][0]["activation_buffers"].items())
        EXPECT_EQ(rc["buffers_plan"][name], bytes) << layout << " " << policy << " " << name;
      EXPECT_EQ(plain_peak - peak, plain_plan - planned) << layout << " " << policy;
      EXPECT_LT(planned, plain_plan) << layout << " " << policy;
    }
  }
}

// What full recomputation sends again (the recomputed blocks' forward collectives: tp's
// gathers and reduce-scatters, the ring's K/V, Ulysses' all-to-alls) is counted, equal to the
// formula.
TEST(Recompute, CommunicationAgainEqualsTheFormula) {
  for (const std::string layout : {"--nproc 2 --tp 2 --sp", "--nproc 2 --tp 2"}) {
    const TrainRun r = train_run(kModel + " --recompute full --recompute-layers 3 " + layout, "rc-tp");
    const TrainRun plain = train_run(kModel + " " + layout, "rc-tp-plain");
    ASSERT_EQ(r.cli.status, 0) << r.cli.err;
    ASSERT_EQ(plain.cli.status, 0) << plain.cli.err;
    for (const json& rank : r.summary["tensor_parallel"]["ranks"])
      EXPECT_EQ(rank["tp_bytes_per_step"], rank["tp_bytes_per_step_plan"]) << layout;
    EXPECT_GT(r.summary["tensor_parallel"]["ranks"][0]["tp_bytes_per_step"].get<int64_t>(),
              plain.summary["tensor_parallel"]["ranks"][0]["tp_bytes_per_step"].get<int64_t>()) << layout;
  }
  for (const std::string layout : {"--nproc 2 --cp 2", "--nproc 2 --cp 2 --cp-mode ulysses"}) {
    const TrainRun r = train_run(kModel + " --recompute full --recompute-layers 3 " + layout, "rc-cp");
    ASSERT_EQ(r.cli.status, 0) << r.cli.err;
    for (const json& rec : r.records) EXPECT_EQ(rec["cp_bytes"], rec["cp_bytes_formula"]) << layout;
  }
}

// A recomputing run checkpoints and resumes as before: resumed from its step-3 checkpoint,
// also under another policy, it ends with the uninterrupted run's losses.
TEST(Recompute, ResumesFromCheckpoints) {
  TempDir dir("rc-resume");
  auto whole = run_strata(kModel + " --recompute full --ckpt-every 3 --run-dir " + dir.file("a"), "",
                          Streams::separate);
  ASSERT_EQ(whole.status, 0) << whole.err;
  auto resumed = run_strata(kModel + " --recompute selective --resume " + dir.file("a/ckpt/step-000003") +
                                " --run-dir " + dir.file("b"),
                            "", Streams::separate);
  ASSERT_EQ(resumed.status, 0) << resumed.err;
  auto losses = [&](const std::string& run) {
    std::vector<double> out;
    for (const json& rec : step_records(dir.file(run + "/metrics.jsonl"))) out.push_back(rec["loss"].get<double>());
    return out;
  };
  const std::vector<double> a = losses("a"), b = losses("b");
  ASSERT_EQ(a.size(), 6u);
  ASSERT_EQ(b.size(), 3u);
  EXPECT_EQ(b, std::vector<double>(a.begin() + 3, a.end()));
}

// --recompute-inputs bf16: a recomputed block followed by another of its chunk keeps its
// output in bf16 (half its bytes), one fp32 copy is widened for the block reading it; the
// bytes equal the formula and `strata plan --local`, the tracker's peak falls by what the
// test computes from the shape, every layout keeps running, and the numbers move only by the
// rounding of those inputs.
TEST(Recompute, Bf16InputsKeepHalfTheirBytes) {
  const std::string model =
      "train --layers 6 --dim 32 --heads 4 --max-seq 64 --seq 64 --batch 4 --micro-batch 2 --steps 6 "
      "--lr 1e-2 --seed 5 --eval-batches 1 --sample-tokens 0 --precision bf16 --recompute full";
  const TrainRun one = train_run(model + " --recompute-inputs bf16", "rc-bf16-one");
  ASSERT_EQ(one.cli.status, 0) << one.cli.err;
  for (const std::string layout : {"", " --nproc 2 --tp 2 --sp"}) {
    const TrainRun fp = train_run(model + layout, "rc-fp32in");
    const TrainRun bf = train_run(model + layout + " --recompute-inputs bf16", "rc-bf16in");
    ASSERT_EQ(fp.cli.status, 0) << layout << "\n" << fp.cli.err;
    ASSERT_EQ(bf.cli.status, 0) << layout << "\n" << bf.cli.err;
    const json& rc = bf.summary["recompute"];
    EXPECT_EQ(rc["inputs"], "bf16");
    EXPECT_EQ(fp.summary["recompute"]["inputs"], "fp32");
    EXPECT_EQ(rc["activation_bytes"].get<int64_t>(), rc["activation_bytes_plan"].get<int64_t>()) << layout;
    const std::string tp = layout.empty() ? "" : " --tp 2";
    const RunResult plan = run_strata("plan --local --model tiny --layers 6 --dim 32 --heads 4 --max-seq 64 "
                                      "--seq 64 --micro-batch 2 --precision bf16 --json --recompute full "
                                      "--recompute-inputs bf16" + tp);
    ASSERT_EQ(plan.status, 0) << plan.out;
    EXPECT_EQ(json::parse(plan.out)["ranks"][0]["activations"].get<int64_t>(),
              rc["activation_bytes_plan"].get<int64_t>()) << layout;
    // Five of the six blocks keep n x C bf16 values instead of fp32 (2 bytes each saved), one
    // fp32 input of n x C is widened: 6 n C bytes fewer (n = 128 rows, 64 under tp 2 + SP).
    const int64_t n = layout.empty() ? 128 : 64, C = 32;
    const int64_t saved = 5 * 2 * n * C - 4 * n * C;
    EXPECT_EQ(fp.summary["recompute"]["activation_bytes"].get<int64_t>() - rc["activation_bytes"].get<int64_t>(),
              saved) << layout;
    EXPECT_EQ(fp.summary["memory"]["activations"]["peak"].get<int64_t>() -
                  bf.summary["memory"]["activations"]["peak"].get<int64_t>(),
              saved) << layout;
    // The rounding moves the numbers (the option acts), by bf16's measure only.
    EXPECT_NE(bf.losses, fp.losses) << layout;
    EXPECT_LT(max_abs_diff(bf.losses, fp.losses), 5e-3) << layout;
    EXPECT_LT(max_abs_diff(bf.losses, one.losses), 5e-3) << layout;
  }
  for (const char* layout : {" --nproc 2 --zero 2", " --nproc 2 --pp 2", " --nproc 2 --pp 2 --schedule zb"}) {
    const TrainRun r = train_run(model + layout + " --recompute-inputs bf16", "rc-bf16in-layout");
    ASSERT_EQ(r.cli.status, 0) << layout << "\n" << r.cli.err;
    EXPECT_LT(max_abs_diff(r.losses, one.losses), 5e-3) << layout;
    if (!r.summary.contains("pipeline")) continue;
    for (const json& stage : r.summary["pipeline"]["stages"])
      EXPECT_EQ(stage["activation_bytes"], stage["activation_bytes_planned"]) << layout;
  }
}

TEST(Recompute, BadFlagsAreOneLine) {
  auto bogus = run_strata("train --steps 1 --recompute some", "", Streams::separate);
  EXPECT_NE(bogus.status, 0);
  EXPECT_NE(bogus.err.find("--recompute some: must be none, selective or full"), std::string::npos) << bogus.err;
  auto layers = run_strata("train --steps 1 --recompute selective --recompute-layers 2", "", Streams::separate);
  EXPECT_NE(layers.status, 0);
  EXPECT_NE(layers.err.find("--recompute-layers 2 needs --recompute full"), std::string::npos) << layers.err;
  auto negative = run_strata("train --steps 1 --recompute full --recompute-layers -1", "", Streams::separate);
  EXPECT_NE(negative.status, 0);
  EXPECT_NE(negative.err.find("--recompute-layers must not be negative"), std::string::npos) << negative.err;
  const std::pair<const char*, const char*> inputs[] = {
      {"--recompute full --recompute-inputs half", "--recompute-inputs half: must be fp32 or bf16"},
      {"--recompute full --recompute-inputs bf16", "--recompute-inputs bf16 needs --precision bf16"},
      {"--precision bf16 --recompute selective --recompute-inputs bf16",
       "--recompute-inputs bf16 needs --recompute full"},
      {"--precision bf16 --recompute full --recompute-inputs bf16 --experts 4",
       "--recompute-inputs bf16 is for dense models"},
  };
  for (const auto& [flags, line] : inputs) {
    auto r = run_strata(std::string("train --steps 1 ") + flags, "", Streams::separate);
    EXPECT_NE(r.status, 0) << flags;
    EXPECT_NE(r.err.find(line), std::string::npos) << flags << "\n" << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << flags << "\n" << r.err;
  }
}

}  // namespace
}  // namespace strata::test
