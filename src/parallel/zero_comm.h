// The collectives of the ZeRO engine, on ranges of the flat parameter space (layout.h).
// Kept apart from the engine's arithmetic so each stage's communication reads in one place.
//
// Costs (α latency, β seconds per byte, n = bytes of the range, N ranks), ring-equivalent:
//   reduce_range, all-reduce (stage 0):        2(N-1)/N · n β + O(N) α
//   reduce_range, reduce-scatter (stages 1-3):  (N-1)/N · n β + O(N) α
//   gather_range, all-gather (stage 3 / params): (N-1)/N · n β + O(N) α
// so stages 1-2 move the same bytes per step as stage 0 (reduce-scatter + all-gather) and
// stage 3 adds one all-gather per unit use (1.5x stage 0), as in the ZeRO paper.
//
// With tracing on, each call leaves an "issue" marker (category "comm_issue", zero length,
// args: seq, what) on the calling thread; the communicator records the span from start to
// finish on its communication thread (category "comm", "<op> <group> #<seq>").
#pragma once
#include <string>

#include "comm/process_group.h"
#include "parallel/layout.h"

namespace strata::parallel {

// In place on `data` (r.size() elements of dtype, the range r of the flat space):
// scatter = false: all-reduce (sum) of the whole range;
// scatter = true: reduce-scatter (sum); afterwards data + layout.own_offset_in(r) holds this
// rank's part of r summed over ranks (the rest is left unspecified).
comm::WorkPtr reduce_range_async(comm::ProcessGroup& pg, const ShardLayout& layout, void* data,
                                 Range r, DType dtype, bool scatter, const std::string& what);

// dst (r.size() elements) receives the range r from its owners; own_part points at this
// rank's part of r (layout.own_part(r).size() elements). In place when
// own_part == dst + own_offset_in(r).
comm::WorkPtr gather_range_async(comm::ProcessGroup& pg, const ShardLayout& layout,
                                 const void* own_part, void* dst, Range r, DType dtype,
                                 const std::string& what);

// Sum of one double over the group (gradient norms, token counts).
double sum_over_ranks(comm::ProcessGroup& pg, double x);

}  // namespace strata::parallel
