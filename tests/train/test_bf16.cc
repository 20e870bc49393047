// `strata train --precision bf16` end to end with a small model: which GEMM ran, same-seed
// runs bit-identical, tensor-parallel ranks computing in bf16 too, bf16 tracking fp32 on the
// synthetic corpus, the emulated path (forced through STRATA_KERNELS) with one notice line,
// and refused STRATA_KERNELS values.
#include <gtest/gtest.h>

#include <cmath>

#include "cli_util.h"
#include "kernels/gemm_bf16.h"

using namespace strata::test;
using nlohmann::json;

namespace test_bf16 {  // its own names in a unity build
namespace {

const std::string kSmall =
    "train --layers 2 --dim 64 --heads 4 --seq 32 --vocab 256 --peak-gflops 1000 "
    "--data synthetic:200000 --sample-tokens 0 ";

RunResult train_ok(const std::string& args, const std::string& env = "") {
  RunResult r = run_strata(kSmall + args, env, Streams::separate);
  EXPECT_EQ(r.status, 0) << args << "\nstdout:\n" << r.out << "\nstderr:\n" << r.err;
  return r;
}

int count_lines_with(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t pos = text.find(what); pos != std::string::npos; pos = text.find(what, pos + 1)) ++n;
  return n;
}

}  // namespace

TEST(Bf16Cli, SameSeedBitIdenticalAndNamesTheGemm) {
  TempDir dir("bf16_det");
  const std::string env = "OMP_WAIT_POLICY=passive ";
  const std::string args = "--precision bf16 --batch 4 --steps 5 --threads 2 --seed 3 ";
  train_ok(args + "--run-dir " + dir.file("a"), env);
  RunResult b = train_ok(args + "--run-dir " + dir.file("b"), env);
  // The small model's products are below auto's oneDNN size: force oneDNN on every product.
  const bool dnnl = strata::kernels::cpu_has_avx512bf16();
  if (dnnl) {
    train_ok(args + "--run-dir " + dir.file("c"), env + "STRATA_KERNELS=onednn ");
    train_ok(args + "--run-dir " + dir.file("d"), env + "STRATA_KERNELS=onednn ");
  }
  for (const char* pair : {"ab", "cd"}) {
    if (pair[0] == 'c' && !dnnl) break;
    const auto ra = step_records(dir.file(std::string(1, pair[0]) + "/metrics.jsonl"));
    const auto rb = step_records(dir.file(std::string(1, pair[1]) + "/metrics.jsonl"));
    ASSERT_EQ(ra.size(), 5u);
    ASSERT_EQ(rb.size(), 5u);
    for (size_t i = 0; i < ra.size(); ++i) {
      EXPECT_EQ(ra[i]["loss"], rb[i]["loss"]) << pair << " step " << i + 1;  // exact
      EXPECT_EQ(ra[i]["grad_norm"], rb[i]["grad_norm"]) << pair << " step " << i + 1;
    }
  }
  const json s = json::parse(read_file(dir.file("b/summary.json")));
  // auto: strata's own kernel (never oneDNN, whose bits follow the thread count), the best
  // the CPU has that passed its self-check (summary.json lists the checks).
  const std::string want = strata::kernels::cpu_has_amx_bf16()        ? "amx"
                           : strata::kernels::cpu_has_avx512bf16()     ? "avx512bf16"
                                                                       : "fp32 (emulated bf16)";
  if (want != "amx" && s["kernels"]["notes"].empty()) {  // amx also needs the tile permission
    EXPECT_EQ(s["gemm"], want);
  }
  EXPECT_NE(b.out.find("gemm " + s["gemm"].get<std::string>()), std::string::npos) << b.out;
  EXPECT_EQ(s["parallel"]["precision"], "bf16");
  if (dnnl) {
    EXPECT_EQ(json::parse(read_file(dir.file("d/summary.json")))["gemm"], "onednn");
  }
}

// `--tp 2 --precision bf16`: the tensor-parallel ranks compute in bf16 (summary.json's gemm
// names the bf16 path, the activation buffers are the bf16 ones `strata plan --local
// --precision bf16` predicts) and follow the one-process bf16 losses.
TEST(Bf16Cli, TensorParallelComputesInBf16) {
  TempDir dir("bf16_tp");
  const std::string env = "OMP_NUM_THREADS=1 ";
  const std::string args = "--precision bf16 --max-seq 32 --batch 4 --steps 4 --seed 3 "
                           "--eval-every 0 ";
  train_ok(args + "--run-dir " + (dir.file("one")), env);
  train_ok(args + "--nproc 2 --tp 2 --zero 1 --run-dir " + (dir.file("tp")), env);
  const json s = json::parse(read_file(dir.file("tp/summary.json")));
  EXPECT_EQ(s["gemm"], strata::kernels::matmul_gemm_name(true));
  EXPECT_NE(s["gemm"], strata::kernels::matmul_gemm_name(false));
  const auto one = step_records(dir.file("one/metrics.jsonl"));
  const auto tp = step_records(dir.file("tp/metrics.jsonl"));
  ASSERT_EQ(one.size(), 4u);
  ASSERT_EQ(tp.size(), 4u);
  for (size_t i = 0; i < one.size(); ++i)
    EXPECT_NEAR(one[i]["loss"].get<double>(), tp[i]["loss"].get<double>(), 1e-2)
        << "step " << i + 1;
  RunResult plan = run_strata(
      "plan --local --layers 2 --dim 64 --heads 4 --vocab 256 --model tiny --max-seq 32 "
      "--seq 32 --tp 2 --dp 1 --zero 1 --precision bf16 --micro-batch 4 --json", "", Streams::separate);
  ASSERT_EQ(plan.status, 0) << plan.err;
  const json p = json::parse(plan.out);
  for (const json& r : s.at("tensor_parallel").at("ranks")) {
    EXPECT_EQ(r.at("activations"), r.at("activations_plan"));
    const json& want = p.at("ranks").at(r.at("tp_rank").get<size_t>());
    EXPECT_EQ(r.at("activations"), want.at("activations"));
    EXPECT_EQ(r.at("tp_bytes_per_step"), r.at("tp_bytes_per_step_plan"));
  }
}

// bf16 tracks fp32 on the synthetic corpus: the held-out loss within 1% after 150 steps
// (docs/training.md records the demo-sized 600-step run).
TEST(Bf16Cli, TracksFp32OnTheSyntheticCorpus) {
  TempDir dir("bf16_track");
  const std::string args = "--batch 8 --steps 150 --lr 3e-3 --eval-every 0 --eval-batches 8 "
                           "--seed 7 --threads 2 ";
  train_ok(args + "--run-dir " + (dir.file("fp32")), "OMP_WAIT_POLICY=passive ");
  train_ok(args + "--precision bf16 --run-dir " + (dir.file("bf16")), "OMP_WAIT_POLICY=passive ");
  const json f = json::parse(read_file(dir.file("fp32/summary.json")));
  const json h = json::parse(read_file(dir.file("bf16/summary.json")));
  const double ef = f["eval_loss"].get<double>(), eh = h["eval_loss"].get<double>();
  EXPECT_LT(ef, std::log(256.0) - 2.0);  // both learned, so agreement means something
  EXPECT_NEAR(eh / ef, 1.0, 0.01) << "fp32 " << ef << ", bf16 " << eh;
  EXPECT_NE(ef, eh);
}

TEST(Bf16Cli, EmulatedWithOneNoticeLine) {
  TempDir dir("bf16_emu");
  RunResult r = train_ok("--precision bf16 --batch 4 --steps 3 --run-dir " + (dir.file("run")),
                         "STRATA_KERNELS=fp32 ");
  const std::string all = r.out + r.err;
  EXPECT_EQ(count_lines_with(all, "runs emulated"), 1) << all;
  const json s = json::parse(read_file(dir.file("run/summary.json")));
  EXPECT_EQ(s["gemm"], "fp32 (emulated bf16)");
  EXPECT_EQ(s["peak_kind"], "sgemm");
  // fp32 runs never mention it.
  RunResult f = train_ok("--batch 4 --steps 2", "STRATA_KERNELS=fp32 ");
  EXPECT_EQ(count_lines_with(f.out + f.err, "emulated"), 0);
}

TEST(Bf16Cli, RefusesKernelsTheCpuLacksOrUnknown) {
  RunResult bad = run_strata(kSmall + "--precision bf16 --batch 4 --steps 2", "STRATA_KERNELS=tpu ", Streams::separate);
  EXPECT_EQ(bad.status, 1);
  EXPECT_NE(bad.err.find("STRATA_KERNELS must be auto, onednn, amx, avx512bf16 or fp32 (got 'tpu')"),
            std::string::npos)
      << bad.err;
  if (!strata::kernels::cpu_has_amx_bf16()) {
    RunResult amx = run_strata(kSmall + "--precision bf16 --batch 4 --steps 2", "STRATA_KERNELS=amx ", Streams::separate);
    EXPECT_EQ(amx.status, 1);
    EXPECT_NE(amx.err.find("STRATA_KERNELS=amx: this CPU (or its kernel) offers no AMX-BF16 tiles"),
              std::string::npos)
        << amx.err;
  }
  RunResult prec = run_strata(kSmall + "--precision fp16 --batch 4 --steps 2", "", Streams::separate);
  EXPECT_NE(prec.status, 0);
  EXPECT_NE(prec.err.find("fp16"), std::string::npos) << prec.err;
}

// `--reduce-dtype`: the gradient collectives' dtype apart from the working precision. fp32
// training reduced in bf16 and bf16 training reduced in fp32 both train and follow the
// default run; the payload summary.json reports is exactly half (bf16) or twice (fp32) the
// default's, at ZeRO 0 (all-reduce), 1 (reduce-scatter) and 2-3 (bucket buffers).
TEST(Bf16Cli, ReduceDtypeSetsTheGradientCollectivesDtype) {
  TempDir dir("bf16_reduce");
  const std::string env = "OMP_NUM_THREADS=1 ";
  const std::string base = "--nproc 2 --batch 4 --steps 4 --seed 3 --eval-every 0 ";
  auto bytes = [&](const std::string& run) {
    const json s = json::parse(read_file(dir.file(run + "/summary.json")));
    return s.at("parallel").at("grad_reduce_bytes_per_step").get<int64_t>();
  };
  auto losses = [&](const std::string& run) {
    std::vector<double> out;
    for (const json& j : step_records(dir.file(run + "/metrics.jsonl")))
      out.push_back(j["loss"].get<double>());
    return out;
  };
  for (const char* stage : {"0", "1", "2", "3"}) {
    const std::string z = std::string("--zero ") + stage + " ", s = stage;
    train_ok(base + z + "--run-dir " + dir.file("f" + s), env);
    train_ok(base + z + "--reduce-dtype bf16 --run-dir " + dir.file("fh" + s), env);
    train_ok(base + z + "--precision bf16 --run-dir " + dir.file("h" + s), env);
    train_ok(base + z + "--precision bf16 --reduce-dtype fp32 --run-dir " + dir.file("hf" + s), env);
    EXPECT_GT(bytes("f" + s), 0);
    EXPECT_EQ(bytes("fh" + s) * 2, bytes("f" + s)) << "zero " << stage;
    EXPECT_EQ(bytes("hf" + s), bytes("h" + s) * 2) << "zero " << stage;
    EXPECT_EQ(json::parse(read_file(dir.file("fh" + s + "/summary.json")))["parallel"]
                  ["reduce_dtype"], "bf16");
    for (const auto& [a, b] : {std::pair{"f", "fh"}, std::pair{"h", "hf"}}) {
      const auto la = losses(a + s), lb = losses(b + s);
      ASSERT_EQ(la.size(), 4u);
      ASSERT_EQ(lb.size(), 4u);
      for (size_t i = 0; i < la.size(); ++i)
        EXPECT_NEAR(lb[i] / la[i], 1.0, 1e-2) << b << s << " step " << i + 1;
      EXPECT_LT(lb.back(), lb.front()) << b << s;  // it trains
    }
  }
  RunResult bad = run_strata(kSmall + base + "--reduce-dtype fp16", "", Streams::separate);
  EXPECT_EQ(bad.status, 1);
  EXPECT_NE(bad.err.find("--reduce-dtype fp16: expected fp32 or bf16"), std::string::npos)
      << bad.err;
}

}  // namespace test_bf16
