// `strata train --pp P`: the default split balances the layer types' measured costs (timed on
// rank 0, broadcast so every rank builds the same split), and the summary sets the planner's
// bubble for the run's layout beside the measured one and the schedule's formula.
#include <gtest/gtest.h>

#include <string>

#include "cli_util.h"
#include "train/pipeline_costs.h"

namespace strata::test::test_pipeline_costs {
namespace {

using nlohmann::json;

const std::string kArgs =
    "train --layers 4 --dim 32 --heads 2 --seq 16 --vocab 256 --data synthetic --batch 8 "
    "--steps 3 --eval-every 0 --eval-batches 1 --sample-tokens 0 --threads 1 --nproc 2 --pp 2 "
    "--micro-batches 4 ";

struct PpRun {
  RunResult cli;
  json summary;
  std::vector<json> records;  // the step records
};

PpRun train(const std::string& extra, const std::string& env = "") {
  TempDir dir("ppcost");
  PpRun r;
  r.cli = run_strata(kArgs + extra + " --run-dir " + dir.str(), env, Streams::separate);
  if (r.cli.status != 0) return r;
  r.summary = json::parse(read_file(dir.file("summary.json")));
  for (const json& rec : json_lines(read_file(dir.file("metrics.jsonl"))))
    if (rec.contains("pp_busy_ms")) r.records.push_back(rec);
  return r;
}

// Every stage's parameter count, as each rank counted its own stage.
std::vector<int64_t> stage_params(const json& pipeline) {
  std::vector<int64_t> out;
  for (const json& st : pipeline["stages"]) out.push_back(st["params"].get<int64_t>());
  return out;
}

TEST(TrainPipelineCosts, MeasuredSplitIsAgreedAndTheSummaryHasThreeBubbles) {
  const PpRun r = train("");
  ASSERT_EQ(r.cli.status, 0) << r.cli.err;
  const json& p = r.summary["pipeline"];
  EXPECT_EQ(p["split_from"], "measured costs");
  ASSERT_EQ(p["split"].size(), 2u);
  const int a = p["split"][0].get<int>(), b = p["split"][1].get<int>();
  EXPECT_EQ(a + b, 4);
  EXPECT_GE(a, 1);
  EXPECT_GE(b, 1);
  EXPECT_EQ(p["stages"][0]["layers"], "0-" + std::to_string(a - 1));
  const json& c = p["layer_costs"];
  EXPECT_EQ(c["unit"], "ms per micro-batch");
  EXPECT_GT(c["block"]["f"].get<double>(), 0);
  EXPECT_GT(c["block"]["b"].get<double>(), 0);
  EXPECT_GT(p["transfer_ms"].get<double>(), 0);
  for (const char* k : {"bubble_measured", "bubble_formula", "bubble_planned"}) {
    ASSERT_TRUE(p[k].is_number()) << k;
    EXPECT_GE(p[k].get<double>(), 0) << k;
    EXPECT_LT(p[k].get<double>(), 1) << k;
  }
  EXPECT_DOUBLE_EQ(p["bubble_formula"].get<double>(), 1.0 / 5);
  // Each stage's waits split at its peer's send: the two parts add up to the wait.
  ASSERT_EQ(r.records.size(), 3u);
  for (const json& rec : r.records)
    for (size_t s = 0; s < 2; ++s) {
      const double peer = rec["pp_peer_wait_ms"][s].get<double>(),
                   transfer = rec["pp_transfer_wait_ms"][s].get<double>();
      EXPECT_GE(peer, 0);
      EXPECT_GE(transfer, 0);
      EXPECT_NEAR(peer + transfer, rec["pp_recv_wait_ms"][s].get<double>(), 1e-6);
    }
  for (const json& rec : r.records) {
    EXPECT_GE(rec["pp_bubble_replayed"].get<double>(), 1.0 / 5 - 1e-9);
    EXPECT_LT(rec["pp_bubble_replayed"].get<double>(), 1);
  }
  EXPECT_GE(p["bubble_replayed"].get<double>(), 1.0 / 5 - 1e-9);
  EXPECT_GE(p["transfer_wait_share"].get<double>(), 0);
  EXPECT_LT(p["transfer_wait_share"].get<double>(), 1);
  // Unequal stages and a transfer only lengthen the schedule.
  EXPECT_GE(p["bubble_planned"].get<double>(), p["bubble_planned_no_transfer"].get<double>());
  EXPECT_GE(p["bubble_planned_no_transfer"].get<double>(), 1.0 / 5 - 1e-12);
  EXPECT_NE(r.cli.err.find("pipeline split " + std::to_string(a) + "," + std::to_string(b) + " (measured costs)"),
            std::string::npos)
      << r.cli.err;
  const std::string text = r.cli.out + r.cli.err;  // the summary line
  EXPECT_NE(text.find(" vs formula 0.200 vs planned "), std::string::npos) << text;
  // Rank 1 built the split rank 0 reports: its stage holds what --pp-split a,b gives it.
  const PpRun given = train("--pp-split " + std::to_string(a) + "," + std::to_string(b));
  ASSERT_EQ(given.cli.status, 0) << given.cli.err;
  EXPECT_EQ(given.summary["pipeline"]["split_from"], "--pp-split");
  EXPECT_EQ(stage_params(p), stage_params(given.summary["pipeline"]));
}

// STRATA_PP_COSTS=estimate: flop counts, no timing, no transfer; deterministic.
TEST(TrainPipelineCosts, EstimatedCostsAreDeterministic) {
  const PpRun r = train("", "STRATA_PP_COSTS=estimate ");
  ASSERT_EQ(r.cli.status, 0) << r.cli.err;
  const json& p = r.summary["pipeline"];
  EXPECT_EQ(p["split_from"], "estimated costs");
  EXPECT_EQ(p["split"], json::array({2, 2}));
  EXPECT_EQ(p["transfer_ms"].get<double>(), 0);
  EXPECT_EQ(p["layer_costs"]["block"]["f"].get<double>(), 24.0 * 32 * 32 + 4.0 * 16 * 32);
  EXPECT_DOUBLE_EQ(p["bubble_planned"].get<double>(), p["bubble_planned_no_transfer"].get<double>());
  const PpRun bad = train("", "STRATA_PP_COSTS=guess ");
  EXPECT_NE(bad.cli.status, 0);
  EXPECT_NE(bad.cli.err.find("STRATA_PP_COSTS=guess is not measure or estimate"), std::string::npos)
      << bad.cli.err;
}

// The model replayed with a step's measured compute: stages as fast as planned give the planned
// bubble; a stage twice as slow leaves the other idle for the difference.
TEST(TrainPipelineCosts, ReplayScalesEachStageToItsMeasuredCompute) {
  namespace pl = parallel::pipeline;
  const pl::Schedule s = pl::make_schedule(pl::ScheduleKind::one_f_one_b, 2, 4);
  train::PipelineCosts c;
  c.model.virt = {{1, 2, 0}, {1, 2, 0}};
  EXPECT_NEAR(train::replay(c, s, {12, 12}).bubble, 1.0 / 5, 1e-12);
  EXPECT_NEAR(train::replay(c, s, {1.2, 1.2}).bubble, 1.0 / 5, 1e-12);  // scale-free
  const pl::Prediction slow = train::replay(c, s, {12, 24});
  EXPECT_NEAR(slow.busy_mean, (12 + 24) / 2.0, 1e-9);
  EXPECT_GE(slow.makespan, 1 + 24);  // stage 1's work after stage 0's first forward
  EXPECT_GT(slow.bubble, 0.25);      // stage 0 idles for at least half the step
}

}  // namespace
}  // namespace strata::test::test_pipeline_costs
