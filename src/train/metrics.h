// Where a run's records go. Every record is one JSON object: a training step (step, loss, lr,
// grad_norm, tokens_per_s, mfu, ms, ...), an eval (step, eval_loss[, floor]), a sample
// (step, sample) or the final summary. Records are appended to <run_dir>/metrics.jsonl
// (summary records go to <run_dir>/summary.json instead) and shown on stdout, either as the
// JSON object itself (--json) or as a human line. Only rank 0 creates a writer.
#pragma once
#include <cstdio>
#include <fstream>
#include <string>

#include "nlohmann/json_fwd.hpp"

namespace strata::train {

class MetricsWriter {
 public:
  // run_dir empty: nothing written to disk. Creates run_dir and opens metrics.jsonl (truncated,
  // or appended to when a run resumes), throwing an Error naming the directory if that fails,
  // before any training starts.
  MetricsWriter(const std::string& run_dir, bool json_stdout, std::FILE* out = stdout,
                bool append = false);

  // A per-step, eval or sample record: appended to metrics.jsonl (flushed, so a crashed run
  // keeps its history), then printed as JSON or as `human`.
  void record(const nlohmann::json& j, const std::string& human);
  // The summary: written to summary.json, then printed as JSON or as `human`.
  void summary(const nlohmann::json& j, const std::string& human);
  // Human-only text (banners, samples in text mode); suppressed under --json.
  void note(const std::string& human);

  const std::string& run_dir() const { return run_dir_; }

 private:
  void print(const nlohmann::json& j, const std::string& human);
  std::string run_dir_;
  bool json_;
  std::FILE* out_;
  std::ofstream metrics_;
};

// Human formatting helpers shared by the progress lines.
std::string fmt(const char* format, ...) __attribute__((format(printf, 1, 2)));

}  // namespace strata::train
