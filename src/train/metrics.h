// Where a run's records go. Every record is one JSON object: a training step (step, loss, lr,
// grad_norm, tokens_per_s, mfu, ms, ...), an eval (step, eval_loss[, floor]), a sample
// (step, sample) or the final summary. Records are appended to <run_dir>/metrics.jsonl
// (summary records go to <run_dir>/summary.json instead) and shown on stdout, either as the
// JSON object itself (--json) or as a human line. Only rank 0 creates a writer.
#pragma once
#include <cstdio>
#include <cstdint>
#include <fstream>
#include <string>

#include "core/error.h"
#include "core/files.h"
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
  // summary.json exists only once a run has ended: a run about to train removes the one an
  // earlier attempt wrote (it no longer describes the run), and a resume at the last step
  // asks ended() whether that attempt ended: a readable summary.json of `steps` steps.
  void discard_summary();
  bool ended(int64_t steps) const;
  // Human-only text (banners, samples in text mode); suppressed under --json.
  void note(const std::string& human);
  // True when human lines go to a terminal: step records then show as one progress line
  // that `progress` redraws in place (other lines print above it); a pipe or file gets one
  // line per record, as `record` prints them.
  bool live() const { return live_; }
  // A step record: appended to metrics.jsonl like `record`; on a terminal `human` replaces
  // the progress line (at most ~10 redraws a second, and always the first and last).
  void progress(const nlohmann::json& j, const std::string& human, bool last = false);

  const std::string& run_dir() const { return run_dir_; }

 private:
  void print(const nlohmann::json& j, const std::string& human);
  std::string run_dir_;
  bool json_;
  std::FILE* out_;
  void write_line(const std::string& text);  // above the live progress line, if any
  LineLog metrics_;
  bool live_ = false;
  std::string progress_;        // the live line shown now ("" when none)
  int64_t progress_drawn_ns_ = 0;
};

}  // namespace strata::train
