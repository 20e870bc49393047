// One run directory as the report reads it: metrics.jsonl (step, eval, sample, checkpoint,
// restart records; see docs/training.md; RLHF iteration records, docs/rlhf.md), summary.json, scaling.json (a scaling study, see
// scaling.h) and flight-recorder dumps (flight-rank<R>.json: faults and hangs).
//
// Reading never throws for damaged content: what cannot be read is listed in `problems`
// ("metrics.jsonl: the last line (812 bytes) is cut off", "no summary.json: the run did not
// finish") and the rest is used. Only a directory with nothing readable at all is an error.
#pragma once
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"

namespace strata::report {

// A missing figure in the report's series (a step without an eval, a rank without a time).
inline constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// A number that is absent from a record is NaN.
struct StepRow {
  int64_t step = 0;
  double loss = 0, tokens_per_s = 0, mfu = 0, ms = 0, tokens = 0;
  // Where the step went (rank 0; NaN when the run predates these fields).
  double data_ms = 0, compute_ms = 0, optimizer_ms = 0, comm_wait_ms = 0;
  double straggler_wait_ms = 0;  // only on steps that ran a straggler check
  double outer_ms = 0, outer_wait_ms = 0;  // replica groups: the step's outer sync, and its wait
  // MoE blocks (empty for a dense model): each block's max/mean of the tokens its experts
  // served, and the spread (max - min) of its balancing bias (NaN without one).
  std::vector<double> moe_max_over_mean, moe_bias_spread;
};

struct EvalRow {
  int64_t step = 0;
  double loss = 0, floor = 0;  // floor NaN when the data's entropy is unknown
};

// An RLHF run's iteration (rlhf ppo|grpo|rloo) or evaluation (rlhf dpo: `iteration` is the
// step): the gold score, the proxy reward and KL where there are any, and where the
// iteration's time went (NaN for DPO, which generates nothing to train on).
struct RlRow {
  int64_t iteration = 0;
  double gold = 0, reward = 0, kl = 0;
  double generate_s = 0, score_s = 0, train_s = 0;
};

struct Event {
  int64_t step = 0;
  std::string kind;  // "checkpoint", "checkpoint failed", "restart", "straggler", "fault",
                     // "skipped step"
  std::string text;  // one line for people
  double value = 0;  // checkpoint: stall ms; restart: steps lost; straggler: % over median
};

struct RunData {
  std::string dir;    // as given
  std::string label;  // short name for legends (the directory's last component)
  std::vector<StepRow> steps;
  std::vector<EvalRow> evals;
  std::vector<RlRow> rl;
  std::vector<Event> events;
  nlohmann::json summary;   // null when absent
  nlohmann::json scaling;   // null unless the directory holds a scaling study
  std::vector<std::string> problems;
  int64_t unreadable_lines = 0;

  // The architecture for comparisons ("layers 2, dim 64, heads 4, vocab 256, seq 32"), or
  // "" when there is no summary to say.
  std::string model_text() const;
  double entropy_floor() const;  // NaN when unknown
};

// Throws Error only when `dir` is missing or holds none of metrics.jsonl, summary.json,
// scaling.json.
RunData load_run(const std::string& dir);

// The number at j[key], or NaN when absent or not a number.
double number(const nlohmann::json& j, const char* key);

}  // namespace strata::report
