// Model states and gradient-reduction bytes of a data-parallel rank by region
// (parallel/region.h), measured next to the formulas the planner uses
// (cost/memory.h): for summary.json and the per-step metrics of MoE runs.
#pragma once
#include <cstdint>

#include "cost/comm.h"
#include "nlohmann/json.hpp"
#include "parallel/data_parallel.h"
#include "parallel/mesh.h"

namespace strata::train {

// What the formulas say for one rank: dense parameters over dp x cp, its experts over edp.
struct RankStateFormula {
  int64_t dense_params = 0, expert_params = 0;  // Ψ_dense, Ψ_experts (this rank's E/ep experts)
  int64_t dense_ranks = 1, edp_ranks = 1;        // dp x cp, dp x cp / ep
  cost::ModelStateBytes states;              // moe_model_state_bytes of the above
  int64_t reduce_bytes_dense = 0, reduce_bytes_experts = 0;  // per step
};

// `local_params`: the rank's whole flat Ψ (dense + its experts); `expert_params`: its experts'.
RankStateFormula rank_state_formula(int64_t local_params, int64_t expert_params,
                                    const parallel::MeshDims& d,
                                    const parallel::DataParallelOptions& o, int64_t accum);

// {"model_states_formula": ..., "experts": {...}} keys of summary.json: the formula and, for
// an MoE model, the measured and predicted bytes of each region.
nlohmann::json rank_state_summary(const RankStateFormula& f,
                                  const parallel::DataParallelEngine& engine);

}  // namespace strata::train
