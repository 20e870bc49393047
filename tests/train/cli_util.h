// What the training tests read from runs of the `strata` binary (support/run.h runs it):
// metrics.jsonl records, token files to corrupt, checkpoint hashes.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <filesystem>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"
#include "support/run.h"
#include "support/temp_dir.h"

namespace strata::test {

// The JSON objects of a .jsonl file (or stdout of --json), one per line.
inline std::vector<nlohmann::json> json_lines(const std::string& text) {
  std::vector<nlohmann::json> out;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t nl = text.find('\n', pos);
    if (nl == std::string::npos) nl = text.size();
    if (nl > pos) out.push_back(nlohmann::json::parse(text.substr(pos, nl - pos)));
    pos = nl + 1;
  }
  return out;
}

// The step records (the lines with a loss) of a metrics.jsonl file.
inline std::vector<nlohmann::json> step_records(const std::string& path) {
  std::vector<nlohmann::json> out;
  for (nlohmann::json& j : json_lines(read_file(path)))
    if (j.contains("loss")) out.push_back(j);
  return out;
}

// (loss, tokens) of each step record in --json output (lines with both).
inline std::vector<std::pair<double, int64_t>> loss_and_tokens(const std::string& out) {
  std::vector<std::pair<double, int64_t>> r;
  for (const nlohmann::json& j : json_lines(out))
    if (j.contains("loss") && j.contains("tokens"))
      r.push_back({j["loss"].get<double>(), j["tokens"].get<int64_t>()});
  return r;
}

// A text file of `chars` characters (7 letters, a newline every 41) drawn by an LCG from
// `seed`: a corpus small enough that an epoch ends mid-batch within a few steps.
inline void write_small_text(const std::string& path, uint32_t seed, int chars = 1100) {
  std::string text;
  uint32_t x = seed;
  for (int i = 0; i < chars; ++i) {
    x = x * 1103515245u + 12345u;
    text += char('a' + (x >> 16) % 7);
    if (i % 41 == 40) text += '\n';
  }
  std::ofstream(path) << text;
}

// The step losses of `out` (--json lines) and the fewest tokens any step trained on.
inline std::pair<std::vector<double>, int64_t> losses_and_fewest_tokens(const std::string& out) {
  std::pair<std::vector<double>, int64_t> r{{}, INT64_MAX};
  for (const auto& [loss, tokens] : loss_and_tokens(out)) {
    r.first.push_back(loss);
    r.second = std::min(r.second, tokens);
  }
  return r;
}

// max |a[i] - b[i]| of two loss curves, which must have the same length.
inline double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b) {
  EXPECT_EQ(a.size(), b.size());
  double d = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) d = std::max(d, std::abs(a[i] - b[i]));
  return d;
}

// An llm.c version-1 token file with a header we may corrupt.
inline void write_bin_file(const std::string& path, const std::vector<uint16_t>& tokens,
                           int32_t magic = 20240520, int32_t version = 1, int64_t count = -1) {
  std::vector<int32_t> header(256, 0);
  header[0] = magic;
  header[1] = version;
  header[2] = int32_t(count >= 0 ? count : int64_t(tokens.size()));
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(header.data()), header.size() * sizeof(int32_t));
  f.write(reinterpret_cast<const char*>(tokens.data()), tokens.size() * sizeof(uint16_t));
}

// Every state's block hashes in a checkpoint, in manifest order: equal iff the bytes are.
inline std::vector<std::string> state_hashes(const std::string& step_dir) {
  std::ifstream in(step_dir + "/manifest.json");
  if (!in) return {"missing " + step_dir};
  nlohmann::json m = nlohmann::json::parse(in);
  std::vector<std::string> out;
  for (const nlohmann::json& shard : m["shards"])
    for (const nlohmann::json& p : shard["pieces"]) out.push_back(p.dump());
  return out;
}

// The step losses of a run directory's metrics.jsonl (the lines with a loss), in order.
inline std::vector<double> run_dir_losses(const std::string& run_dir) {
  std::vector<double> out;
  for (const nlohmann::json& j : json_lines(read_file(run_dir + "/metrics.jsonl")))
    if (j.contains("loss")) out.push_back(j["loss"].get<double>());
  return out;
}

// Flight-recorder dumps of a killed job's survivors go to the test's directory.
inline std::string dump_env(const TempDir& dir) { return "STRATA_DUMP_DIR=" + dir.str() + " "; }

// The fault-tolerance tests' run: 8 steps of a 1-layer model (dim 32, seq 16, batch 4) into
// run_dir, then `extra`.
inline std::string small_fault_run(const std::string& run_dir, const std::string& extra) {
  return "train --layers 1 --dim 32 --heads 2 --max-seq 16 --seq 16 --vocab 256 --batch 4 "
         "--steps 8 --warmup 2 --lr 1e-2 --threads 1 --sample-tokens 0 --eval-every 0 "
         "--eval-batches 1 --peak-gflops 1 --timeout 20 --run-dir " +
         run_dir + " " + extra;
}

// Each `strata ARGS` of base + cases[i].first fails with cases[i].second in one line of stderr.
// With a run_dir (passed as --run-dir), the refusal came before any rank trained: it holds no
// metrics.jsonl.
inline void expect_one_line_errors(const std::string& base,
                                   const std::vector<std::pair<std::string, std::string>>& cases,
                                   const std::string& run_dir = "") {
  for (const auto& [flags, want] : cases) {
    const RunResult r = run_strata(base + flags + (run_dir.empty() ? "" : " --run-dir " + run_dir), "",
                                   Streams::separate);
    EXPECT_NE(r.status, 0) << flags;
    EXPECT_NE(r.err.find(want), std::string::npos) << flags << ": " << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << flags << ": " << r.err;
    if (!run_dir.empty()) {
      EXPECT_FALSE(std::filesystem::exists(run_dir + "/metrics.jsonl")) << flags;
    }
  }
}

// One `strata train` run in a fresh run directory: its step records (those with a loss),
// their losses and summary.json; cli holds the exit status and output.
struct TrainRun {
  std::vector<double> losses;
  std::vector<nlohmann::json> records;
  nlohmann::json summary;
  RunResult cli;
};
inline TrainRun train_run(const std::string& args, const std::string& tag) {
  TempDir dir(tag);
  TrainRun r;
  r.cli = run_strata(args + " --run-dir " + dir.str(), "", Streams::separate);
  if (r.cli.status != 0) return r;
  for (const nlohmann::json& rec : json_lines(read_file(dir.file("metrics.jsonl"))))
    if (rec.contains("loss")) {
      r.losses.push_back(rec["loss"].get<double>());
      r.records.push_back(rec);
    }
  r.summary = nlohmann::json::parse(read_file(dir.file("summary.json")));
  return r;
}

// The gradient norm of every step record of a run.
inline std::vector<double> grad_norms(const TrainRun& r) {
  std::vector<double> out;
  for (const nlohmann::json& rec : r.records) out.push_back(rec["grad_norm"].get<double>());
  return out;
}

}  // namespace strata::test
