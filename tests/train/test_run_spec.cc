// The run specification (train/run_spec.h): every layout the engine cannot run is refused by
// RunSpec::validate() before any rank starts, in one line naming the flags as typed and their
// numbers; layouts that run are let through; the resume line names every layout difference
// between a checkpoint and the run resuming it.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>

#include "cli_util.h"
#include "core/error.h"
#include "train/run_spec.h"

namespace strata::test::test_run_spec {
namespace {

namespace fs = std::filesystem;

// ---- validate() without processes ----

// A small run on `nproc` ranks: 2 layers of width 64, 4 heads, seq 32, batch 8.
train::RunSpec small_spec(int nproc) {
  train::RunSpec s;
  s.train.model = model::GPTConfig::preset("tiny");
  s.train.model.layers = 2, s.train.model.dim = 64, s.train.model.heads = 4;
  s.train.seq = 32;
  s.train.batch = 8;
  s.train.schedule.steps = 4;
  s.parallel.nproc = nproc;
  return s;
}

// The message validate() throws, or "" when it accepts the spec.
std::string refusal(const train::RunSpec& s) {
  try {
    s.validate();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(RunSpec, LayoutsThatRunAreAccepted) {
  EXPECT_EQ(refusal(small_spec(1)), "");
  train::RunSpec pp_zero = small_spec(2);  // --pp with ZeRO 2 and 3 runs
  pp_zero.parallel.mesh.pp = 2;
  for (int stage : {0, 1, 2, 3}) {
    pp_zero.parallel.dp.stage = stage;
    EXPECT_EQ(refusal(pp_zero), "") << "zero " << stage;
  }
  train::RunSpec pp_bf16 = small_spec(2);  // --pp with --reduce-dtype bf16 runs
  pp_bf16.parallel.mesh.pp = 2;
  pp_bf16.parallel.dp.reduce_precision = parallel::Precision::bf16;
  EXPECT_EQ(refusal(pp_bf16), "");
  train::RunSpec zb = small_spec(2);  // zero-bubble with ZeRO 0 and 1
  zb.parallel.mesh.pp = 2;
  zb.parallel.pipeline.schedule = parallel::pipeline::ScheduleKind::zb;
  zb.parallel.dp.stage = 1;
  EXPECT_EQ(refusal(zb), "");
  train::RunSpec all = small_spec(8);  // tp 2 x cp 2 x dp 2
  all.parallel.mesh.tp = 2, all.parallel.mesh.cp = 2;
  EXPECT_EQ(refusal(all), "");
  EXPECT_EQ(all.layout().dp, 2);
  EXPECT_EQ(all.layout().micro_batch, 4);  // --batch 8 / dp 2
}

TEST(RunSpec, RefusalsNameTheFlagsAndTheNumbers) {
  // The local sequence after cp, named through the flags that made it.
  train::RunSpec sp = small_spec(6);
  sp.train.model.heads = 6, sp.train.model.dim = 48;
  sp.parallel.mesh.cp = 2, sp.parallel.mesh.tp = 3;
  const std::string m = refusal(sp);
  EXPECT_NE(m.find("--seq 32 / --cp 2 = 16 tokens per cp rank is not divisible by 3"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("--tp 3"), std::string::npos) << m;
  sp.parallel.sequence_parallel = false;  // --no-sp: the same layout runs
  EXPECT_EQ(refusal(sp), "");

  train::RunSpec zb = small_spec(2);
  zb.parallel.mesh.pp = 2;
  zb.parallel.pipeline.schedule = parallel::pipeline::ScheduleKind::zb;
  zb.parallel.dp.stage = 2;
  EXPECT_NE(refusal(zb).find("--schedule zb with --zero 2: zero-bubble defers up to"),
            std::string::npos)
      << refusal(zb);

  // Interleaved over the accumulation count the batch split gives: named through --batch.
  train::RunSpec il = small_spec(2);
  il.parallel.mesh.pp = 2;
  il.parallel.pipeline.schedule = parallel::pipeline::ScheduleKind::interleaved;
  il.train.micro_batch = 8;
  const std::string i = refusal(il);
  EXPECT_NE(i.find("--micro-batches >= --pp: 1 < 2"), std::string::npos) << i;
  EXPECT_NE(i.find("--batch 8 / (1 data-parallel rank(s) x micro-batch 8)"), std::string::npos)
      << i;

  // A flag the layout would ignore: refused rather than dropped.
  train::RunSpec ignored = small_spec(1);
  ignored.given.schedule = true;
  ignored.parallel.pipeline.schedule = parallel::pipeline::ScheduleKind::zb;
  EXPECT_NE(refusal(ignored).find("--schedule zb needs --pp 2 or more (got --pp 1)"),
            std::string::npos)
      << refusal(ignored);

  // MoE stages with expert parallelism run (docs/moe.md); experts the ep group cannot split
  // are refused with a pipeline as without one.
  train::RunSpec ep = small_spec(4);
  ep.parallel.mesh.pp = 2, ep.parallel.mesh.ep = 2;
  ep.train.model.moe.experts = 2;
  EXPECT_EQ(refusal(ep), "");
  ep.train.model.moe.experts = 3;
  EXPECT_NE(refusal(ep).find("--experts 3 is not divisible by --ep 2"), std::string::npos)
      << refusal(ep);
}

// `strata plan --local` runs the same check on the same layout type.
TEST(RunSpec, PlanLocalSharesTheLayoutCheck) {
  model::GPTConfig g = model::GPTConfig::preset("tiny");
  parallel::ParallelLayout l;
  l.tp = 3;
  EXPECT_THROW(train::check_layout(g, 32, 8, l), Error);  // 4 heads
  l.tp = 2, l.ep = 2, l.dp = 2;
  try {
    train::check_layout(g, 32, 8, l);
    ADD_FAILURE() << "ep 2 without experts accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--ep 2 needs --experts"), std::string::npos) << e.what();
  }
  g.moe.experts = 4;
  EXPECT_NO_THROW(train::check_layout(g, 32, 8, l));
}

// ---- `strata train` with bad layouts ----

const std::string kSmall =
    "train --layers 2 --dim 64 --heads 4 --seq 32 --batch 8 --steps 2 --peak-gflops 10 "
    "--sample-tokens 0 --data synthetic:20000 --threads 1 ";

TEST(RunSpec, BadLayoutsAreRefusedBeforeAnyRankStarts) {
  struct Case {
    std::string flags;
    std::vector<std::string> needles;
  };
  const std::vector<Case> cases = {
      // Refused for the heads first (4 heads over 3 tp ranks) ...
      {"--nproc 6 --cp 2 --tp 3 --seq 32", {"--tp 3", "4 attention heads"}},
      // ... and with 6 heads for the tokens per rank.
      {"--nproc 6 --cp 2 --tp 3 --seq 32 --heads 6 --dim 48",
       {"--tp 3", "--seq 32 / --cp 2 = 16 tokens per cp rank", "not divisible by 3",
        "sequence parallelism"}},
      {"--nproc 4 --tp 3", {"--tp 3", "world of 4"}},
      {"--nproc 4 --tp 2 --dp 3", {"--tp 2 x --dp 3 = 6 ranks", "4"}},
      {"--nproc 2 --cp 2 --seq 30", {"--seq 30", "2 x --cp = 4"}},
      {"--nproc 3 --cp 3 --cp-mode ulysses --seq 48", {"--cp-mode ulysses", "--cp 3", "(4)"}},
      {"--nproc 2 --ep 2", {"--ep 2 needs --experts"}},
      {"--nproc 2 --ep 2 --experts 3", {"--experts 3 is not divisible by --ep 2"}},
      {"--nproc 3 --ep 2 --experts 4", {"--ep 2", "3 data-parallel x context-parallel ranks"}},
      {"--nproc 2 --batch 3", {"--batch 3", "2 data-parallel ranks"}},
      {"--nproc 3 --pp 3", {"--pp 3 stages but the model has only 2 layers"}},
      {"--nproc 2 --pp 2 --virtual-stages 2", {"--virtual-stages 2", "--pp 2", "2 layers"}},
      {"--nproc 2 --pp 2 --schedule zb --zero 2",
       {"--schedule zb with --zero 2", "zero-bubble defers up to", "weight passes"}},
      {"--nproc 2 --pp 2 --schedule zb --zero 3", {"--schedule zb with --zero 3"}},
      {"--nproc 2 --pp 2 --schedule interleaved --micro-batch 8",
       {"--schedule interleaved", "1 < 2", "--batch 8", "micro-batch 8"}},
      {"--nproc 2 --pp 2 --micro-batches 3", {"--batch 8", "--micro-batches 3"}},
      {"--nproc 4 --pp 2 --ep 2 --experts 3", {"--experts 3 is not divisible by --ep 2"}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.flags);
    TempDir dir("run_spec_bad");
    const std::string run = dir.file("run");
    const auto t0 = std::chrono::steady_clock::now();
    const RunResult r =
        run_strata(kSmall + c.flags + " --run-dir " + run, "", Streams::separate, 60);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_GT(r.status, 0) << r.err;
    EXPECT_EQ(r.err.rfind("strata: error: ", 0), 0u) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    for (const std::string& n : c.needles)
      EXPECT_NE(r.err.find(n), std::string::npos) << n << ": " << r.err;
    // Before any rank: nothing started, not even the run dir (its lock, its config.toml).
    EXPECT_FALSE(fs::exists(run)) << r.err;
    EXPECT_EQ(r.out, "");
    EXPECT_LT(seconds, 20) << r.err;
  }
}

// ---- the resume line ----

std::vector<double> losses(const std::string& run) {
  std::vector<double> out;
  for (const nlohmann::json& j : step_records(run + "/metrics.jsonl"))
    out.push_back(j["loss"].get<double>());
  return out;
}

// The "resuming from step" line of stderr.
std::string resume_line(const std::string& err) {
  const size_t at = err.find("resuming from step");
  if (at == std::string::npos) return "(no resume line)";
  return err.substr(at, err.find('\n', at) - at);
}

TEST(RunSpec, ResumeLineNamesEveryLayoutDifference) {
  TempDir dir("run_spec_resume");
  const std::string base = kSmall + "--ckpt-every 4 --timeout 60 ";
  const std::string from = dir.file("from");
  const RunResult first =
      run_strata(base + "--steps 4 --nproc 2 --zero 1 --run-dir " + from, "", Streams::separate);
  ASSERT_EQ(first.status, 0) << first.err;
  // dp 2 fp32 -> pp 2 (1f1b) bf16, ZeRO 1 in both.
  const std::string to = dir.file("to");
  const RunResult r = run_strata(
      base + "--steps 6 --ckpt-every 2 --nproc 2 --pp 2 --zero 1 --precision bf16 --run-dir " + to +
          " --resume " + from + "/ckpt/step-000004",
      "", Streams::separate);
  ASSERT_EQ(r.status, 0) << r.err;
  const std::string line = resume_line(r.err);
  EXPECT_NE(line.find("resuming from step 4"), std::string::npos) << line;
  EXPECT_NE(
      line.find("checkpoint written at dp 2 tp 1 pp 1 cp 1 ep 1 zero 1 fp32, this run is dp 1 pp 2 "
                "(1f1b) bf16: resharding"),
      std::string::npos)
      << line;
  // Training continues: steps 5 and 6, near the loss the checkpoint's run left.
  const std::vector<double> before = losses(from), after = losses(to);
  ASSERT_EQ(before.size(), 4u);
  ASSERT_EQ(after.size(), 2u) << r.err;
  for (double x : after) {
    EXPECT_TRUE(std::isfinite(x));
    EXPECT_LT(std::abs(x - before.back()), 0.5 * before.back()) << x << " vs " << before.back();
  }

  // A schedule change at the same depth is named with the schedule; a checkpoint written
  // before the schedule and the run's precision were recorded still loads, with their old
  // defaults.
  const std::string step = to + "/ckpt/step-000006";
  const RunResult zb =
      run_strata(base +
                     "--steps 8 --nproc 2 --pp 2 --zero 1 --precision bf16 --schedule zb "
                     "--run-dir " +
                     dir.file("zb") + " --resume " + step,
                 "", Streams::separate);
  ASSERT_EQ(zb.status, 0) << zb.err;
  EXPECT_NE(resume_line(zb.err).find(
                "pp 2 (1f1b) cp 1 ep 1 zero 1 bf16, this run is pp 2 (zb): resharding"),
            std::string::npos)
      << resume_line(zb.err);
  const std::string manifest = step + "/manifest.json";
  nlohmann::json m = nlohmann::json::parse(read_file(manifest));
  ASSERT_TRUE(m["train"].contains("schedule")) << m["train"].dump();
  for (const char* key : {"schedule", "virtual_stages", "run_precision"}) m["train"].erase(key);
  std::ofstream(manifest) << m.dump(1);
  const RunResult old =
      run_strata(base + "--steps 8 --nproc 2 --pp 2 --zero 1 --precision bf16 --run-dir " +
                     dir.file("old") + " --resume " + step,
                 "", Streams::separate);
  ASSERT_EQ(old.status, 0) << old.err;
  EXPECT_NE(resume_line(old.err).find("resuming from step 6"), std::string::npos) << old.err;
  // Read as 1f1b, one chunk per stage, and the states' precision (fp32 under --pp): only
  // the precision is named.
  EXPECT_NE(resume_line(old.err).find(
                "pp 2 (1f1b) cp 1 ep 1 zero 1 fp32, this run is bf16: converting the states"),
            std::string::npos)
      << resume_line(old.err);
}

}  // namespace
}  // namespace strata::test::test_run_spec
