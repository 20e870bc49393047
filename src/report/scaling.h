// `strata bench scaling`: trains the same model at several rank counts and explains where
// the speedup goes.
//
// Terms, per point (N ranks, means over its steps after the first, rank 0's records):
//   step        ms per step + checkpoint stall per step
//   parts       compute (forward + backward), optimizer, data wait, exposed comm (dp: time
//               blocked in communication less the straggler wait), pipeline bubble (0: no
//               pipeline yet), straggler wait (how much longer the slowest rank computed,
//               from a straggler check every step), checkpoint stall, other (the rest);
//               a test checks that other stays within 5% of the step
//   tokens/s    real tokens / (step time), summed over the steps
//   speedup     tokens/s over the first point's, times the first point's N (so linear = N)
//   efficiency  speedup / N
//   ideal       strong scaling (global batch fixed): first point's step x N0 / N; weak
//               scaling (per-rank batch fixed, global = batch x N): the first point's step
//   contention  compute beyond the ideal compute: on this host, ranks beyond cores / threads
//               share cores (oversubscribed) and each computes slower; shown apart
//   overhead    the study's own share of the point's wall time: starting and stopping the
//               point's processes and reading its files (wall time outside the trainer); the
//               trainer's time outside steps (initialisation, the final eval, the per-step
//               straggler check) is reported apart as outside_steps_s
//   predicted   the planner's step time for the same layout on the calibrated host
//               (plan --gpu local), with no communication hidden behind compute while every
//               core computes (shm collectives are CPU work), and the whole step stretched
//               by ranks x threads / cores when oversubscribed; error = predicted / measured - 1
// Without --data the points train on the synthetic corpus, generated with only the tokens
// they read (twice over): generating the default 8M tokens would take longer than a short
// point's training.
// With --repeat R the points run in R interleaved rounds (1,2,3,4,1,2,3,4,...) and each keeps
// the run of median step time: load from other work on a shared host hits every point alike.
// Output: a table on stdout and <out>/scaling.json (read by `strata report`), each point's
// run in <out>/n<N>.
#pragma once
#include <string>
#include <vector>

#include "nlohmann/json.hpp"

namespace strata::report {

struct ScalingOptions {
  std::vector<int> nproc = {1, 2, 3, 4};
  bool weak = false;                     // else strong
  std::string out = "runs/scaling";
  int threads = 1;                       // per rank
  int repeat = 1;                        // runs per point, interleaved in rounds; median kept
  std::string gpu = "local";             // planner hardware; "" = no prediction
  std::vector<std::string> train_args;   // passed to every `strata train` (minus what the study sets)
};

struct ScalingResult {
  nlohmann::json study;  // what scaling.json holds
  std::string table;     // for people
};

// Parses "1,2,3,4"; throws naming --nproc for anything else.
std::vector<int> parse_nproc_list(const std::string& s);

ScalingResult run_scaling(const ScalingOptions& o);

// The decomposition of one finished point's run directory (exposed for tests):
// {"step_ms", "tokens_per_s", "parts_ms": {name: ms}, "compute_ms", "steps"}.
nlohmann::json decompose_point(const std::string& run_dir);

}  // namespace strata::report
