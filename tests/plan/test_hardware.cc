// α-β collective costs, GPU presets and JSON files, and links fitted to benchmark rows.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>

#include "core/error.h"
#include "cost/comm.h"
#include "nlohmann/json.hpp"
#include "plan/hardware.h"

using namespace strata::plan;

namespace {

std::string temp_file(const std::string& name, const std::string& text) {
  std::string path = "/tmp/strata_plan_test_" + std::to_string(getpid()) + "_" + name;
  std::ofstream(path) << text;
  return path;
}

}  // namespace

TEST(CommCost, RingFormulas) {
  const Link l{100, 5};  // 100 GB/s, 5 us per step
  for (int n = 2; n <= 8; ++n) {
    const double B = 1e9;
    EXPECT_NEAR(allreduce_s(B, n, l), 2.0 * (n - 1) * 5e-6 + 2.0 * (n - 1) / n * B / 100e9, 1e-15);
    EXPECT_NEAR(reduce_scatter_s(B, n, l), (n - 1) * 5e-6 + double(n - 1) / n * B / 100e9, 1e-15);
    EXPECT_NEAR(all_gather_s(B, n, l), reduce_scatter_s(B, n, l), 1e-15);
    EXPECT_NEAR(allreduce_s(B, n, l), reduce_scatter_s(B, n, l) + all_gather_s(B, n, l), 1e-15);
    EXPECT_NEAR(all_to_all_s(B, n, l), (n - 1) * 5e-6 + double(n - 1) / n * B / 100e9, 1e-15);
  }
  EXPECT_EQ(allreduce_s(1e9, 1, l), 0.0);
  EXPECT_EQ(allreduce_s(0, 8, l), 0.0);
  EXPECT_NEAR(send_recv_s(1e6, l), 5e-6 + 1e6 / 100e9, 1e-15);
  EXPECT_DOUBLE_EQ(bus_factor(Collective::allreduce, 4), 1.5);
  EXPECT_DOUBLE_EQ(bus_factor(Collective::all_gather, 4), 0.75);
}

TEST(Hardware, PresetsAndUnknownName) {
  GpuSpec h = gpu_preset("h100-80g");
  EXPECT_DOUBLE_EQ(h.peak_tflops, 989);
  EXPECT_EQ(h.gpus_per_node, 8);
  EXPECT_DOUBLE_EQ(gpu_preset("a100-40g").memory_gib, 40);
  EXPECT_GT(gpu_preset("h200").memory_gib, 140);
  try {
    gpu_preset("v100");
    FAIL();
  } catch (const strata::Error& e) {
    std::string w = e.what();
    for (const char* n : {"v100", "a100-40g", "a100-80g", "h100-80g", "h200"})
      EXPECT_NE(w.find(n), std::string::npos) << w;
  }
}

TEST(Hardware, JsonFileWithBaseAndOverrides) {
  std::string p = temp_file("gpu.json", R"({"base": "h100-80g", "inter_node_gbps": 37.5,
                                             "compute_efficiency": 0.6, "name": "measured"})");
  GpuSpec g = load_gpu(p);
  EXPECT_EQ(g.name, "measured");
  EXPECT_DOUBLE_EQ(g.inter.gbps, 37.5);
  EXPECT_DOUBLE_EQ(g.efficiency, 0.6);
  EXPECT_DOUBLE_EQ(g.peak_tflops, 989);
  std::remove(p.c_str());

  std::string full = temp_file("full.json", R"({"memory_gib": 24, "peak_tflops": 165,
      "hbm_gbps": 1008, "intra_node_gbps": 32, "inter_node_gbps": 12.5, "gpus_per_node": 4})");
  g = load_gpu(full);
  EXPECT_EQ(g.gpus_per_node, 4);
  EXPECT_DOUBLE_EQ(g.memory_gib, 24);
  std::remove(full.c_str());
}

TEST(Hardware, JsonFileErrorsNameTheProblem) {
  auto expect_error = [](const std::string& text, const std::string& needle) {
    std::string p = temp_file("bad.json", text);
    try {
      load_gpu(p);
      ADD_FAILURE() << "accepted " << text;
    } catch (const strata::Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
    std::remove(p.c_str());
  };
  expect_error(R"({"memory_gib": 80})", "missing \"peak_tflops\"");
  expect_error(R"({"base": "h100-80g", "memroy_gib": 80})", "unknown key \"memroy_gib\"");
  expect_error(R"({"base": "h100-80g", "memory_gib": -1})", "\"memory_gib\" must be positive");
  expect_error(R"({"base": "h100-80g", "memory_gib": "lots"})", "must be a number");
  expect_error(R"({"base": "b300"})", "unknown GPU preset 'b300'");
  expect_error("{not json", "not valid JSON");
  EXPECT_THROW(load_gpu("/nonexistent/gpu.json"), strata::Error);
}

// Rows as `strata bench comm --json` prints them, generated from a known α and β on 4 ranks:
// the fit recovers both.
TEST(Hardware, LinkFittedFromBenchmarkRows) {
  const int n = 4;
  const double alpha_us = 7, beta = 20;  // GB/s
  std::string rows = "[";
  for (double bytes = 1024; bytes <= 256.0 * 1024 * 1024; bytes *= 4) {
    double t = 2 * (n - 1) * alpha_us + 2.0 * (n - 1) / n * bytes / (beta * 1e3);  // us
    double algbw = bytes / t / 1e3, busbw = algbw * 2.0 * (n - 1) / n;
    char b[200];
    std::snprintf(b, sizeof b,
                  "%s{\"op\":\"allreduce\",\"bytes\":%.0f,\"time_us\":%.6f,"
                  "\"algbw\":%.6f,\"busbw\":%.6f,\"wrong\":0}",
                  rows.size() > 1 ? "," : "", bytes, t, algbw, busbw);
    rows += b;
  }
  rows += "]";
  std::string p = temp_file("bench.json", rows);
  FittedLink f = fit_link_from_bench(p);
  EXPECT_EQ(f.ranks, 4);
  EXPECT_EQ(f.op, "allreduce");
  EXPECT_NEAR(f.link.gbps, beta, 0.01 * beta);              // the largest message
  EXPECT_NEAR(f.link.alpha_us, alpha_us, 0.02 * alpha_us);  // the smallest message
  std::remove(p.c_str());

  // One object per line works too; rows without the needed keys are an error.
  std::string lines = temp_file(
      "lines.json",
      "{\"op\":\"allgather\",\"bytes\":1048576,\"time_us\":100,\"algbw\":10.48576,\"busbw\":5."
      "24288}\n"
      "{\"op\":\"allgather\",\"bytes\":8,\"time_us\":10,\"algbw\":0.0008,\"busbw\":0.0004}\n");
  f = fit_link_from_bench(lines);
  EXPECT_EQ(f.ranks, 2);
  EXPECT_NEAR(f.link.gbps, 5.24288, 1e-9);
  EXPECT_NEAR(f.link.alpha_us, 10, 1e-9);
  std::remove(lines.c_str());
  std::string bad = temp_file("bad_rows.json", R"([{"op":"allreduce","bytes":8}])");
  EXPECT_THROW(fit_link_from_bench(bad), strata::Error);
  std::remove(bad.c_str());
}
