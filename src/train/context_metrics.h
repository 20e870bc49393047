// Context parallelism in a run's records: per step (metrics.jsonl, rank 0) the bytes the cp
// attention of this rank sent in the step's forward and backward passes next to the formula
// of model/context/cp_cost.h (what `strata plan --local --cp C` prints), and the attention's
// arithmetic time; per run (summary.json) every rank's attention time, the balance zigzag
// chunking is for.
#pragma once
#include <cstdint>

#include "comm/process_group.h"
#include "model/gpt.h"
#include "nlohmann/json.hpp"

namespace strata::train {

struct CpMark {
  int64_t bytes = 0, compute_ns = 0;
};

// The model's cp counters now ({} without context parallelism).
CpMark cp_mark(const model::GPT& m);

// Keys of one step's metrics record: cp_bytes (measured since `begin`), cp_bytes_formula for
// `sequences` sequences of T tokens, cp_attention_ms. Empty without context parallelism.
nlohmann::json cp_step_metrics(const model::GPT& m, const CpMark& begin, int64_t sequences, int T);

// Collective over `world`: every rank's attention time so far, and max / mean.
nlohmann::json cp_summary(const model::GPT& m, comm::ProcessGroup& world);

}  // namespace strata::train
