#include "train/expert_state.h"

namespace strata::train {

RankStateFormula rank_state_formula(int64_t local_params, int64_t expert_params,
                                    const parallel::MeshDims& d,
                                    const parallel::DataParallelOptions& o, int64_t accum) {
  RankStateFormula f;
  f.expert_params = expert_params;
  f.dense_params = local_params - expert_params;
  f.dense_ranks = int64_t(d.dp) * d.cp;
  f.edp_ranks = f.dense_ranks / d.ep;
  f.states = cost::moe_model_state_bytes(f.dense_params, f.dense_ranks, f.expert_params,
                                             f.edp_ranks, o.stage, o.precision);
  f.reduce_bytes_dense =
      cost::grad_reduce_bytes_per_step(f.dense_params, f.dense_ranks, o.stage, accum,
                                           o.reduce());
  f.reduce_bytes_experts =
      cost::grad_reduce_bytes_per_step(f.expert_params, f.edp_ranks, o.stage, accum,
                                           o.reduce());
  return f;
}

nlohmann::json rank_state_summary(const RankStateFormula& f,
                                  const parallel::DataParallelEngine& engine) {
  nlohmann::json out;
  out["model_states_formula"] = {{"parameters", f.states.parameters},
                                 {"gradients", f.states.gradients},
                                 {"optimizer", f.states.optimizer},
                                 {"total", f.states.total()}};
  const parallel::Region* x = engine.expert_region();
  if (!x) return out;
  const parallel::MemoryReport mx = engine.memory_report(*x);
  const parallel::MemoryReport all = engine.memory_report();
  const int64_t rx = engine.grad_reduce_bytes_last_step(*x);
  const int64_t rall = engine.grad_reduce_bytes_last_step();
  out["experts"] = {
      {"dense_params", f.dense_params},
      {"expert_params", f.expert_params},
      {"dense_ranks", f.dense_ranks},
      {"edp_ranks", f.edp_ranks},
      {"dense_model_states", all.model_states() - mx.model_states()},
      {"expert_model_states", mx.model_states()},
      {"dense_model_states_formula",
       cost::zero_model_state_bytes(f.dense_params, f.dense_ranks, engine.zero_stage(),
                                        engine.options().precision)
           .total()},
      {"expert_model_states_formula",
       cost::zero_model_state_bytes(f.expert_params, f.edp_ranks, engine.zero_stage(),
                                        engine.options().precision)
           .total()},
      {"grad_reduce_bytes_dense", rall - rx},
      {"grad_reduce_bytes_experts", rx},
      {"grad_reduce_bytes_dense_formula", f.reduce_bytes_dense},
      {"grad_reduce_bytes_experts_formula", f.reduce_bytes_experts}};
  return out;
}

}  // namespace strata::train
