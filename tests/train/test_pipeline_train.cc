// `strata train --pp P`: pipeline stages as real processes give one process's losses (every
// schedule the executor runs, with and without dp), record each stage's bubble per step, and
// bad pipeline layouts are refused with one line before any rank starts.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "cli_util.h"

namespace strata::test::test_pipeline_train {
namespace {

using nlohmann::json;

const std::string kModel =
    "train --layers 4 --dim 32 --heads 2 --seq 16 --vocab 256 --data synthetic --batch 12 "
    "--lr 3e-3 --eval-every 0 --eval-batches 2 --sample-tokens 0 --peak-gflops 100 --threads 1 ";

TrainRun train(const std::string& extra, int steps = 20) {
  return train_run(kModel + "--steps " + std::to_string(steps) + " " + extra, "pp");
}

// `layout` trains `steps` steps as `ref` does on one process: the same losses (1e-5), gradient
// norms (1e-4: each view counted once over the stages and tp ranks, it drives the clipping)
// and eval loss, with each stage's bubble and activations in the records.
void expect_matches(const TrainRun& ref, const std::string& layout, int steps) {
  const TrainRun r = train(layout, steps);
  ASSERT_EQ(r.cli.status, 0) << layout << ": " << r.cli.err;
  ASSERT_EQ(r.losses.size(), ref.losses.size()) << layout;
  EXPECT_LE(max_abs_diff(ref.losses, r.losses), 1e-5) << layout;
  ASSERT_EQ(r.records.size(), ref.records.size()) << layout;
  for (size_t i = 0; i < r.records.size(); ++i) {
    if (ref.records[i].contains("grad_norm")) {
      EXPECT_NEAR(r.records[i]["grad_norm"].get<double>(),
                  ref.records[i]["grad_norm"].get<double>(), 1e-4)
          << layout << " record " << i;
    }
  }
  EXPECT_NEAR(r.summary["eval_loss"].get<double>(), ref.summary["eval_loss"].get<double>(), 1e-5)
      << layout;
  const json& pp = r.summary["pipeline"];
  EXPECT_GT(pp["bubble_formula"].get<double>(), 0) << layout;
  EXPECT_EQ(r.records.back()["pp_bubble"].size(), pp["pp"].get<size_t>()) << layout;
  for (const json& st : pp["stages"]) EXPECT_GT(st["activation_bytes"].get<int64_t>(), 0);
}

TEST(TrainPipeline, StagesAsProcessesMatchOneProcess) {
  const TrainRun ref = train("--micro-batch 3");  // the stages' micro-batch b, so the same sums
  ASSERT_EQ(ref.cli.status, 0) << ref.cli.err;
  for (const char* layout :
       {"--nproc 2 --pp 2 --schedule 1f1b --micro-batches 4",
        "--nproc 3 --pp 3 --schedule gpipe --micro-batches 4",
        "--nproc 2 --pp 2 --schedule zb --micro-batches 4",
        "--nproc 2 --pp 2 --schedule interleaved --virtual-stages 2 --micro-batches 4",
        "--nproc 4 --pp 2 --dp 2 --micro-batches 2 --pp-split 3,1 --zero 1"})
    expect_matches(ref, layout, 20);
}

// Pipeline x tensor parallel (4 ranks): the tp passes on each stage, with sequence
// parallelism (only the 1/T row slice crosses stages) and without it, interleaved,
// zero-bubble (the tp split backward), and with dp 2 and ZeRO 1 (8 ranks), give one
// process's losses.
TEST(TrainPipeline, TensorParallelStagesMatchOneProcess) {
  const int steps = 12;
  const TrainRun ref = train("--micro-batch 3", steps);
  ASSERT_EQ(ref.cli.status, 0) << ref.cli.err;
  for (const char* layout :
       {"--nproc 4 --pp 2 --tp 2 --schedule 1f1b --micro-batches 4",
        "--nproc 4 --pp 2 --tp 2 --schedule gpipe --micro-batches 4 --no-sp",
        "--nproc 4 --pp 2 --tp 2 --schedule 1f1b --micro-batches 4 --no-sp",
        "--nproc 4 --pp 2 --tp 2 --schedule gpipe --micro-batches 4",
        "--nproc 4 --pp 2 --tp 2 --schedule interleaved --virtual-stages 2 --micro-batches 4",
        "--nproc 4 --pp 2 --tp 2 --schedule zb --micro-batches 4",
        "--nproc 8 --pp 2 --tp 2 --dp 2 --micro-batches 2 --zero 1"})
    expect_matches(ref, layout, steps);
}

// Three and four stages of tp 2 (6 and 8 processes, oversubscribed): every schedule, with
// and without sequence parallelism, and zero-bubble with dp 2, over 20 steps; interleaved
// (V = 2) on 6- and 8-layer models against their own one-process runs.
TEST(TrainPipeline, TensorParallelAtThreeAndFourStagesMatchOneProcess) {
  const TrainRun ref = train("--micro-batch 3");
  ASSERT_EQ(ref.cli.status, 0) << ref.cli.err;
  for (const char* layout :
       {"--nproc 6 --pp 3 --tp 2 --schedule 1f1b --micro-batches 4",
        "--nproc 6 --pp 3 --tp 2 --schedule gpipe --micro-batches 4 --no-sp",
        "--nproc 6 --pp 3 --tp 2 --schedule zb --micro-batches 4",
        "--nproc 6 --pp 3 --tp 2 --schedule zb --micro-batches 4 --no-sp",
        "--nproc 8 --pp 4 --tp 2 --schedule 1f1b --micro-batches 4 --no-sp",
        "--nproc 8 --pp 4 --tp 2 --schedule gpipe --micro-batches 4",
        "--nproc 8 --pp 4 --tp 2 --schedule zb --micro-batches 4",
        "--nproc 8 --pp 2 --tp 2 --dp 2 --schedule zb --micro-batches 2 --zero 1"})
    expect_matches(ref, layout, 20);
  const TrainRun ref6 = train("--layers 6 --micro-batch 2");
  ASSERT_EQ(ref6.cli.status, 0) << ref6.cli.err;
  expect_matches(ref6,
                 "--layers 6 --nproc 6 --pp 3 --tp 2 --schedule interleaved --virtual-stages 2 "
                 "--micro-batches 6",
                 20);
  const TrainRun ref8 = train("--layers 8 --micro-batch 3");
  ASSERT_EQ(ref8.cli.status, 0) << ref8.cli.err;
  expect_matches(ref8,
                 "--layers 8 --nproc 8 --pp 4 --tp 2 --schedule interleaved --virtual-stages 2 "
                 "--micro-batches 4 --no-sp",
                 20);
}

// Pipeline x context parallel (4 ranks): each stage's cp ranks hold their chunks of every
// micro-batch, ring and Ulysses, zigzag and contiguous, 1F1B, GPipe and zero-bubble; with tp 2
// and with dp 2 under ZeRO 1 (8 ranks: the dense gradients and optimizer shards span dp x cp). One process's losses; the
// attention bytes rank 0 sends equal the formula for its stage's layers.
TEST(TrainPipeline, ContextParallelStagesMatchOneProcess) {
  const TrainRun ref = train("--micro-batch 3");
  ASSERT_EQ(ref.cli.status, 0) << ref.cli.err;
  for (const char* layout :
       {"--nproc 4 --pp 2 --cp 2 --schedule 1f1b --micro-batches 4",
        "--nproc 4 --pp 2 --cp 2 --schedule gpipe --micro-batches 4 --cp-mode ulysses",
        "--nproc 4 --pp 2 --cp 2 --schedule 1f1b --micro-batches 4 --cp-mode ulysses "
        "--cp-chunks contiguous",
        "--nproc 4 --pp 2 --cp 2 --schedule zb --micro-batches 4",
        "--nproc 4 --pp 2 --cp 2 --schedule interleaved --virtual-stages 2 --micro-batches 4 "
        "--cp-mode ulysses",
        "--nproc 8 --pp 2 --cp 2 --tp 2 --schedule 1f1b --micro-batches 4",
        "--nproc 8 --pp 2 --cp 2 --dp 2 --micro-batches 2 --zero 1"})
    expect_matches(ref, layout, 20);
  const TrainRun r = train("--nproc 4 --pp 2 --cp 2 --schedule gpipe --micro-batches 4", 2);
  ASSERT_EQ(r.cli.status, 0) << r.cli.err;
  EXPECT_EQ(r.summary["pipeline"]["cp"].get<int>(), 2);
  EXPECT_EQ(r.summary["context_parallel"]["attention_ms_per_rank"].size(), 2u) << r.summary;
  EXPECT_EQ(r.summary["context_parallel"]["group"], "cp(pp=0,dp=0,tp=0)") << r.summary;
  for (const json& rec : r.records)
    if (rec.contains("cp_bytes")) {
      EXPECT_GT(rec["cp_bytes"].get<int64_t>(), 0);
      EXPECT_EQ(rec["cp_bytes"].get<int64_t>(), rec["cp_bytes_formula"].get<int64_t>());
    }
}

// bf16 matmuls on fp32 weights: close to fp32 (the data-parallel bf16 test's bound).
TEST(TrainPipeline, Bf16StaysCloseToFp32) {
  const TrainRun ref = train("--micro-batch 3");
  for (const std::string& layout : {std::string("--nproc 2 --pp 2 --micro-batches 4"),
                                    std::string("--nproc 4 --pp 2 --tp 2 --micro-batches 4"),
                                    std::string("--nproc 4 --pp 2 --cp 2 --micro-batches 4")}) {
    const TrainRun r = train(layout + " --precision bf16");
    ASSERT_EQ(r.cli.status, 0) << layout << ": " << r.cli.err;
    EXPECT_LE(max_abs_diff(ref.losses, r.losses), 1e-2) << layout;
  }
}

// --reduce-dtype bf16 under --pp: the stages' gradients are summed over dp in bf16 (ZeRO 0-3:
// the stage engine is the data-parallel engine), so the losses stay within bf16's reach of one process and differ from the fp32
// reduction, which equals one process (1e-5).
TEST(TrainPipeline, Bf16ReductionIsHonouredAtEveryZeroStage) {
  const TrainRun ref = train("--micro-batch 3", 8);
  ASSERT_EQ(ref.cli.status, 0) << ref.cli.err;
  for (const char* zero : {"0", "1", "2", "3"}) {
    const std::string layout = std::string("--nproc 4 --pp 2 --dp 2 --micro-batches 2 --zero ") + zero;
    const TrainRun fp32 = train(layout + " --reduce-dtype fp32", 8);
    const TrainRun bf16 = train(layout + " --reduce-dtype bf16", 8);
    ASSERT_EQ(fp32.cli.status, 0) << fp32.cli.err;
    ASSERT_EQ(bf16.cli.status, 0) << bf16.cli.err;
    EXPECT_LE(max_abs_diff(ref.losses, fp32.losses), 1e-5) << layout;
    EXPECT_LE(max_abs_diff(ref.losses, bf16.losses), 1e-2) << layout;
    EXPECT_GT(max_abs_diff(fp32.losses, bf16.losses), 1e-6) << layout << ": bf16 reduction changed nothing";
  }
}

// A checkpoint saved at step `steps` / 2 by `layout` (on `ranks` ranks) resumes under each of
// An epoch that ends mid-batch (--tail uneven): the short last global batch leaves some
// micro-batches of a stage, and all of one dp rank's, with fewer or no sequences; the stages
// still run every micro-batch's schedule and give one process's losses.
TEST(TrainPipeline, UnevenEpochTailMatchesOneProcess) {
  TempDir dir("pptail");
  write_small_text(dir.file("small.txt"), 2024);
  const std::string base = "train --layers 4 --dim 32 --heads 2 --seq 16 --max-seq 16 --data " +
                           dir.file("small.txt") +
                           " --batch 12 --steps 10 --lr 3e-3 --eval-every 0 --eval-batches 1 "
                           "--sample-tokens 0 --peak-gflops 100 --threads 1 --json --tail uneven ";
  std::vector<std::vector<double>> curves;
  for (const char* layout : {"--micro-batch 3", "--nproc 2 --pp 2 --micro-batches 4",
                             "--nproc 4 --pp 2 --dp 2 --micro-batches 2"}) {
    const RunResult r = run_strata(base + layout, "", Streams::separate);
    ASSERT_EQ(r.status, 0) << layout << ": " << r.err;
    const auto [losses, fewest_tokens] = losses_and_fewest_tokens(r.out);
    ASSERT_EQ(losses.size(), 10u) << layout << ": " << r.out;
    EXPECT_LT(fewest_tokens, 12 * 16) << layout << ": no step met the epoch's incomplete tail";
    curves.push_back(losses);
  }
  EXPECT_LE(max_abs_diff(curves[0], curves[1]), 1e-5);
  EXPECT_LE(max_abs_diff(curves[0], curves[2]), 1e-5);
}

// `targets` and continues the saving run's losses (the stages' pieces carry their global
// names and boxes).
void expect_resumes(const std::string& tag, const std::string& layout, int ranks, int steps,
                    const std::vector<std::string>& targets) {
  TempDir dir(tag);
  const std::string save = dir.file("save");
  const int half = steps / 2;
  const RunResult ref = run_strata(kModel + "--steps " + std::to_string(steps) + " --ckpt-every " +
                                       std::to_string(half) + " --ckpt-keep 0 --run-dir " + save +
                                       " " + layout,
                                   "", Streams::separate);
  ASSERT_EQ(ref.status, 0) << ref.err;
  std::vector<double> want;
  for (const json& rec : json_lines(read_file(save + "/metrics.jsonl")))
    if (rec.contains("loss")) want.push_back(rec["loss"].get<double>());
  ASSERT_EQ(want.size(), size_t(steps));
  char ckpt[32];
  std::snprintf(ckpt, sizeof ckpt, "/ckpt/step-%06d ", half);
  int n = 0;
  for (const std::string& to : targets) {
    const std::string run = dir.file("to" + std::to_string(n++));
    const RunResult r = run_strata(kModel + "--steps " + std::to_string(steps) + " --run-dir " +
                                       run + " --resume " + save + ckpt + to,
                                   "", Streams::separate);
    ASSERT_EQ(r.status, 0) << to << ": " << r.err;
    EXPECT_NE(r.err.find("resharded from " + std::to_string(ranks) + " rank(s)"),
              std::string::npos)
        << r.err;
    std::vector<double> got;
    for (const json& rec : json_lines(read_file(run + "/metrics.jsonl")))
      if (rec.contains("loss")) got.push_back(rec["loss"].get<double>());
    ASSERT_EQ(got.size(), size_t(steps - half)) << to;
    for (size_t i = 0; i < got.size(); ++i)
      EXPECT_NEAR(got[i], want[size_t(half) + i], 1e-5) << to << " step " << half + 1 + int(i);
  }
}

TEST(TrainPipeline, CheckpointsReshardAcrossPipelineLayouts) {
  expect_resumes("ppck", "--nproc 2 --pp 2 --micro-batches 4", 2, 20,
                 {"--micro-batch 3", "--nproc 4 --pp 4 --micro-batches 4",
                  "--nproc 4 --pp 2 --dp 2 --micro-batches 2 --zero 1"});
}

// Saved by two stages of cp 2 (their pieces written once over the cp replicas), resumed on
// one process and at pp 2 x cp 2 x dp 2 (Ulysses, ZeRO 1 shards over dp x cp).
TEST(TrainPipeline, ContextParallelCheckpointReshards) {
  expect_resumes("ppcpck", "--nproc 4 --pp 2 --cp 2 --micro-batches 4", 4, 12,
                 {"--micro-batch 3",
                  "--nproc 8 --pp 2 --cp 2 --dp 2 --cp-mode ulysses --micro-batches 2 --zero 1"});
}

TEST(TrainPipeline, TensorParallelCheckpointReshards) {
  expect_resumes("pptpck", "--nproc 4 --pp 2 --tp 2 --micro-batches 4", 4, 12,
                 {"--micro-batch 3", "--nproc 4 --pp 4 --micro-batches 4",
                  "--nproc 4 --dp 4 --micro-batch 3"});
  // Three zero-bubble stages of tp 2 saved, resumed on one process and at pp 2 x tp 2.
  expect_resumes("pp3tpck", "--nproc 6 --pp 3 --tp 2 --schedule zb --micro-batches 4", 6, 12,
                 {"--micro-batch 3", "--nproc 4 --pp 2 --tp 2 --schedule zb --micro-batches 4"});
}

// MoE stages with expert parallelism saved (each rank its experts' pieces), resumed on one
// process, at ep 2 without a pipeline and at pp 2 without expert parallelism.
TEST(TrainPipeline, MixtureOfExpertsCheckpointReshards) {
  const std::string moe = "--experts 4 --top-k 2 --capacity-factor 0.5 --micro-batch 1 ";
  expect_resumes("ppmoeck", moe + "--nproc 4 --pp 2 --dp 2 --ep 2", 4, 8,
                 {moe, moe + "--nproc 2 --ep 2", moe + "--nproc 2 --pp 2 --schedule zb"});
}

// A stage that hangs: its peer times out in a stage-to-stage receive, and the hang doctor
// names the pipeline group, the ranks and their stages.
TEST(TrainPipeline, HungStageIsNamedByTheDoctor) {
  TempDir dir("pphang");
  const RunResult r = run_strata(kModel + "--steps 6 --run-dir " + dir.str() +
                                     " --nproc 2 --pp 2 --micro-batches 4 --inject hang "
                                     "--inject-rank 1 --inject-step 3 --timeout 3",
                                 "", Streams::separate);
  EXPECT_NE(r.status, 0);
  const RunResult d = run_strata("doctor hang " + dir.str(), "", Streams::separate);
  EXPECT_NE(d.out.find("of group \"pp(dp=0,tp=0)"), std::string::npos) << d.out << d.err;
  EXPECT_NE(d.out.find("(pipeline stages 0 and 1)"), std::string::npos) << d.out;
  EXPECT_NE(d.out.find("never reached it: rank 1"), std::string::npos) << d.out;
}

// A stage that dies: the launcher names the rank with its stage, restarts the job from the
// latest checkpoint, and the run ends with the losses of one that never failed.
TEST(TrainPipeline, DeadStageIsNamedAndTheRestartContinuesTheRun) {
  TempDir dir("ppkill");
  const std::string layout = "--nproc 4 --pp 2 --dp 2 --micro-batches 2 --ckpt-every 2 ";
  const RunResult ref = run_strata(kModel + "--steps 8 --run-dir " + dir.file("ref") + " " + layout,
                                   "", Streams::separate);
  ASSERT_EQ(ref.status, 0) << ref.err;
  const RunResult r = run_strata(kModel + "--steps 8 --run-dir " + dir.file("kill") + " " + layout +
                                     "--inject kill --inject-rank 3 --inject-step 5 --max-restarts 1",
                                 "", Streams::separate);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.err.find("restart 1/1 after rank 3 (pipeline stage 1, dp 1) was killed by signal 9"),
            std::string::npos)
      << r.err;
  auto final_losses = [](const std::string& metrics) {
    std::vector<double> out;  // the last record of each step (a restart repeats some)
    for (const json& rec : json_lines(read_file(metrics)))
      if (rec.contains("loss")) {
        const size_t step = rec["step"].get<size_t>();
        if (out.size() < step) out.resize(step);
        out[step - 1] = rec["loss"].get<double>();
      }
    return out;
  };
  const std::vector<double> want = final_losses(dir.file("ref") + "/metrics.jsonl");
  const std::vector<double> got = final_losses(dir.file("kill") + "/metrics.jsonl");
  ASSERT_EQ(want.size(), 8u);
  ASSERT_EQ(got.size(), 8u);
  for (size_t i = 0; i < 8; ++i) EXPECT_EQ(got[i], want[i]) << "step " << i + 1;
}

// --trace: each stage's F/B per micro-batch as spans on a track named by its stage, in the
// schedule's order (1F1B, pp 2, M 4: stage 0 warms up with two forwards).
TEST(TrainPipeline, TraceShowsEachStagesSchedule) {
  TempDir dir("pptrace");
  const RunResult r = run_strata(kModel + "--steps 2 --nproc 2 --pp 2 --micro-batches 4 --trace "
                                          "--run-dir " + dir.str(), "", Streams::separate);
  ASSERT_EQ(r.status, 0) << r.err;
  for (int s = 0; s < 2; ++s) {
    const json t = json::parse(read_file(dir.file("trace-rank" + std::to_string(s) + ".json")));
    std::vector<std::string> spans;
    bool named = false;
    for (const json& e : t["traceEvents"]) {
      if (e.value("cat", "") == "pipeline" && spans.size() < 8) spans.push_back(e["name"]);
      if (e.value("ph", "") == "M" && e["args"].value("name", "") == "compute (pp stage " + std::to_string(s) + ")")
        named = true;
    }
    EXPECT_TRUE(named) << "stage " << s;
    const std::vector<std::string> want =
        s == 0 ? std::vector<std::string>{"F0", "F1", "B0", "F2", "B1", "F3", "B2", "B3"}
               : std::vector<std::string>{"F0", "B0", "F1", "B1", "F2", "B2", "F3", "B3"};
    EXPECT_EQ(spans, want) << "stage " << s;
  }
}

TEST(TrainPipeline, ScheduleCommandDrawsAndRefuses) {
  const RunResult ok = run_strata("pp schedule --pp 2 --micro-batches 2 --schedule 1f1b", "",
                                  Streams::separate);
  ASSERT_EQ(ok.status, 0) << ok.err;
  EXPECT_NE(ok.out.find("stage 1 |.  F0 B0--- F1 B1---"), std::string::npos) << ok.out;
  EXPECT_NE(ok.out.find("vs formula 0.333"), std::string::npos) << ok.out;
  const RunResult bad = run_strata(
      "pp schedule --pp 4 --micro-batches 2 --schedule interleaved --virtual-stages 2", "",
      Streams::separate);
  EXPECT_NE(bad.status, 0);
  EXPECT_NE(bad.err.find("--micro-batches >= --pp: 2 < 4"), std::string::npos) << bad.err;
}

TEST(TrainPipeline, BadLayoutsAreRefusedBeforeTraining) {
  const std::pair<std::string, std::string> cases[] = {
      {"--nproc 5 --pp 5", "--pp 5 stages but the model has only 4 layers"},
      {"--nproc 2 --pp 2 --pp-split 1,2", "--pp-split sums to 3 layers but the model has 4"},
      {"--nproc 2 --pp 2 --pp-split 1,2,1", "--pp-split has 3 sizes but there are 2"},
      {"--nproc 2 --pp 2 --schedule interleaved --virtual-stages 3 --micro-batches 4",
       "--virtual-stages 3 x --pp 2 = 6 chunks do not divide the 4 layers"},
      {"--nproc 4 --pp 4 --layers 8 --schedule interleaved --virtual-stages 2 --micro-batches 2",
       "--micro-batches >= --pp: 2 < 4"},
      {"--nproc 2 --pp 2 --schedule zb --zero 3", "--schedule zb with --zero 3"},
      {"--nproc 2 --pp 2 --schedule zb --zero 2", "--schedule zb with --zero 2: zero-bubble defers up to"},
      {"--nproc 2 --pp 2 --schedule pipedream", "--schedule pipedream is not a schedule"},
      {"--nproc 2 --pp 2 --micro-batches 5", "--batch 12 does not split into --micro-batches 5"},
      {"--nproc 4 --pp 2 --cp 2 --seq 18", "--seq 18 must be divisible by 2 x --cp = 4"},
      {"--nproc 2 --pp 2 --micro-batches 4 --micro-batch 2",
       "--micro-batch 2 and --micro-batches 4 disagree: --batch 12 over 1 data-parallel rank(s) in 4 "
       "micro-batches is --micro-batch 3"},
  };
  for (const auto& [flags, want] : cases) {
    const TrainRun r = train(flags, 2);
    EXPECT_NE(r.cli.status, 0) << flags;
    EXPECT_NE(r.cli.err.find(want), std::string::npos) << flags << ": " << r.cli.err;
    EXPECT_EQ(std::count(r.cli.err.begin(), r.cli.err.end(), '\n'), 1) << flags << ": " << r.cli.err;
  }
  // Both given and consistent: the run goes ahead.
  const TrainRun both = train("--nproc 2 --pp 2 --micro-batches 4 --micro-batch 3", 2);
  EXPECT_EQ(both.cli.status, 0) << both.cli.err;
}

}  // namespace
}  // namespace strata::test::test_pipeline_train

namespace strata::test::test_pipeline_train {
namespace {

// Every schedule through the paths besides the training step: eval during training
// (--eval-every) and at the end, sampling (--sample-every), and a checkpoint resumed to
// finish the run. The interleaved final eval once deadlocked (each stage blocked in a send
// to the other), so each run is bounded by --timeout and must end with its summary. The
// deadlock was in the order of the messages (micro-batches, chunks, activation slots), not
// their size: a 4-layer model of width 32 on 16 tokens has the order of `tiny`'s.
TEST(TrainPipeline, EverySchedulePassesEvalSamplingAndResume) {
  const std::string base =
      "train --layers 4 --dim 32 --heads 2 --seq 16 --vocab 256 --seed 17 --batch 8 --nproc 2 --pp 2 "
      "--micro-batches 4 --data synthetic "
      "--eval-every 2 --sample-every 2 --sample-tokens 4 --ckpt-every 2 "
      "--threads 1 --timeout 30 --peak-gflops 100 ";
  for (const char* sched : {"interleaved --virtual-stages 2", "gpipe", "1f1b", "zb"}) {
    TempDir dir("ppaths");
    const std::string args = base + "--schedule " + sched + " --run-dir " + dir.str();
    const RunResult first = run_strata(args + " --steps 2", "", Streams::separate);
    ASSERT_EQ(first.status, 0) << sched << ": " << first.err;
    const RunResult rest = run_strata(args + " --steps 4 --resume auto", "", Streams::separate);
    ASSERT_EQ(rest.status, 0) << sched << ": " << rest.err;
    EXPECT_NE(rest.out.find("step     3/4"), std::string::npos) << sched << ": " << rest.out;
    EXPECT_EQ(rest.out.find("step     1/4"), std::string::npos) << sched << ": resumed at step 2";
    const nlohmann::json summary = nlohmann::json::parse(read_file(dir.file("summary.json")));
    EXPECT_TRUE(std::isfinite(summary["eval_loss"].get<double>())) << sched;
    int evals = 0;
    for (const nlohmann::json& rec : json_lines(read_file(dir.file("metrics.jsonl"))))
      if (rec.contains("eval_loss")) ++evals;
    EXPECT_GE(evals, 2) << sched << ": the eval at step 2 and the final one";
  }
}

}  // namespace
}  // namespace strata::test::test_pipeline_train
