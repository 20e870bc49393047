// What each layer type of the GPT costs at a run's shapes, and the split of the layers into
// pipeline stages that balances it (model/stage.h builds the stages).
//
// Layer types: the embedding (token and position lookup and its gradient), one transformer
// block, and the head (final LayerNorm, tied logits, cross-entropy). Each has a forward time
// f, a backward time b and, under zero-bubble's split backward, a weight-gradient time w (b
// is then the input gradient only), in seconds for one micro-batch of B sequences of T tokens
// (relative units for the estimate).
//
//   measure_layer_costs   times the passes on a three-chunk stage (embedding + block, block,
//                         block + head) built at the run's shapes, precision and split: the
//                         block's times directly, the embedding's and the head's as the
//                         difference to a block (clamped at 0); each the fastest of `reps`
//                         runs after one warm-up. One stage of 3 blocks, so it costs about
//                         reps + 1 forward and backward passes of 3 blocks. With one compute
//                         thread the passes are timed on the thread's CPU clock (a shared,
//                         oversubscribed machine then still measures the cost on one core),
//                         else on the wall clock.
//   estimate_layer_costs  flops per token: a block 24·C² + 4·T·C forward (cost/flops.h), the
//                         head 2·C·Vp, the embedding C; backward twice the forward (split:
//                         b = w = forward).
//                         Deterministic: what tests and `STRATA_PP_COSTS=estimate` use.
//
// balance_layers gives each virtual stage a contiguous run of at least one block, minimising
// the most expensive virtual stage (its blocks, plus the embedding on the first, plus the head
// on the last); among equal maxima the one with the smallest sum of squared stage costs.
#pragma once
#include <vector>

#include "core/dtype.h"
#include "model/gpt.h"
#include "model/stage.h"

namespace strata::model {

struct PassCost {
  double f = 0, b = 0, w = 0;
  double total() const { return f + b + w; }
};

struct LayerCosts {
  PassCost embed, block, head;
  bool measured = false;  // seconds on this machine, else relative flops
};

LayerCosts measure_layer_costs(const GPTConfig& cfg, int batch, int seq, DType compute,
                               bool split_backward, int reps = 3);
LayerCosts estimate_layer_costs(const GPTConfig& cfg, int seq, bool split_backward);

// Blocks per virtual stage (`virtual_stages` sizes summing to `layers`, each >= 1).
std::vector<int> balance_layers(const LayerCosts& c, int layers, int virtual_stages);

// Virtual stage v's cost: its blocks, plus the embedding (first) and the head (last).
PassCost chunk_cost(const LayerCosts& c, const StageChunk& ch);

// split_layers with the default split balancing `costs` (--pp-split, when given, wins).
std::vector<StageChunk> split_layers(const GPTConfig& cfg, int stages, int virt,
                                     const std::vector<int>& split, const LayerCosts& costs);

}  // namespace strata::model
