// Context parallelism in a run's records: per step (metrics.jsonl, rank 0) the bytes the cp
// attention of this rank sent in the step's forward and backward passes next to the formula
// of cost/comm.h (what `strata plan --local --cp C` prints), and the attention's
// arithmetic time; per run (summary.json) every rank's attention time, the balance zigzag
// chunking is for.
#pragma once
#include <cstdint>

#include "comm/process_group.h"
#include "model/context/layout.h"
#include "model/stage.h"
#include "nlohmann/json.hpp"
#include "train/summary.h"

namespace strata::train {

struct CpMark {
  int64_t bytes = 0, compute_ns = 0;
};

// The model's cp counters now ({} without context parallelism).
CpMark cp_mark(const model::StageModel& m);

// Keys of one step's metrics record: cp_bytes (measured since `begin`), cp_bytes_formula for
// `sequences` sequences of T tokens, cp_attention_ms. Empty without context parallelism.
nlohmann::json cp_step_metrics(const model::StageModel& m, const CpMark& begin, int64_t sequences, int T);

// Activation bytes per rank of `m` for micro-batches of b sequences of T tokens: its
// activation buffers and, under context parallelism, the cp attention's (cost/activations.h).
int64_t activation_bytes_per_rank(const model::StageModel& m, int b, int T);
// --max-activation-mb X (> 0): throws one line naming the flag, the sequence, cp and the
// bytes when activation_bytes_per_rank exceeds X MiB.
void check_activation_budget(double max_mb, const model::StageModel& m, int b, int T);
// The same refusal before any rank starts, from the formulas (cost/activations.h) for the
// largest tp rank of a tp x cp layout.
void check_activation_budget(double max_mb, const model::GPTConfig& g, int tp, bool sp, int cp,
                             model::CpMode mode, int b, int T, bool bf16);

// summary.json's "context_parallel" section and its line (train/summary.h), collective over
// `group`: every rank's attention time so far and max / mean over the group (the world, or
// a pipeline stage's cp group). Adds nothing without context parallelism.
void add_cp_section(SummaryBuilder& summary, const model::StageModel& m, comm::ProcessGroup& group);

}  // namespace strata::train
