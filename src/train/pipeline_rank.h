// `strata train --pp P`: one rank's pipeline stage under the trainer (train/trainer.h).
//
//   rank r (pp stage s, dp replica d): a model::StageModel with the layers of its virtual
//   stages (split by the layer types' measured costs, train/pipeline_costs.h), the
//   data-parallel/ZeRO engine over it (parallel/pipeline/engine.h make_stage_engine), and one
//   executor per schedule: the training schedule (--schedule over M = accumulation
//   micro-batches) and a forward-only one for evals. The trainer's loop stays as it is: its
//   step hook runs the executor over the step's micro-batches, and its GPT is an empty shell.
// Each step's metrics gain every stage's busy time and bubble fraction (measured: 1 − busy /
// the schedule's wall time), its waits split into peer and transfer time, and the schedule's
// formula; the summary adds their medians, the planner's bubble for the layout, each stage's
// activation bytes and its in-flight peak.
#pragma once
#include "comm/process_group.h"
#include "parallel/mesh.h"
#include "train/config.h"
#include "train/trainer.h"

namespace strata::train {

// The pipeline layouts that cannot run are refused before any rank starts by the run
// specification (train/run_spec.h); a stage checks its own activations once built.
TrainResult train_pipeline_rank(const TrainConfig& cfg, const ParallelConfig& pc,
                                parallel::Mesh& mesh, Topology topo);

}  // namespace strata::train
