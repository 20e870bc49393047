// How much communication was hidden behind computation, read from recorded trace spans.
//
// Terms: a communication span is an interval during which a collective was running on the
// communication thread (its started..finished time); a compute span is an interval of
// forward/backward/optimizer work on the compute thread. Both sets may overlap among
// themselves, so each is first merged into a union of disjoint intervals. The hidden time
// is |U_comm ∩ U_compute|, the exposed time |U_comm| - hidden, and the hidden share
// hidden / |U_comm| (1 when there was no communication). Cost: O(n log n) in the number of
// spans (two sorts and one merge).
//
// A pure function of the span list, so the trainer's summary, the diagnostics tools and the
// tests share it: it knows nothing of threads or ranks beyond what the filter selects.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/trace.h"

namespace strata::parallel {

struct Interval {
  int64_t begin_ns = 0, end_ns = 0;
};

struct OverlapStats {
  int64_t comm_ns = 0;     // union of communication intervals
  int64_t hidden_ns = 0;   // of which overlapped by compute
  int64_t compute_ns = 0;  // union of compute intervals
  int comm_spans = 0;
  int64_t exposed_ns() const { return comm_ns - hidden_ns; }
  double hidden_share() const { return comm_ns > 0 ? double(hidden_ns) / double(comm_ns) : 1.0; }
};

// Merges overlapping or touching intervals; returns them sorted and disjoint.
std::vector<Interval> merge_intervals(std::vector<Interval> v);
// Total length of the intersection of two sorted disjoint interval lists.
int64_t intersection_ns(const std::vector<Interval>& a, const std::vector<Interval>& b);

OverlapStats overlap_intervals(const std::vector<Interval>& comm,
                               const std::vector<Interval>& compute);

struct OverlapFilter {
  std::string comm_cat = "comm";  // category of communication spans
  // Communication spans whose name starts with one of these (the communicator names spans
  // "<op> <group> #<seq>", e.g. "allreduce world #17"); empty = every span of comm_cat.
  std::vector<std::string> comm_name_prefixes;
  std::vector<std::string> compute_cats = {"compute"};
};

// Gradient communication of the data-parallel engine: all-reduce (stage 0) and
// reduce-scatter (stages 1-3) spans.
OverlapFilter gradient_comm_filter();

// Selects spans of `events` by the filter and applies overlap_intervals().
OverlapStats overlap(const std::vector<TraceEvent>& events, const OverlapFilter& filter = {});

}  // namespace strata::parallel
