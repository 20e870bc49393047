// MoE runs on the report page: each block's max/mean expert load over the steps, and the
// spread of its balancing bias when the run has one.
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

TEST(ReportMoe, LoadPerBlockAndTheBiasSpread) {
  test::TempDir tmp("report_moe");
  const fs::path dir = fs::path(tmp.str()) / "moe";
  fs::create_directories(dir);
  {
    std::ofstream m(dir / "metrics.jsonl");
    for (int s = 1; s <= 4; ++s) {
      const json b0 = {{"max_over_mean", 2.0 - 0.25 * s}, {"router_bias", {0.0, 0.01 * s, -0.01 * s, 0.0}}};
      const json b1 = {{"max_over_mean", 1.5}, {"router_bias", {0.0, 0.0, 0.0, 0.0}}};
      m << json{{"step", s}, {"loss", 3.0}, {"moe", {b0, b1}}}.dump() << "\n";
    }
  }
  std::vector<std::string> w;
  const std::vector<report::RunData> runs = report::load_runs({dir.string()}, w);
  ASSERT_EQ(runs[0].steps.size(), 4u);
  EXPECT_EQ(runs[0].steps[3].moe_max_over_mean, (std::vector<double>{1.0, 1.5}));
  EXPECT_NEAR(runs[0].steps[3].moe_bias_spread[0], 0.08, 1e-12);
  const std::string html = report::build_report(runs).html;
  const std::vector<test::Chart> cs = test::charts(html);
  const test::Chart* load = test::find_chart(cs, "MoE load: max/mean tokens per expert");
  ASSERT_NE(load, nullptr);
  ASSERT_EQ(load->series.size(), 2u);
  EXPECT_NEAR(load->series[0].second[3].second, 1.0, 1e-3);
  ASSERT_NE(test::find_chart(cs, "MoE balancing bias"), nullptr);
  EXPECT_NE(html.find("<td>moe</td><td>2</td><td>1.25</td>"), std::string::npos);
}

}  // namespace
}  // namespace strata
