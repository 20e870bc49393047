// `strata train` end to end with a small model: files and their keys, stdout modes,
// determinism, accumulation equivalence, learning.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include "cli_util.h"
#include "train/peak.h"

using namespace strata::test;
using nlohmann::json;

namespace {

const std::string kSmall =
    "train --layers 2 --dim 64 --heads 4 --seq 32 --vocab 256 --peak-gflops 10 "
    "--data synthetic:200000 ";

struct Metrics {
  std::vector<json> steps, evals, samples;
};

Metrics read_metrics(const std::string& path) {
  Metrics m;
  for (json& j : json_lines(read_file(path))) {
    if (j.contains("loss")) m.steps.push_back(j);
    else if (j.contains("eval_loss")) m.evals.push_back(j);
    else if (j.contains("sample")) m.samples.push_back(j);
    else ADD_FAILURE() << "unexpected record " << j.dump();
  }
  return m;
}

std::vector<double> losses(const Metrics& m) {
  std::vector<double> out;
  for (const json& j : m.steps) out.push_back(j["loss"].get<double>());
  return out;
}

RunResult train_ok(const std::string& args, const std::string& env = "") {
  RunResult r = run_strata(kSmall + args, env, Streams::separate);
  EXPECT_EQ(r.status, 0) << args << "\nstdout:\n" << r.out << "\nstderr:\n" << r.err;
  return r;
}

}  // namespace

TEST(TrainCli, RunDirFilesHoldEveryKey) {
  TempDir dir("files");
  RunResult r = train_ok("--batch 4 --steps 4 --eval-every 2 --eval-batches 2 --sample-every 2 "
                         "--sample-tokens 8 --seed 3 --run-dir " + (dir.file("run")));
  Metrics m = read_metrics(dir.file("run/metrics.jsonl"));
  ASSERT_EQ(m.steps.size(), 4u);
  for (size_t i = 0; i < m.steps.size(); ++i) {
    const json& s = m.steps[i];
    EXPECT_EQ(s["step"], int(i) + 1);
    for (const char* key : {"loss", "lr", "grad_norm", "tokens_per_s", "mfu", "ms", "tokens"})
      EXPECT_TRUE(s.contains(key) && s[key].is_number()) << key << " in " << s.dump();
    EXPECT_GT(s["tokens_per_s"].get<double>(), 0);
    EXPECT_GT(s["mfu"].get<double>(), 0);
    EXPECT_EQ(s["tokens"], 4 * 32);
  }
  ASSERT_EQ(m.evals.size(), 2u);
  EXPECT_EQ(m.evals[0]["step"], 2);
  EXPECT_EQ(m.evals[1]["step"], 4);
  EXPECT_TRUE(m.evals[1]["floor"].is_number());
  ASSERT_EQ(m.samples.size(), 2u);
  EXPECT_FALSE(m.samples[0]["sample"].get<std::string>().empty());

  json s = json::parse(read_file(dir.file("run/summary.json")));
  for (const char* key : {"config", "seed", "median_tokens_per_s", "median_mfu", "memory",
                          "final_loss", "eval_loss", "entropy_floor", "params", "peak_gflops"})
    EXPECT_TRUE(s.contains(key)) << key;
  EXPECT_EQ(s["seed"], 3);
  EXPECT_EQ(s["config"]["layers"], 2);
  EXPECT_EQ(s["config"]["batch"], 4);
  EXPECT_EQ(s["final_loss"], m.steps.back()["loss"]);
  EXPECT_EQ(s["eval_loss"], m.evals.back()["eval_loss"]);
  // --peak-gflops 10 unless this tiny model's own rate beat it (then the peak is that rate).
  EXPECT_GE(s["peak_gflops"].get<double>(), 10.0);
  EXPECT_EQ(s["peak_source"].get<std::string>().rfind("flag", 0), 0u) << s.dump();
  for (const char* cat : {"parameters", "gradients", "optimizer", "activations", "total"})
    EXPECT_GT(s["memory"][cat]["peak"].get<int64_t>(), 0) << cat;
  // Optimizer state is two floats per parameter (AdamW m and v).
  EXPECT_GE(s["memory"]["optimizer"]["peak"].get<int64_t>(), 8 * s["params"].get<int64_t>());

  // Human output: progress lines and the floor comparison.
  EXPECT_NE(r.out.find("step     1/4 | loss "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("tok/s | MFU "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(" vs floor "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("sample: "), std::string::npos) << r.out;
}

// A cached peak far below the machine (as if probed under heavy load) must not give MFU
// above 100%: the run's own rate replaces it, in the run and in the cache, and the progress
// lines say which peak they divide by.
TEST(TrainCli, CachedPeakTooLowIsRaisedAndReplaced) {
  TempDir dir("lowpeak");
  const std::string cache = dir.file("peak.json");
  const std::string key = strata::train::peak_cache_key(1);
  const std::string args =
      "train --layers 2 --dim 64 --heads 4 --seq 32 --vocab 256 --data synthetic:200000 "
      "--batch 4 --steps 4 --sample-tokens 0 --threads 1 --run-dir " + (dir.file("run"));
  std::ofstream(cache) << json{{key, 0.001}}.dump();
  RunResult r = run_strata(args, "STRATA_PEAK_CACHE=" + cache + " ", Streams::separate);
  ASSERT_EQ(r.status, 0) << r.err;
  Metrics m = read_metrics(dir.file("run/metrics.jsonl"));
  ASSERT_EQ(m.steps.size(), 4u);
  for (const json& st : m.steps) EXPECT_LE(st["mfu"].get<double>(), 1.0) << st.dump();
  json s = json::parse(read_file(dir.file("run/summary.json")));
  EXPECT_LE(s["median_mfu"].get<double>(), 1.0);
  EXPECT_GT(s["peak_gflops"].get<double>(), 0.001);
  EXPECT_NE(s["peak_source"].get<std::string>().find("raised by step"), std::string::npos);
  EXPECT_NE(r.out.find("(raised at step 1)"), std::string::npos) << r.out;
  json cached = json::parse(read_file(cache));
  // The better of a fresh probe and the run's own rate replaces the low figure.
  EXPECT_GE(cached[key].get<double>(), s["peak_gflops"].get<double>()) << cached.dump();
  EXPECT_NE(r.out.find("a fresh probe reads"), std::string::npos) << r.out;

  // A cached peak the run does not beat is used as is, and named as cached.
  std::ofstream(cache) << json{{key, 1e6}}.dump();
  r = run_strata(args, "STRATA_PEAK_CACHE=" + cache + " ", Streams::separate);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("| MFU 0.0% of 1000000.0 GFLOP/s (cached) |"), std::string::npos) << r.out;
}

TEST(TrainCli, JsonStdoutHasOnlyObjects) {
  RunResult r = train_ok("--batch 4 --steps 3 --sample-tokens 4 --json");
  std::vector<json> lines = json_lines(r.out);  // throws on any non-JSON line
  ASSERT_EQ(lines.size(), 3u + 1 + 1 + 1);       // steps, eval, sample, summary
  EXPECT_EQ(lines[0]["step"], 1);
  EXPECT_TRUE(lines[0].contains("grad_norm"));
  EXPECT_TRUE(lines.back().contains("median_tokens_per_s"));
  EXPECT_TRUE(lines.back().contains("memory"));
}

TEST(TrainCli, SameSeedGivesBitIdenticalLosses) {
  TempDir dir("determinism");
  // Two threads, so the kernels' parallel reductions are part of what must repeat; passive
  // waiting keeps the threads from spinning against each other on a busy test machine.
  const std::string env = "OMP_WAIT_POLICY=passive ";
  const std::string args = "--batch 4 --steps 5 --sample-tokens 8 --threads 2 ";
  train_ok(args + "--seed 11 --run-dir " + (dir.file("a")), env);
  train_ok(args + "--seed 11 --run-dir " + (dir.file("b")), env);
  train_ok(args + "--seed 12 --run-dir " + (dir.file("c")), env);
  Metrics a = read_metrics(dir.file("a/metrics.jsonl")), b = read_metrics(dir.file("b/metrics.jsonl")),
          c = read_metrics(dir.file("c/metrics.jsonl"));
  ASSERT_EQ(a.steps.size(), 5u);
  EXPECT_EQ(losses(a), losses(b));  // exact double equality
  for (size_t i = 0; i < a.steps.size(); ++i)
    EXPECT_EQ(a.steps[i]["grad_norm"], b.steps[i]["grad_norm"]);
  EXPECT_EQ(a.evals.back()["eval_loss"], b.evals.back()["eval_loss"]);
  EXPECT_EQ(a.samples.back()["sample"], b.samples.back()["sample"]);
  EXPECT_NE(losses(a), losses(c));  // the seed matters
}

TEST(TrainCli, AccumulationMatchesOneLargeBatch) {
  TempDir dir("accum");
  const std::string args = "--batch 8 --steps 5 --sample-tokens 0 --seed 5 --lr 3e-3 ";
  train_ok(args + "--micro-batch 8 --run-dir " + (dir.file("whole")));
  train_ok(args + "--micro-batch 2 --run-dir " + (dir.file("split")));
  train_ok(args + "--micro-batch 1 --run-dir " + (dir.file("ones")));
  std::vector<double> whole = losses(read_metrics(dir.file("whole/metrics.jsonl")));
  std::vector<double> split = losses(read_metrics(dir.file("split/metrics.jsonl")));
  std::vector<double> ones = losses(read_metrics(dir.file("ones/metrics.jsonl")));
  ASSERT_EQ(whole.size(), 5u);
  ASSERT_EQ(split.size(), 5u);
  ASSERT_EQ(ones.size(), 5u);
  for (size_t i = 0; i < whole.size(); ++i) {
    EXPECT_NEAR(split[i], whole[i], 1e-4 * whole[i]) << "step " << i + 1;
    EXPECT_NEAR(ones[i], whole[i], 1e-4 * whole[i]) << "step " << i + 1;
  }
  EXPECT_LT(whole.back(), whole.front());  // the curve moves, so equality means something
  json s = json::parse(read_file(dir.file("split/summary.json")));
  EXPECT_EQ(s["accum"], 4);
}

TEST(TrainCli, LearnsTheSyntheticChain) {
  TempDir dir("learn");
  train_ok("--batch 8 --steps 60 --lr 3e-3 --sample-tokens 0 --eval-batches 4 --run-dir " +
           (dir.file("run")));
  json s = json::parse(read_file(dir.file("run/summary.json")));
  const double start = std::log(256.0);
  // Far below the uniform guess after 60 small steps, and never below the true entropy by
  // more than the eval's sampling noise.
  EXPECT_LT(s["eval_loss"].get<double>(), start - 1.5) << s.dump();
  EXPECT_GT(s["eval_loss"].get<double>(), s["entropy_floor"].get<double>() - 0.1);
}

TEST(TrainCli, TrainsOnTextAndTokenFiles) {
  TempDir dir("files_data");
  {
    std::ofstream txt(dir.file("corpus.txt"));
    for (int i = 0; i < 400; ++i) txt << "the quick brown fox jumps over the lazy dog " << i << "\n";
  }
  RunResult r = train_ok("--batch 4 --steps 2 --sample-tokens 8 --data " + (dir.file("corpus.txt")));
  EXPECT_NE(r.out.find("sample: "), std::string::npos);
  EXPECT_EQ(r.out.find(" vs floor "), std::string::npos);  // no known floor for text

  std::vector<uint16_t> tokens(20000);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = uint16_t((i * 7) % 251);
  write_bin_file(dir.file("tokens.bin"), tokens);
  train_ok("--batch 4 --steps 2 --sample-tokens 0 --data " + (dir.file("tokens.bin")));
}

// Flags that act only in another layout are accepted and said once, by the launcher (not by
// every rank): --no-sp without tensor parallelism, --prefetch below ZeRO 3.
TEST(TrainCli, FlagsOfAnotherLayoutAreSaidOnce) {
  auto notes = [](const std::string& flags, const std::string& what) {
    RunResult r = run_strata(kSmall + "--batch 4 --steps 1 --sample-tokens 0 --eval-every 0 " + flags, "",
                             Streams::separate);
    EXPECT_EQ(r.status, 0) << flags << "\n" << r.err;
    int n = 0;
    for (size_t p = r.err.find(what); p != std::string::npos; p = r.err.find(what, p + 1)) ++n;
    return n;
  };
  EXPECT_EQ(notes("--no-sp", "note: --no-sp does nothing without --tp"), 1);
  EXPECT_EQ(notes("--nproc 2 --no-sp", "note: --no-sp does nothing without --tp"), 1);
  EXPECT_EQ(notes("--nproc 2 --tp 2 --no-sp", "note: --no-sp"), 0);
  EXPECT_EQ(notes("--nproc 2 --zero 1 --prefetch 2", "note: --prefetch does nothing below --zero 3"), 1);
  EXPECT_EQ(notes("--nproc 2 --zero 3 --prefetch 2", "note: --prefetch"), 0);
}
