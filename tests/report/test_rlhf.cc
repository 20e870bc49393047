// RLHF runs on the report page: the gold score of each run against its iterations (DPO's at
// its evaluations), the split of each generating run's iterations into generate / score /
// train, and a resumed run's repeated iterations shown once.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "nlohmann/json.hpp"
#include "report/report.h"
#include "report_util.h"
#include "support/temp_dir.h"

namespace strata {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

// Iteration i: gold 0.4 + 0.01 i, generate 0.2 s, score 0.1 s, train 0.7 s; iterations 4-5
// written twice (a resume), the second time with gold + 1 (the one kept).
void write_ppo_run(const fs::path& dir) {
  fs::create_directories(dir);
  std::ofstream m(dir / "metrics.jsonl");
  auto rec = [&](int i, double extra) {
    m << json{{"iteration", i},
              {"reward", 0.1 * i},
              {"gold", 0.4 + 0.01 * i + extra},
              {"kl", 0.5},
              {"time", {{"generate_s", 0.2}, {"score_s", 0.1}, {"train_s", 0.7}}}}
             .dump()
      << "\n";
  };
  for (int i = 1; i <= 5; ++i) rec(i, 0);
  for (int i = 4; i <= 8; ++i) rec(i, i <= 5 ? 1.0 : 0.0);
  std::ofstream(dir / "summary.json") << json{{"algo", "grpo"}, {"iterations", 8}}.dump();
}

void write_dpo_run(const fs::path& dir) {
  fs::create_directories(dir);
  std::ofstream m(dir / "metrics.jsonl");
  m << json{{"step", 0}, {"eval", true}, {"eval_loss", 0.69}, {"gold", 0.45}}.dump() << "\n";
  for (int s = 1; s <= 4; ++s) m << json{{"step", s}, {"loss", 0.69 - 0.05 * s}, {"time_s", 0.01}}.dump() << "\n";
  m << json{{"step", 4}, {"eval", true}, {"eval_loss", 0.5}, {"gold", 0.6}}.dump() << "\n";
  std::ofstream(dir / "summary.json") << json{{"algo", "dpo"}, {"steps", 4}}.dump();
}

TEST(ReportRlhf, GoldScoreAndTheIterationSplit) {
  test::TempDir tmp("report_rlhf");
  const fs::path ppo = fs::path(tmp.str()) / "grpo", dpo = fs::path(tmp.str()) / "dpo";
  write_ppo_run(ppo);
  write_dpo_run(dpo);
  std::vector<std::string> w;
  const std::vector<report::RunData> runs = report::load_runs({ppo.string(), dpo.string()}, w);
  for (const report::RunData& r : runs) EXPECT_TRUE(r.problems.empty()) << r.dir << ": " << r.problems.front();
  ASSERT_EQ(runs[0].rl.size(), 8u);
  EXPECT_DOUBLE_EQ(runs[0].rl[3].gold, 1.44);  // the resumed record of iteration 4
  ASSERT_EQ(runs[1].rl.size(), 2u);
  const std::string html = report::build_report(runs).html;
  const std::vector<test::Chart> cs = test::charts(html);
  const test::Chart* gold = test::find_chart(cs, "Gold score (RLHF)");
  ASSERT_NE(gold, nullptr);
  ASSERT_EQ(gold->series.size(), 2u);
  EXPECT_EQ(gold->series[0].second.size(), 8u);
  EXPECT_NEAR(gold->series[0].second[7].second, 0.48, 1e-3);
  EXPECT_NEAR(gold->series[1].second[1].first, 4, 1e-3);
  EXPECT_NEAR(gold->series[1].second[1].second, 0.6, 1e-3);
  EXPECT_NE(test::find_chart(cs, "Iteration time split: grpo"), nullptr);
  EXPECT_EQ(test::find_chart(cs, "Iteration time split: dpo"), nullptr);  // DPO generates nothing to train on
  EXPECT_NE(html.find("<td>grpo</td><td>grpo</td><td>0.410</td><td>0.480</td><td>20 / 10 / 70</td>"),
            std::string::npos);
}

}  // namespace
}  // namespace strata
