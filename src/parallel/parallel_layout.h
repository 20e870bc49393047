// One parallel layout: how a run's ranks are arranged and how each optimizer step is split
// over them. `strata train` fills it from its flags (train/run_spec.h), `strata plan --local`
// from the same flags, and the planner's search from each layout it tries (plan/layout.h), so
// the three check one description.
//
// Terms. Degrees tp (tensor), cp (context), dp (data), pp (pipeline) and ep (expert, carved
// out of dp · cp): world = tp · cp · dp · pp (parallel/mesh.h). A step of B sequences runs
// M = B / (dp · b) micro-batches of b sequences on each data-parallel rank; under --pp they are
// the pipeline's micro-batches, with V model chunks per stage (interleaved).
//
// The rules below are the conditions both the engine and the planner apply. Each is a
// predicate, so each side words its refusal for its reader (train names the flags, the
// planner the layout's degrees) while the condition itself is written once.
#pragma once
#include <cstdint>
#include <vector>

#include "model/context/layout.h"
#include "model/parallel_rules.h"
#include "parallel/mesh.h"
#include "parallel/pipeline/schedule.h"

namespace strata::parallel {

struct ParallelLayout {
  int tp = 1, cp = 1, dp = 1, pp = 1, ep = 1;
  int zero = 0;  // ZeRO stage 0-3
  pipeline::ScheduleKind schedule = pipeline::ScheduleKind::one_f_one_b;
  int virtual_stages = 1;         // model chunks per pipeline stage (interleaved)
  std::vector<int> pp_split;      // layers per virtual stage; empty: balanced by cost
  int micro_batch = 1;            // b: sequences per data-parallel rank per micro-step
  bool sequence_parallel = true;  // with tp > 1: norms and residuals hold seq / tp tokens
  model::CpOptions cp_options;    // with cp > 1

  MeshDims mesh() const { return {tp, dp, cp, pp, ep}; }
  int64_t world() const { return int64_t(tp) * cp * dp * pp; }
  // M for a global batch of B sequences (B / (dp · b)); the caller checks it divides.
  int64_t micro_batches(int64_t global_batch) const {
    return global_batch / (int64_t(dp) * micro_batch);
  }
};

// ep_divides_dp_cp (the ep ranks out of the dp · cp ranks) is the mesh's (parallel/mesh.h); the
// model-side rules, heads over tp and experts over ep, are model/parallel_rules.h.

// Every data-parallel rank runs whole micro-batches of b sequences.
inline bool batch_splits(int64_t global_batch, int64_t dp, int64_t micro_batch) {
  return global_batch % (dp * micro_batch) == 0;
}

// Every stage holds at least one layer.
inline bool stages_fit_layers(int64_t pp, int64_t layers) { return pp <= layers; }

// Interleaved chunks split the layers evenly unless a --pp-split says how.
inline bool chunks_divide_layers(int64_t layers, int64_t pp, int64_t virtual_stages) {
  return layers % (pp * virtual_stages) == 0;
}

// Only the interleaved schedule runs several chunks per stage.
inline bool virtual_stages_allowed(pipeline::ScheduleKind k, int64_t virtual_stages) {
  return virtual_stages == 1 || k == pipeline::ScheduleKind::interleaved;
}

// Interleaving runs micro-batches in groups of pp per chunk.
inline bool interleaved_micro_batches_fit(int64_t micro_batches, int64_t pp) {
  return micro_batches >= pp && micro_batches % pp == 0;
}

// Zero-bubble defers each block's weight pass past later micro-batches' input passes, so its
// gradients stay live in between: ZeRO 2's bucket buffers and ZeRO 3's gathered layers would
// be held for every deferred pass (pipeline::max_deferred_weight_passes).
inline bool zero_bubble_allows_zero(pipeline::ScheduleKind k, int zero) {
  return k != pipeline::ScheduleKind::zb || zero < 2;
}

}  // namespace strata::parallel
