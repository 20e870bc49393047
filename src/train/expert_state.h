// Model states and gradient-reduction bytes of a data-parallel rank by region
// (parallel/region.h), measured next to the formulas the planner uses
// (cost/memory.h): for summary.json and the per-step metrics of MoE runs.
#pragma once
#include <cstdint>

#include "cost/comm.h"
#include "nlohmann/json.hpp"
#include "parallel/data_parallel.h"
#include "parallel/mesh.h"
#include "train/summary.h"

namespace strata::train {

// What the formulas say for one rank: dense parameters over dp x cp, its experts over edp.
struct RankStateFormula {
  int64_t dense_params = 0, expert_params = 0;  // Ψ_dense, Ψ_experts (this rank's E/ep experts)
  int64_t dense_ranks = 1, edp_ranks = 1;        // dp x cp, dp x cp / ep
  cost::ModelStateBytes states;              // moe_model_state_bytes of the above
  int64_t reduce_bytes_dense = 0, reduce_bytes_experts = 0;  // per step
};

// Muon's part of a rank's formula (parallel/muon.h): Muon elements of the ranges its
// optimizer updates, which keep 4 bytes fewer than AdamW's two moments, and the bytes its
// step moves. `dense_rank`, `edp_rank`: the rank's place in the dense and expert groups.
struct MuonFormula {
  int64_t dense_updated = 0, expert_updated = 0;  // dense_updated -1: not given (a pipeline stage)
  int64_t bytes_per_step = 0;
  double ns_flops = 0;  // every matrix of the rank's model, once
};
MuonFormula muon_formula(const model::ModelPart& model, const RankStateFormula& f, int stage,
                         int dense_rank, int edp_rank, int ns_steps);

// summary.json's "muon" section and its line: what Muon updates on this rank and what its
// step moves, next to the formulas.
void add_muon_section(SummaryBuilder& summary, const parallel::MuonConfig& c, const model::ModelPart& model,
                      const parallel::DataParallelEngine& engine, const MuonFormula& m);

// `local_params`: the rank's whole flat Ψ (dense + its experts); `expert_params`: its experts'.
RankStateFormula rank_state_formula(int64_t local_params, int64_t expert_params,
                                    const parallel::MeshDims& d,
                                    const parallel::DataParallelOptions& o, int64_t accum);

// {"model_states_formula": ..., "experts": {...}} keys of summary.json: the formula and, for
// an MoE model, the measured and predicted bytes of each region.
nlohmann::json rank_state_summary(const RankStateFormula& f,
                                  const parallel::DataParallelEngine& engine);

}  // namespace strata::train
