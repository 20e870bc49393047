// Layout search: every (tp, pp, dp, cp, ep, ZeRO stage, micro-batch, recomputation) that the
// setup allows and the user did not fix, ranked by estimated step time (equivalently MFU,
// since every layout does the same model FLOPs), with tp inside a node.
// Space: tp over divisors of the node size, pp over divisors of N/tp up to L, cp over
// divisors of N/(tp·pp) up to 64 that divide the sequence, dp what remains, ep over divisors
// of gcd(E, dp·cp), ZeRO 0..3, micro-batch over powers of two up to 64 that divide the
// per-replica batch, recomputation none/selective/full.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "plan/estimate.h"

namespace strata::plan {

struct FixedLayout {
  std::optional<int> tp, pp, dp, cp, ep, zero, micro_batch;
  std::optional<Recompute> recompute;
};

// Throws a one-line Error when the fixed degrees cannot work on this setup at all (they do
// not multiply to the GPU count, heads not divisible by tp, ...).
void check_fixed(const TrainSetup& s, const FixedLayout& f);

struct SearchResult {
  std::vector<Estimate> ranked;          // layouts that fit, fastest first
  std::vector<Estimate> faster_too_big;  // up to 3 layouts faster than the best that do not fit
  std::optional<Estimate> least_memory;  // the valid layout needing the least memory
  int64_t considered = 0, invalid = 0, too_big = 0, fit = 0;
  std::string sample_problem;  // why some layouts were invalid
};

SearchResult search_layouts(const TrainSetup& s, const FixedLayout& f, size_t keep = 200);

// Lines explaining the top layout and why the next `runners_up` distinct ones lose.
std::vector<std::string> explain(const SearchResult& r, const TrainSetup& s, int runners_up = 4);

// The smallest GPU count above s.gpus where some layout fits in memory, keeping the fixed
// degrees except dp (which follows from the count). Node-sized steps above one node.
struct ClusterFit {
  bool found = false;
  int64_t gpus = 0;
  Layout layout;
  double bytes = 0;       // memory per GPU of that layout
  int64_t step_gpus = 1;  // granularity of the scan (coarser for very large ranges)
};
ClusterFit smallest_fitting_cluster(const TrainSetup& s, const FixedLayout& f,
                                    int64_t max_gpus = int64_t(1) << 20);

// One-line description of a time component, e.g. "pipeline bubble".
std::string fmt_bytes_gib(double bytes);

}  // namespace strata::plan
