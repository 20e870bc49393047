// Which kernel paths `strata train` takes on the CPU at hand (kernels/isa.h,
// kernels/gemm_bf16.h, kernels/selfcheck.h): a path that fails its self-check is passed over
// with one note and recorded in summary.json, a forced one is refused in one line before any
// rank starts, and bad values are refused. STRATA_SELFCHECK_FAIL makes a path fail, so the
// fallbacks run on every CPU for every path it has.
#include <gtest/gtest.h>

#include <filesystem>
#include <vector>

#include "cli_util.h"
#include "kernels/gemm_bf16.h"
#include "kernels/isa.h"

using namespace strata::test;
using nlohmann::json;
namespace k = strata::kernels;

namespace test_kernel_paths {  // its own names in a unity build
namespace {

const std::string kRun =
    "train --layers 1 --dim 32 --heads 2 --seq 16 --vocab 256 --batch 4 --steps 2 --threads 1 "
    "--peak-gflops 1000 --sample-tokens 0 --eval-every 0 --eval-batches 1 ";

int count(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t p = text.find(what); p != std::string::npos; p = text.find(what, p + 1)) ++n;
  return n;
}

// The levels above the baseline that this CPU has, best first.
std::vector<k::Isa> upper_levels() {
  std::vector<k::Isa> v = k::available_isas();
  v.erase(v.begin());  // the baseline
  return {v.rbegin(), v.rend()};
}

}  // namespace

// Each level above the baseline, made to fail (an illegal instruction in its check, or a wrong
// answer): the run takes the next level down, says so once, and summary.json records it.
TEST(KernelPaths, ALevelThatFailsItsCheckIsPassedOverWithOneNote) {
  const auto up = upper_levels();
  if (up.empty()) GTEST_SKIP() << "this CPU has the baseline level only";
  TempDir dir("isa_fallback");
  for (size_t i = 0; i < up.size(); ++i) {
    const std::string failed = k::isa_name(up[i]);
    const std::string next = i + 1 < up.size() ? k::isa_name(up[i + 1]) : k::isa_name(k::Isa::baseline);
    std::string fail = failed;  // every level above this one fails too, so this one is reached
    for (size_t j = 0; j < i; ++j) fail += std::string(",") + k::isa_name(up[j]);
    for (const std::string how : {"", ":wrong"}) {
      const std::string run = dir.file(failed + how.substr(how.empty() ? 0 : 1));
      RunResult r = run_strata(kRun + "--nproc 2 --run-dir " + run,
                               "STRATA_SELFCHECK_FAIL=" + fail + how + " ", Streams::separate);
      ASSERT_EQ(r.status, 0) << r.err;
      const std::string why = how.empty() ? "illegal instruction" : "wrong answer";
      const std::string note = "note: " + failed + " failed its self-check (" + why + "); using " + next;
      EXPECT_EQ(count(r.out + r.err, note), 1) << r.out << r.err;
      EXPECT_NE(r.out.find("kernels " + next + ","), std::string::npos) << r.out;
      const json s = json::parse(read_file(run + "/summary.json"));
      EXPECT_EQ(s["kernels"]["isa"], next);
      bool recorded = false;
      for (const json& c : s["kernels"]["self_checks"])
        if (c["path"] == failed) recorded = c["ok"] == false && c["why"] == why;
      EXPECT_TRUE(recorded) << s["kernels"].dump();
    }
  }
}

// The bf16 paths the CPU has, each made to fail: the run passes it over (to the next, or to
// emulation) with one note. On a CPU without AMX or AVX-512 BF16 there is no bf16 path to fail.
TEST(KernelPaths, ABf16PathThatFailsItsCheckIsPassedOver) {
  std::vector<k::GemmPath> have;
  for (k::GemmPath p : {k::GemmPath::amx, k::GemmPath::avx512bf16})
    if (k::gemm_path_available(p)) have.push_back(p);
  if (have.empty()) GTEST_SKIP() << "no bf16 matrix unit on this CPU (bf16 runs emulated)";
  TempDir dir("bf16_fallback");
  for (size_t i = 0; i < have.size(); ++i) {
    std::string fail;
    for (size_t j = 0; j <= i; ++j) fail += std::string(j ? "," : "") + k::gemm_path_name(have[j]);
    const std::string next = i + 1 < have.size() ? k::gemm_path_name(have[i + 1]) : "fp32";
    const std::string run = dir.file(k::gemm_path_name(have[i]));
    RunResult r = run_strata(kRun + "--precision bf16 --run-dir " + run, "STRATA_SELFCHECK_FAIL=" + fail + " ",
                             Streams::separate);
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_EQ(count(r.out + r.err, std::string("note: ") + k::gemm_path_name(have[i]) +
                                       " failed its self-check (illegal instruction); using " + next),
              1)
        << r.out << r.err;
    const json s = json::parse(read_file(run + "/summary.json"));
    EXPECT_EQ(s["kernels"]["bf16_gemm"], next);
  }
}

// A forced path that fails its check, a level or path the CPU lacks, an unknown value: one
// line and exit 1, before any rank starts (no rank's start line, no run directory content).
TEST(KernelPaths, ForcedPathsThatCannotRunAreRefusedBeforeAnyRankStarts) {
  TempDir dir("isa_refused");
  struct Case {
    std::string env, flags, want;
  };
  std::vector<Case> cases = {
      {"STRATA_ISA=avx9 ", "", "STRATA_ISA must be auto, x86-64-v4, x86-64-v3 or x86-64-v2 (got 'avx9')"},
      {"STRATA_KERNELS=tpu ", "--precision bf16 ",
       "STRATA_KERNELS must be auto, onednn, amx, avx512bf16 or fp32 (got 'tpu')"}};
  for (k::Isa i : upper_levels())
    cases.push_back({std::string("STRATA_ISA=") + k::isa_name(i) + " STRATA_SELFCHECK_FAIL=" + k::isa_name(i) + " ",
                     "", std::string("STRATA_ISA=") + k::isa_name(i) + ": " + k::isa_name(i) +
                             " failed its self-check on this CPU (illegal instruction); use auto"});
  if (!k::isa_available(k::Isa::v4))
    cases.push_back({"STRATA_ISA=x86-64-v4 ", "", "STRATA_ISA=x86-64-v4: this CPU lacks x86-64-v4"});
  for (k::GemmPath p : {k::GemmPath::amx, k::GemmPath::avx512bf16}) {
    const std::string name = k::gemm_path_name(p);
    if (k::gemm_path_available(p))
      cases.push_back({"STRATA_KERNELS=" + name + " STRATA_SELFCHECK_FAIL=" + name + ":wrong ", "--precision bf16 ",
                       "STRATA_KERNELS=" + name + ": " + name + " failed its self-check on this CPU (wrong answer)"});
    else
      cases.push_back({"STRATA_KERNELS=" + name + " ", "--precision bf16 ", "STRATA_KERNELS=" + name + ": this CPU"});
  }
  for (const Case& c : cases) {
    const std::string run = dir.file("run");
    RunResult r = run_strata(kRun + c.flags + "--nproc 2 --run-dir " + run, c.env, Streams::separate);
    EXPECT_EQ(r.status, 1) << c.env << r.err;
    EXPECT_NE(r.err.find(c.want), std::string::npos) << c.env << "\n" << r.err;
    EXPECT_EQ(count(r.err, "\n"), 1) << c.env << "\n" << r.err;  // one line
    EXPECT_EQ(r.out.find("strata train:"), std::string::npos) << c.env << r.out;
    EXPECT_FALSE(std::filesystem::exists(run + "/metrics.jsonl")) << c.env;
  }
}

}  // namespace test_kernel_paths
