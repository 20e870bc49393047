// `strata train --experts` with tensor parallelism end to end (docs/moe.md, "MoE x tensor
// parallelism"): tp 2 x dp 2 x ep 2 runs, counts the load once per tp group, reports the
// model states and tp bytes `strata plan --local` predicts, and its checkpoint (experts
// sliced over tp) resumes on other layouts: on tp 1 x dp 2 (the same groups of tokens) it
// continues the uninterrupted loss curve, and on one process it trains on. An epoch's tail
// that leaves a dp rank without tokens gives tp 1's losses.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "cli_util.h"

using namespace strata::test;
using nlohmann::json;

namespace {

const std::string kMoE =
    "train --layers 2 --dim 32 --heads 2 --seq 16 --max-seq 16 --batch 4 --peak-gflops 1000 "
    "--data synthetic:50000 --sample-tokens 0 --eval-batches 1 --experts 4 --top-k 2 "
    "--capacity-factor 0.5 ";

TEST(MoETensorParallelTrain, Tp2Ep2RunsAndResumesOnOtherLayouts) {
  TempDir dir("moe_tp_train");
  const std::string layout = "--nproc 4 --tp 2 --dp 2 --ep 2 ";
  RunResult full = run_strata(kMoE + layout + "--steps 4 --ckpt-every 2 --ckpt-keep 0 --run-dir " +
                                  dir.file("full"),
                              "", Streams::separate);
  ASSERT_EQ(full.status, 0) << full.err;
  const std::vector<json> curve = step_records(dir.file("full/metrics.jsonl"));
  ASSERT_EQ(curve.size(), 4u);
  for (const json& rec : curve) {
    EXPECT_NEAR(rec["loss"].get<double>(), rec["ce_loss"].get<double>() +
                                               rec["aux_loss"].get<double>() +
                                               rec["z_loss"].get<double>(),
                1e-9);
    int64_t wanted = 0, served = 0, processed = 0;
    for (const json& b : rec["moe"]) {
      for (int64_t n : b["wanted_per_expert"].get<std::vector<int64_t>>()) wanted += n;
      for (int64_t n : b["tokens_per_expert"].get<std::vector<int64_t>>()) served += n;
    }
    EXPECT_EQ(wanted, 2 * 2 * 4 * 16) << "2 blocks x K 2 x 64 tokens: counted once over tp";
    for (double n : rec["expert_rows_per_rank"].get<std::vector<double>>()) processed += int64_t(n);
    EXPECT_EQ(processed, 2 * served) << "each tp rank runs its slice on every served row";
  }
  const json s = json::parse(read_file(dir.file("full/summary.json")));
  for (const json& r : s.at("tensor_parallel").at("ranks")) {
    EXPECT_EQ(r["model_states"], r["model_states_plan"]) << r.dump();
    EXPECT_EQ(r["tp_bytes_per_step"], r["tp_bytes_per_step_plan"]) << r.dump();
  }
  RunResult plan = run_strata("plan --local --layers 2 --dim 32 --heads 2 --seq 16 --max-seq 16 "
                              "--experts 4 --top-k 2 --tp 2 --dp 2 --ep 2 --micro-batch 2 --json",
                              "", Streams::separate);
  ASSERT_EQ(plan.status, 0) << plan.err;
  const json p = json::parse(plan.out);
  for (const json& r : s.at("tensor_parallel").at("ranks")) {
    const json& want = p["ranks"][r["tp_rank"].get<int>()];
    EXPECT_EQ(r["model_states"], want["model_states"]) << r.dump();
    EXPECT_EQ(r["tp_bytes_per_step"], want["tp_bytes_per_step"]) << r.dump();
  }

  // Resume from step 2 of the same run: the uninterrupted curve's steps 3 and 4 to compare.
  std::filesystem::remove_all(dir.file("full/ckpt/step-000004"));
  std::ofstream(dir.file("full/ckpt/latest")) << "step-000002\n";
  for (const std::string& to : {std::string("--nproc 2 --dp 2"), std::string("--nproc 1")}) {
    const std::string run = dir.file(to == "--nproc 1" ? "one" : "dp2");
    std::filesystem::create_directories(run);
    std::filesystem::copy(dir.file("full/ckpt"), run + "/ckpt",
                          std::filesystem::copy_options::recursive);
    RunResult r = run_strata(kMoE + to + " --steps 4 --resume auto --run-dir " + run, "",
                             Streams::separate);
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_NE((r.out + r.err).find("resuming from step 2"), std::string::npos) << r.out << r.err;
    const std::vector<json> recs = step_records(run + "/metrics.jsonl");
    ASSERT_EQ(recs.size(), 2u);
    EXPECT_EQ(recs.front()["step"], 3);
    if (to == "--nproc 1") {  // one group of 4 sequences: other drops, other losses
      EXPECT_TRUE(std::isfinite(recs.back()["loss"].get<double>()));
      continue;
    }
    for (int i = 0; i < 2; ++i)  // the same groups: the uninterrupted curve
      EXPECT_NEAR(recs[i]["loss"].get<double>(), curve[i + 2]["loss"].get<double>(), 1e-5)
          << "step " << i + 3;
  }
}

}  // namespace

namespace {

// An epoch's last step with one sequence: one dp rank has no tokens (B = 0) and still takes
// part in the all-to-alls of its tp coordinate's ep group; the losses equal tp 1 (the same
// token groups), step by step.
TEST(MoETensorParallelTrain, UnevenTailWithAnEmptyRankMatchesTp1) {
  const std::string common =
      "train --layers 2 --dim 64 --heads 4 --max-seq 32 --seq 32 --batch 8 --steps 9 "
      "--peak-gflops 10 --sample-tokens 0 --eval-every 0 --data synthetic:2081 --tail uneven "
      "--json --experts 4 --top-k 2 --dropless --dp 2 --ep 2 ";
  RunResult a = run_strata(common + "--nproc 2", "OMP_NUM_THREADS=1 ", Streams::separate);
  RunResult b = run_strata(common + "--nproc 4 --tp 2", "OMP_NUM_THREADS=1 ", Streams::separate);
  ASSERT_EQ(a.status, 0) << a.err;
  ASSERT_EQ(b.status, 0) << b.err;
  const auto ra = loss_and_tokens(a.out), rb = loss_and_tokens(b.out);
  ASSERT_EQ(ra.size(), 9u);
  ASSERT_EQ(rb.size(), 9u);
  EXPECT_EQ(ra.back().second, 32) << "the last step has one sequence: a rank with B = 0";
  for (size_t i = 0; i < ra.size(); ++i) {
    EXPECT_EQ(ra[i].second, rb[i].second) << "step " << i + 1;
    EXPECT_NEAR(ra[i].first, rb[i].first, 1e-5) << "step " << i + 1;
  }
}

}  // namespace
