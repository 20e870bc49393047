// The step engine of one pipeline stage: the data-parallel/ZeRO engine (parallel/
// data_parallel.h) over the stage's model part (model/stage.h), with the stage's groups: the
// dp·cp replicas of the stage reduce and shard its gradients (cp ranks hold the same
// parameters, each the gradient of its rows), the embed group ties unit 0 between the first
// and last stage, the gradient norm sums over the pp group, and an MoE stage's expert units
// reduce over the stage's edp group (ranks holding the same experts). ZeRO 0-3 and the reduce
// dtype apply as under data parallelism; the stage's working parameters are fp32 (its
// matmuls run in the stage model's compute dtype).
#pragma once
#include <memory>

#include "model/stage.h"
#include "parallel/data_parallel.h"
#include "parallel/mesh.h"

namespace strata::parallel::pipeline {

// The stage model must be built with allocate_state = false (the engine owns its buffers).
// Initialises the stage's parameters from `seed` (the one-process model's values).
std::unique_ptr<DataParallelEngine> make_stage_engine(model::StageModel& model, Mesh& mesh,
                                                      DataParallelOptions opts,
                                                      const OptimConfig& optim, uint64_t seed);

}  // namespace strata::parallel::pipeline
