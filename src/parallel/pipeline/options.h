// Pipeline flags of `strata train` (--schedule, --micro-batches, --virtual-stages, --pp-split;
// --pp itself is a mesh degree, parallel/mesh.h).
#pragma once
#include <string>
#include <vector>

#include "parallel/pipeline/schedule.h"

namespace strata::parallel::pipeline {

struct PipelineOptions {
  ScheduleKind schedule = ScheduleKind::one_f_one_b;
  int micro = 0;           // micro-batches per step; 0: the accumulation count
  int virt = 1;            // model chunks per stage (interleaved)
  std::vector<int> split;  // layers per (virtual) stage; empty: balanced by estimated cost
};

// "3,5" -> {3, 5}; throws naming --pp-split.
std::vector<int> parse_split(const std::string& text);

}  // namespace strata::parallel::pipeline
