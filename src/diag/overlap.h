// How much communication hides behind computation, per training step, from Chrome traces.
//
// Convention (what the trainer and engines record through core/trace.h):
//   - a span with cat "step" named "step N" covers the whole of step N on a rank (from the
//     start of its data loading to the end of its optimizer update);
//   - spans with cat "compute" cover computation ("forward L3", "backward L3", "optimizer"),
//     and exclude time spent waiting for communication;
//   - spans with cat "comm" cover communication ("allreduce bucket 2" on the comm thread,
//     or a wait on the compute thread).
// Per rank and step, with C = union of comm spans and K = union of compute spans, both
// clipped to the step's span:  comm = |C|,  hidden = |C ∩ K|,  exposed = |C \ K| = comm -
// hidden (communication nothing computed through: the time it adds to the step), and the
// hidden share = hidden / comm. A rank without step spans is one window over its whole trace.
// Cost: O(s log s) per rank for s spans.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "diag/trace_file.h"
#include "nlohmann/json_fwd.hpp"

namespace strata::diag {

struct RankStepOverlap {
  int rank = 0;
  int64_t step = -1;  // -1: the whole trace (no step spans)
  int64_t step_ns = 0, compute_ns = 0, comm_ns = 0, hidden_ns = 0, exposed_ns = 0;
};

// One step across ranks: means over ranks, the share from sums, and the worst rank.
struct StepOverlap {
  int64_t step = -1;
  int ranks = 0;
  double step_ms = 0, compute_ms = 0, comm_ms = 0, exposed_ms = 0, hidden_ms = 0;
  double hidden_share = 0;  // sum hidden / sum comm; 0 when there is no communication
  int worst_rank = -1;      // most exposed communication
  double worst_exposed_ms = 0;
};

struct OverlapReport {
  std::vector<RankStepOverlap> per_rank;  // by step, then rank
  std::vector<StepOverlap> steps;         // by step
  StepOverlap total;                      // every step of every rank (step = -1)
  std::vector<std::string> notes;
};

// Measures one window [start_ns, end_ns) of one rank's spans.
RankStepOverlap measure_window(const std::vector<Span>& spans, int64_t start_ns, int64_t end_ns);

// Pure: spans of each rank -> per-step report.
OverlapReport compute_overlap(const std::map<int, std::vector<Span>>& spans_by_rank);

std::string format_overlap(const OverlapReport& r);  // a table, ends with a newline
nlohmann::json overlap_json(const OverlapReport& r);

}  // namespace strata::diag
