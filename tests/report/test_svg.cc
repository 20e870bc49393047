// The report's charts checked structurally on synthetic runs with known values: axes,
// series counts, plotted values equal the metrics at known steps; downsampling; speed and
// size of a 10,000-step report; damaged and mixed input.
#include <gtest/gtest.h>

#include <chrono>

#include "../train/cli_util.h"
#include "core/error.h"
#include "report/report.h"
#include "report/svg.h"
#include "report_util.h"

namespace strata::test {
namespace {

std::string build(const std::vector<std::string>& dirs, std::vector<std::string>* warnings = nullptr) {
  std::vector<std::string> w;
  report::Report r = report::build_report(report::load_runs(dirs, w));
  w.insert(w.end(), r.warnings.begin(), r.warnings.end());
  if (warnings) *warnings = w;
  return r.html;
}

// The plotted (x, y) nearest to step x.
std::pair<double, double> at(const std::vector<std::pair<double, double>>& pts, double x) {
  std::pair<double, double> best{NAN, NAN};
  for (const auto& p : pts)
    if (std::isnan(best.first) || std::fabs(p.first - x) < std::fabs(best.first - x)) best = p;
  return best;
}

TEST(ReportSvg, PlottedValuesEqualTheMetrics) {
  TempDir dir("svg_values");
  write_synthetic_run(dir.file("run"), 50);
  const std::vector<Chart> cs = charts(build({dir.file("run")}));

  const Chart* loss = find_chart(cs, "Loss");
  ASSERT_NE(loss, nullptr);
  EXPECT_GE(loss->x_ticks, 3);
  EXPECT_GE(loss->y_ticks, 3);
  ASSERT_EQ(loss->series.size(), 3u);  // train, eval, entropy floor
  EXPECT_EQ(loss->series[0].second.size(), 50u);
  // Pixel coordinates have 2 decimals: values come back to ~1e-2 of a pixel.
  const double tol_y = (loss->plot.y1 - loss->plot.y0) / loss->plot.h * 0.01;
  for (int s : {1, 17, 25, 50}) {
    auto [x, y] = at(loss->series[0].second, s);
    EXPECT_NEAR(x, s, 0.05);
    EXPECT_NEAR(y, 4.0 - 2.0 * s / 50, tol_y) << "train loss at step " << s;
  }
  EXPECT_EQ(loss->series[1].second.size(), 5u);
  EXPECT_NEAR(at(loss->series[1].second, 30).second, 3.5 - 30.0 / 50, tol_y);
  EXPECT_NEAR(loss->series[2].second.front().second, 1.25, tol_y);  // the floor
  EXPECT_NE(loss->series[2].first.find("entropy floor"), std::string::npos);

  const Chart* tps = find_chart(cs, "Throughput");
  ASSERT_NE(tps, nullptr);
  ASSERT_EQ(tps->series.size(), 1u);
  const double tol_t = (tps->plot.y1 - tps->plot.y0) / tps->plot.h * 0.01;
  EXPECT_NEAR(at(tps->series[0].second, 40).second, 1400, tol_t);
  EXPECT_LE(tps->plot.y0, 0);  // throughput axes start at zero
  const Chart* mfu = find_chart(cs, "Model FLOPs");
  ASSERT_NE(mfu, nullptr);
  EXPECT_NEAR(at(mfu->series[0].second, 20).second, 100 * (0.5 + 20 / 200.0),
              (mfu->plot.y1 - mfu->plot.y0) / mfu->plot.h * 0.01);
}

TEST(ReportSvg, BarsCarryTheirValues) {
  TempDir dir("svg_bars");
  write_synthetic_run(dir.file("run"), 50);
  const std::string html = build({dir.file("run")});
  const std::vector<Chart> cs = charts(html);
  const Chart* mem = find_chart(cs, "Memory per rank");
  ASSERT_NE(mem, nullptr);
  // measured optimizer peak = 3 MiB; planner optimizer = 3 MiB; gradients planner 2 MiB
  EXPECT_NE(mem->svg.find("data-name=\"measured (rank 0)\" data-category=\"optimizer\" data-value=\"3\""),
            std::string::npos);
  EXPECT_NE(mem->svg.find("data-name=\"planner formula\" data-category=\"gradients\" data-value=\"2\""),
            std::string::npos);
  const Chart* split = find_chart(cs, "Step time split");
  ASSERT_NE(split, nullptr);
  // 50 steps in 50 buckets: step 1 has no straggler wait (comm 3), step 2 has 1 (comm 2).
  EXPECT_NE(split->svg.find("data-name=\"compute\" data-category=\"1\" data-value=\"12\""), std::string::npos);
  EXPECT_NE(split->svg.find("data-name=\"exposed comm (dp)\" data-category=\"1\" data-value=\"3\""),
            std::string::npos);
  EXPECT_NE(split->svg.find("data-name=\"straggler wait\" data-category=\"2\" data-value=\"1\""),
            std::string::npos);
  EXPECT_NE(split->svg.find("data-name=\"checkpoint stall\" data-category=\"20\" data-value=\"2\""),
            std::string::npos);
  // other = ms - data - compute - optimizer - comm wait = 20 - 19 = 1
  EXPECT_NE(split->svg.find("data-name=\"other\" data-category=\"1\" data-value=\"1\""), std::string::npos);
  const Chart* ov = find_chart(cs, "Gradient communication hidden");
  ASSERT_NE(ov, nullptr);
  EXPECT_NE(ov->svg.find("data-name=\"exposed\" data-category=\"run\" data-value=\"40\""), std::string::npos);
  EXPECT_NE(html.find("Events: 2 checkpoint."), std::string::npos) << "2 saves, at steps 20 and 40";
}

// Replica groups: a step's outer sync (outer_ms, of it outer_wait_ms blocked) leaves the
// optimizer and the exposed communication for its own part of the split.
TEST(ReportSvg, OuterSyncsHaveTheirPartOfTheSplit) {
  TempDir dir("svg_outer");
  write_synthetic_run(dir.file("run"), 10);
  std::string lines, line;
  {
    std::ifstream in(dir.file("run") + "/metrics.jsonl");
    while (std::getline(in, line)) {
      nlohmann::json j = nlohmann::json::parse(line);
      if (j.value("step", 0) == 5 && j.contains("loss")) {
        j["outer_ms"] = 2.0;
        j["outer_wait_ms"] = 1.5;
      }
      lines += j.dump() + "\n";
    }
  }
  std::ofstream(dir.file("run") + "/metrics.jsonl") << lines;
  const std::vector<Chart> cs = charts(build({dir.file("run")}));
  const Chart* split = find_chart(cs, "Step time split");
  ASSERT_NE(split, nullptr);
  auto has = [&](const std::string& name, int step, const std::string& value) {
    return split->svg.find("data-name=\"" + name + "\" data-category=\"" + std::to_string(step) +
                           "\" data-value=\"" + value + "\"") != std::string::npos;
  };
  EXPECT_TRUE(has("outer sync (replica groups)", 5, "2")) << split->svg;
  EXPECT_TRUE(has("exposed comm (dp)", 5, "1.5"));  // 3 - 1.5 of the sync's wait
  EXPECT_TRUE(has("optimizer", 5, "2.5"));          // 3 - the sync's 0.5 of work
  EXPECT_TRUE(has("other", 5, "1"));                // unchanged: the parts still add up
  EXPECT_FALSE(has("outer sync (replica groups)", 3, "2"));  // a step without a sync
}

TEST(ReportSvg, SeveralRunsAreOverlaid) {
  TempDir dir("svg_overlay");
  write_synthetic_run(dir.file("a"), 30);
  write_synthetic_run(dir.file("b"), 60);
  const std::vector<Chart> cs = charts(build({dir.file("a"), dir.file("b")}));
  const Chart* loss = find_chart(cs, "Loss");
  ASSERT_NE(loss, nullptr);
  EXPECT_EQ(loss->series.size(), 5u);  // 2 x (train, eval) + one shared floor
  EXPECT_NEAR(loss->plot.x1, 60, 10);
  const Chart* tps = find_chart(cs, "Throughput");
  ASSERT_EQ(tps->series.size(), 2u);
  EXPECT_EQ(tps->series[1].second.size(), 60u);
}

TEST(ReportSvg, DownsampleKeepsExtremesAndBoundsPoints) {
  std::vector<double> x, y;
  for (int i = 0; i < 10000; ++i) x.push_back(i), y.push_back(std::sin(i * 0.01));
  y[4321] = 50;  // a spike
  y[8000] = -50;
  std::vector<double> ox, oy;
  report::downsample(x, y, 300, ox, oy);
  EXPECT_LE(ox.size(), 600u);
  EXPECT_GE(ox.size(), 300u);
  EXPECT_EQ(*std::max_element(oy.begin(), oy.end()), 50);
  EXPECT_EQ(*std::min_element(oy.begin(), oy.end()), -50);
  EXPECT_TRUE(std::is_sorted(ox.begin(), ox.end()));
}

TEST(ReportSvg, TenThousandStepsRenderFastAndSmall) {
  TempDir dir("svg_10k");
  write_synthetic_run(dir.file("run"), 10000);
  const auto t0 = std::chrono::steady_clock::now();
  const std::string html = build({dir.file("run")});
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(s, 1.0) << "seconds to read and render 10,000 steps";
  EXPECT_LT(html.size(), 2u << 20) << "bytes";
  for (const Chart& c : charts(html))
    for (const auto& [name, pts] : c.series) EXPECT_LE(pts.size(), 2u * 760) << c.title << " " << name;
}

TEST(ReportInput, TruncatedMetricsShowWhatIsReadable) {
  TempDir dir("svg_trunc");
  write_synthetic_run(dir.file("run"), 40, 64, /*summary=*/false);
  {
    std::ofstream m(dir.file("run/metrics.jsonl"), std::ios::app);
    m << "this is not json\n{\"step\": 41, \"loss\": 1.0, \"tok";  // a bad line, then a cut one
  }
  std::vector<std::string> w;
  const std::string html = build({dir.file("run")}, &w);
  std::string all;
  for (const std::string& s : w) all += s + "\n";
  EXPECT_NE(all.find("cut off"), std::string::npos) << all;
  EXPECT_NE(all.find("1 line(s) are not JSON"), std::string::npos) << all;
  EXPECT_NE(all.find("no summary.json"), std::string::npos) << all;
  EXPECT_NE(html.find("cut off"), std::string::npos);  // said on the page too
  const std::vector<Chart> cs = charts(html);
  const Chart* loss = find_chart(cs, "Loss");
  ASSERT_NE(loss, nullptr);
  EXPECT_EQ(loss->series[0].second.size(), 40u);
}

TEST(ReportInput, MixedModelsAreNamed) {
  TempDir dir("svg_mixed");
  write_synthetic_run(dir.file("small"), 20, 64);
  write_synthetic_run(dir.file("wide"), 20, 128);
  std::vector<std::string> w;
  const std::string html = build({dir.file("small"), dir.file("wide")}, &w);
  ASSERT_FALSE(w.empty());
  EXPECT_NE(w.back().find("different models"), std::string::npos) << w.back();
  EXPECT_NE(w.back().find("dim 128"), std::string::npos) << w.back();
  EXPECT_NE(html.find("different models"), std::string::npos);
}

TEST(ReportInput, DirectoriesWithoutMetrics) {
  TempDir dir("svg_empty");
  std::filesystem::create_directories(dir.file("empty"));
  write_synthetic_run(dir.file("good"), 10);
  std::vector<std::string> w;
  build({dir.file("empty"), dir.file("missing"), dir.file("good")}, &w);
  ASSERT_GE(w.size(), 2u);
  EXPECT_NE(w[0].find("no metrics.jsonl"), std::string::npos) << w[0];
  EXPECT_NE(w[1].find("no such directory"), std::string::npos) << w[1];
  std::vector<std::string> w2;
  EXPECT_THROW(report::load_runs({dir.file("empty")}, w2), Error);
}

TEST(ReportCli, WritesOneSelfContainedFile) {
  TempDir dir("svg_cli");
  write_synthetic_run(dir.file("run"), 30);
  RunResult r = run_strata("report " + (dir.file("run")) + " -o " + (dir.file("r.html")), "", Streams::separate);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("wrote "), std::string::npos);
  const std::string html = read_file(dir.file("r.html"));
  EXPECT_EQ(html.find("<script"), std::string::npos);
  EXPECT_EQ(html.find("http://"), html.find("http://www.w3.org/2000/svg"));  // only the SVG namespace
  EXPECT_EQ(html.find("https://"), std::string::npos);
  EXPECT_EQ(html.find("<link"), std::string::npos);
  EXPECT_EQ(html.find("@import"), std::string::npos);

  RunResult bad = run_strata("report " + (dir.file("nope")) + " -o " + (dir.file("x.html")), "", Streams::separate);
  EXPECT_EQ(bad.status, 1);
  EXPECT_NE(bad.err.find("strata: error: no readable run directory"), std::string::npos) << bad.err;
  EXPECT_NE(bad.err.find("no such directory"), std::string::npos) << bad.err;
  EXPECT_FALSE(std::filesystem::exists(dir.file("x.html")));
}

}  // namespace
}  // namespace strata::test
