#include "parallel/pipeline/engine.h"

namespace strata::parallel::pipeline {

std::unique_ptr<DataParallelEngine> make_stage_engine(model::StageModel& model, Mesh& mesh,
                                                      DataParallelOptions opts,
                                                      const OptimConfig& optim, uint64_t seed) {
  // A tied embedding is summed between the first and the last stage in fp32 (the engine's
  // tie works on fp32 working parameters), and zero-bubble's weight passes come after the
  // unit's hooks have let its working copy go: those stages keep fp32 working parameters
  // (bf16 compute rounds them in its matmuls). An untied model (Llama's lm_head) under the
  // other schedules keeps bf16 working copies as one process does, so it computes the same.
  if (model.config().tied() || model.split_backward()) opts.precision = Precision::fp32;
  StageGroups stage;
  stage.pp = mesh.has_pp() ? &mesh.pp() : nullptr;
  // The tied embedding's two ends; an untied model (Llama's lm_head) has nothing to tie.
  stage.embed = mesh.has_embed() && model.tied_unit0() ? &mesh.embed() : nullptr;
  stage.counts_unit0 = mesh.first_stage();
  // An MoE stage's expert units reduce over the ranks of this stage holding the same experts
  // (the mesh's ep groups are per stage and tp coordinate).
  ExpertGroups experts;
  if (mesh.has_ep()) experts = {&mesh.edp(), &mesh.ep()};
  return std::make_unique<DataParallelEngine>(model, mesh.dp_cp(), opts, optim, seed, experts,
                                              stage);
}

}  // namespace strata::parallel::pipeline
