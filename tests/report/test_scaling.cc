// The scaling study: its decomposition on known values, a real 3-point study on a tiny model
// (every point's parts add up to its step time within 5%, oversubscription is said), the
// calibration file and `plan --gpu local`, and bad input.
#include <gtest/gtest.h>

#include <thread>

#include "../train/cli_util.h"
#include "report/scaling.h"
#include "report_util.h"

namespace strata::test {
namespace {

using nlohmann::json;

TEST(ScalingDecompose, KnownValues) {
  TempDir dir("sc_known");
  write_synthetic_run(dir.file("run"), 50);
  const json p = report::decompose_point(dir.file("run"));
  const json& parts = p["parts_ms"];
  EXPECT_EQ(p["steps"], 49);  // step 1 pays for warm-up
  EXPECT_DOUBLE_EQ(parts["compute"].get<double>(), 12);
  EXPECT_DOUBLE_EQ(parts["optimizer"].get<double>(), 3);
  EXPECT_DOUBLE_EQ(parts["data wait"].get<double>(), 1);
  EXPECT_DOUBLE_EQ(parts["pipeline bubble"].get<double>(), 0);
  // steps 2..50: 25 even steps wait 1 ms for a straggler (comm 2), 24 odd ones none (comm 3)
  EXPECT_NEAR(parts["straggler wait"].get<double>(), 25.0 / 49, 1e-12);
  EXPECT_NEAR(parts["exposed comm (dp)"].get<double>(), (25 * 2.0 + 24 * 3.0) / 49, 1e-12);
  EXPECT_NEAR(parts["checkpoint stall"].get<double>(), 4.0 / 49, 1e-12);  // saves at 20 and 40
  EXPECT_NEAR(p["step_ms"].get<double>(), 20 + 4.0 / 49, 1e-12);
  EXPECT_NEAR(parts["other"].get<double>(), 1, 1e-12);
  EXPECT_NEAR(p["tokens_per_s"].get<double>(), 49 * 256 / ((49 * 20 + 4) / 1e3), 1e-6);
}

TEST(ScalingStudy, PartsAddUpAndOversubscriptionIsShown) {
  TempDir dir("sc_study");
  const std::string out = dir.file("study");
  RunResult r = run_strata("bench scaling --nproc 1,2,3 --gpu '' --out " + out +
                           " --layers 2 --dim 64 --heads 4 --seq 32 --batch 6 --steps 12 --peak-gflops 10", "", Streams::separate);
  ASSERT_EQ(r.status, 0) << r.out << r.err;
  const json s = json::parse(read_file(out + "/scaling.json"));
  ASSERT_EQ(s["points"].size(), 3u);
  EXPECT_EQ(s["kind"], "strong");
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  for (const json& p : s["points"]) {
    const double step = p["step_ms"].get<double>();
    double sum = 0;
    for (auto it = p["parts_ms"].begin(); it != p["parts_ms"].end(); ++it)
      if (it.key() != "other") sum += it.value().get<double>();
    EXPECT_GT(step, 0);
    EXPECT_NEAR(sum, step, 0.05 * step) << "N=" << p["nproc"] << ": measured parts vs step time";
    EXPECT_EQ(p["oversubscribed"].get<bool>(), p["nproc"].get<unsigned>() > cores);
    EXPECT_EQ(p["global_batch"], 6);
  }
  EXPECT_DOUBLE_EQ(s["points"][0]["speedup"].get<double>(), 1.0);
  EXPECT_NE(r.out.find("speedup"), std::string::npos);
  if (cores < 3) {
    EXPECT_NE(r.out.find("oversubscribed"), std::string::npos) << r.out;
  }

  // The report of the study: speedup against linear, the decomposition beneath.
  RunResult rep = run_strata("report " + out + " -o " + (dir.file("r.html")), "", Streams::separate);
  ASSERT_EQ(rep.status, 0) << rep.err;
  const std::vector<Chart> cs = charts(read_file(dir.file("r.html")));
  const Chart* sp = find_chart(cs, "Speedup");
  ASSERT_NE(sp, nullptr);
  ASSERT_EQ(sp->series.size(), 2u);  // measured, linear
  EXPECT_EQ(sp->series[0].second.size(), 3u);
  EXPECT_NEAR(sp->series[1].second[2].second, 3, 0.05);  // linear at N=3
  const Chart* dec = find_chart(cs, "Step time decomposition");
  ASSERT_NE(dec, nullptr);
  EXPECT_NE(dec->svg.find("data-category=\"N=2"), std::string::npos);
}

TEST(ScalingStudy, BadInput) {
  TempDir dir("sc_bad");
  RunResult r = run_strata("bench scaling --nproc 1,2,3 --batch 8 --steps 2 --out " + (dir.file("x")), "", Streams::separate);
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("--batch 8 does not divide over 3 ranks"), std::string::npos) << r.err;
  r = run_strata("bench scaling --nproc 1,two --out " + (dir.file("x")), "", Streams::separate);
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("--nproc 'two' is not a positive integer"), std::string::npos) << r.err;
  r = run_strata("bench scaling --nproc 1 --run-dir elsewhere --out " + (dir.file("x")), "", Streams::separate);
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("--run-dir is set by the study"), std::string::npos) << r.err;
  r = run_strata("bench scaling --nproc 1 --gpu '' --steps 2 --layers 0 --out " + (dir.file("x")), "", Streams::separate);
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("point N=1: strata train failed"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("--layers must be positive"), std::string::npos) << r.err;
}

TEST(PlanCalibrate, WritesAFileThatPlanGpuLocalReads) {
  TempDir dir("sc_cal");
  const std::string file = dir.file("local.json");
  RunResult r = run_strata("plan calibrate --probe-seconds 0.3 -o " + file, "", Streams::separate);
  ASSERT_EQ(r.status, 0) << r.out << r.err;
  const json g = json::parse(read_file(file));
  for (const char* k : {"peak_tflops", "hbm_gbps", "intra_node_gbps", "intra_node_latency_us",
                        "compute_efficiency", "gpus_per_node", "memory_gib"})
    EXPECT_GT(g[k].get<double>(), 0) << k;
  EXPECT_LE(g["compute_efficiency"].get<double>(), 1.0);
  RunResult p = run_strata("plan --gpu local --layers 2 --dim 64 --heads 4 --seq 32 --vocab 256 "
                           "--batch 4 --gpus 2 --tp 1 --pp 1 --cp 1 --precision fp32 --json",
                           "STRATA_CALIBRATION=" + file + " ", Streams::separate);
  ASSERT_EQ(p.status, 0) << p.err;
  const json plan = json::parse(p.out);
  EXPECT_EQ(plan["hardware"]["name"], "local");
  EXPECT_GT(plan["best"]["time"]["step_s"].get<double>(), 0);

  RunResult missing = run_strata("plan --gpu local --model gpt2", "STRATA_CALIBRATION=" + (dir.file("none.json")) + " ", Streams::separate);
  EXPECT_EQ(missing.status, 1);
  EXPECT_NE(missing.err.find("run `strata plan calibrate` first"), std::string::npos) << missing.err;
}

}  // namespace
}  // namespace strata::test
