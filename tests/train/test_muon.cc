// Muon (--optimizer muon, parallel/muon.h) through `strata train`: every layout it runs in
// equals one process within 1e-5 over 8 steps; the memory and bytes in summary.json equal the
// formulas; checkpoints reshard and refuse the other optimizer; bad settings are one line.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "cli_util.h"
#include "core/error.h"

namespace strata::test {
namespace {

using nlohmann::json;

const std::string kRun =
    "train --layers 2 --dim 32 --heads 2 --max-seq 16 --seq 16 --vocab 256 --batch 8 --steps 8 --lr 1e-2 "
    "--threads 1 --sample-tokens 0 --eval-every 0 --eval-batches 1 --peak-gflops 1 --optimizer muon ";

std::vector<double> losses(const std::string& run_dir) {
  std::vector<double> out;
  for (const json& j : json_lines(read_file(run_dir + "/metrics.jsonl")))
    if (j.contains("loss") && j.contains("grad_norm")) out.push_back(j["loss"].get<double>());
  return out;
}

std::vector<double> train(const std::string& args, const std::string& run_dir) {
  RunResult r = run_strata(args + " --run-dir " + run_dir, "", Streams::separate);
  EXPECT_EQ(r.status, 0) << args << "\n" << r.err;
  return losses(run_dir);
}

void expect_close(const std::vector<double>& got, const std::vector<double>& want, double tol,
                  const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], tol) << what << " step " << i + 1;
}

class MuonLayouts : public ::testing::TestWithParam<const char*> {};

// dp 2 at ZeRO 0-3 (each matrix orthogonalised whole by its owner under 1-3), pp 2 (each stage
// its own matrices), ep 2 (each expert's matrices on the rank holding the expert) and tp 2
// (each matrix gathered whole from its slices): the one-process run's losses within 1e-5.
TEST_P(MuonLayouts, EqualOneProcess) {
  TempDir dir("muon_layouts");
  const std::string layout = GetParam();
  // The one-process run has the same experts; without the auxiliary loss, which each rank
  // computes over its own tokens.
  const std::string model = layout.find("--ep") != std::string::npos ? "--experts 4 --dropless --aux-loss-coef 0 " : "";
  const auto one = train(kRun + model, dir.file("one"));
  const auto got = train(kRun + model + layout, dir.file("layout"));
  ASSERT_EQ(one.size(), 8u);
  expect_close(got, one, 1e-5, layout);
  const json s = json::parse(read_file(dir.file("layout") + "/summary.json"));
  ASSERT_TRUE(s.contains("muon")) << s.dump();
  EXPECT_EQ(s["muon"]["bytes_per_step"], s["muon"]["bytes_per_step_formula"]) << layout;
  if (s.contains("model_states_formula")) {
    EXPECT_EQ(s["engine_memory"]["model_states"], s["model_states_formula"]["total"]) << layout;
  }
}

INSTANTIATE_TEST_SUITE_P(Layouts, MuonLayouts,
                         ::testing::Values("--nproc 2 --zero 0", "--nproc 2 --zero 1", "--nproc 2 --zero 2",
                                           "--nproc 2 --zero 3", "--nproc 2 --pp 2",
                                           "--nproc 2 --ep 2 --zero 1", "--nproc 4 --ep 2 --pp 2",
                                           "--nproc 2 --tp 2", "--nproc 4 --tp 2 --zero 1",
                                           "--nproc 4 --pp 2 --dp 2 --zero 1", "--nproc 4 --pp 2 --tp 2 --zero 3"),
                         [](const auto& info) {  // "--nproc 2 --zero 1" -> nproc_2_zero_1
                           std::string n;
                           for (const char* c = info.param; *c; ++c)
                             if (std::isalnum(static_cast<unsigned char>(*c))) n += *c;
                             else if (!n.empty() && n.back() != '_') n += '_';
                           return n;
                         });

// Muon's optimizer states are its momentum alone on its matrices: at ZeRO 0 a rank holds
// 4 bytes per Muon parameter fewer than AdamW's run; under ZeRO 1-3 the exact formula of each
// rank's shard holds; the gathers and scatters are counted.
TEST(Muon, StatesAndBytesEqualTheFormula) {
  TempDir dir("muon_bytes");
  train(kRun + "--nproc 2 --zero 0", dir.file("muon"));
  train(kRun + "--nproc 2 --zero 0 --optimizer adamw", dir.file("adamw"));
  const json m = json::parse(read_file(dir.file("muon") + "/summary.json"));
  const json a = json::parse(read_file(dir.file("adamw") + "/summary.json"));
  const int64_t muon_params = m["muon"]["muon_params"].get<int64_t>();
  EXPECT_EQ(muon_params, 2 * 12 * 32 * 32);
  EXPECT_EQ(a["engine_memory"]["optimizer"].get<int64_t>() - m["engine_memory"]["optimizer"].get<int64_t>(),
            4 * muon_params);
  EXPECT_EQ(m["muon"]["bytes_per_step"], 0);  // every rank orthogonalises every matrix itself
  EXPECT_FALSE(a.contains("muon"));
  // The Newton-Schulz FLOPs count in the MFU: the step's work per token grows by exactly them.
  EXPECT_DOUBLE_EQ(m["flops_per_token"].get<double>() - a["flops_per_token"].get<double>(),
                   m["muon"]["ns_flops_per_step"].get<double>() / (8 * 16));
  for (const char* zero : {"1", "3"}) {
    train(kRun + "--nproc 2 --zero " + zero, dir.file(cat("z", zero)));
    const json s = json::parse(read_file(dir.file(cat("z", zero)) + "/summary.json"));
    EXPECT_EQ(s["engine_memory"]["model_states"], s["model_states_formula"]["total"]) << zero;
    EXPECT_GT(s["muon"]["bytes_per_step"].get<int64_t>(), 0) << zero;
    EXPECT_EQ(s["muon"]["bytes_per_step"], s["muon"]["bytes_per_step_formula"]) << zero;
  }
}

// A checkpoint written at dp 2 ZeRO 3 with ep 2 resumes in one process at ZeRO 0 (and the
// other way round at ZeRO 1 in bf16) on the uninterrupted run's losses; its manifest holds
// the second moment for AdamW's tensors only; the other optimizer is refused in one line.
TEST(Muon, CheckpointsReshardAndRefuseTheOtherOptimizer) {
  TempDir dir("muon_ckpt");
  const std::string moe = kRun + "--experts 4 --dropless --aux-loss-coef 0 --ckpt-every 4 ";
  const auto whole = train(moe + "--nproc 2 --zero 3 --ep 2", dir.file("whole"));
  ASSERT_EQ(whole.size(), 8u);
  const json manifest = json::parse(read_file(dir.file("whole") + "/ckpt/step-000004/manifest.json"));
  bool partial = false;
  for (const json& st : manifest["states"]) partial |= st["name"] == "exp_avg_sq" && st.value("partial", false);
  EXPECT_TRUE(partial) << manifest["states"].dump();
  const std::string step4 = dir.file("whole") + "/ckpt/step-000004";
  const auto resumed = train(moe + "--resume " + step4, dir.file("resumed"));
  ASSERT_EQ(resumed.size(), 4u);
  expect_close(resumed, std::vector<double>(whole.begin() + 4, whole.end()), 1e-5, "dp 2 zero 3 ep 2 -> one process");
  const auto bf16 = train(moe + "--nproc 2 --zero 1 --precision bf16 --resume " + step4, dir.file("bf16"));
  expect_close(bf16, std::vector<double>(whole.begin() + 4, whole.end()), 2e-2, "-> bf16 dp 2 zero 1");
  RunResult other = run_strata(moe + "--optimizer adamw --resume " + step4 + " --run-dir " + dir.file("adamw"), "",
                               Streams::separate);
  EXPECT_NE(other.status, 0);
  EXPECT_NE(other.err.find("--optimizer adamw: checkpoint " + step4 + " was trained with muon"), std::string::npos)
      << other.err;
  EXPECT_EQ(std::count(other.err.begin(), other.err.end(), '\n'), 1) << other.err;
}

// Muon moves the weights differently from AdamW (the tests above can fail).
TEST(Muon, IsNotAdamW) {
  TempDir dir("muon_differs");
  EXPECT_NE(train(kRun, dir.file("muon")), train(kRun + "--optimizer adamw", dir.file("adamw")));
}

TEST(Muon, BadSettingsAreOneLineBeforeAnyRankStarts) {
  TempDir dir("muon_bad");
  expect_one_line_errors(kRun, {
      {"--ns-steps 0", "--ns-steps must be in [1, 100] Newton-Schulz iterations (got 0)"},
      {"--muon-momentum 1", "--muon-momentum must be in [0, 1) (got 1)"},
      {"--muon-momentum -0.1", "--muon-momentum must be in [0, 1) (got -0.1)"},
      {"--muon-lr-scale 0", "--muon-lr-scale must be a positive number (got 0)"},
      {"--optimizer sgd", "--optimizer"},
      {"--arch llama --kv-heads 1 --nproc 2 --tp 2", "--optimizer muon with --tp 2 and 1 key/value heads"},
  }, dir.file("run"));
}

}  // namespace
}  // namespace strata::test
