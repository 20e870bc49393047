// Straggler detection for the training loop. Every K steps each rank contributes the
// compute time it spent over those steps (the trainer gathers them with the communicator);
// a rank whose time exceeds the median of all ranks by more than X% is a straggler.
//
// Terms: compute time = time in forward, backward and optimizer, excluding time blocked in
// communication (what a slow GPU/CPU, a noisy neighbour or thermal throttling inflates).
// The median, not the mean, so one slow rank cannot hide itself by raising the bar. Cost:
// O(n log n) in the number of ranks, once every K steps.
//
// Log line (one per check that finds stragglers):
//   stragglers at step 200: rank 3 compute 512.3 ms (+48.0% over median 346.1 ms)[; rank 5 ...]
// metrics.jsonl fields (on the record of the step that ran the check):
//   "compute_median_ms": 346.1, "stragglers": [{"rank": 3, "compute_ms": 512.3, "over_median_pct": 48.0}]
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "nlohmann/json_fwd.hpp"

namespace strata::diag {

struct StragglerConfig {
  int every_steps = 50;          // K: check every K steps (0 disables)
  double threshold_pct = 20.0;   // X: name ranks slower than median by more than this
};

struct Straggler {
  int rank;
  double compute_s;
  double over_median_pct;  // 100 * (compute - median) / median
};

struct StragglerCheck {
  int64_t step = 0;
  double median_s = 0;
  std::vector<Straggler> slow;  // slowest first
};

// Pure: compute_s[r] is rank r's compute time over the window. Throws Error for an empty
// list, negative or non-finite times, or a negative threshold.
StragglerCheck find_stragglers(const std::vector<double>& compute_s, double threshold_pct, int64_t step = 0);

// True when `step` (counted from 1) ends a window of `every_steps`.
bool straggler_check_due(int64_t step, int every_steps);

// "stragglers at step 200: rank 3 compute 512.3 ms (+48.0% over median 346.1 ms)"; "" when none.
std::string straggler_log_line(const StragglerCheck& c);
// Adds "compute_median_ms" and "stragglers" (possibly empty) to a metrics.jsonl record.
void add_straggler_metrics(const StragglerCheck& c, nlohmann::json& record);

// Sums a rank's compute seconds over the current window.
class ComputeWindow {
 public:
  void add(double seconds) { sum_ += seconds; }
  double take() {
    double s = sum_;
    sum_ = 0;
    return s;
  }
  double current() const { return sum_; }

 private:
  double sum_ = 0;
};

}  // namespace strata::diag
