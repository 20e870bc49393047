#include "train/expert_state.h"

#include "train/metrics.h"

using nlohmann::json;

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

MuonFormula muon_formula(const model::ModelPart& model, const RankStateFormula& f, int stage,
                         int dense_rank, int edp_rank, int ns_steps) {
  const std::vector<parallel::MuonMatrix> ms = parallel::muon_matrices(model);
  auto updated = [&](int64_t base, int64_t psi, int64_t n, int rank) {
    const parallel::Range r = stage == 0 ? parallel::Range{0, psi} : parallel::ShardLayout(psi, int(n), rank).own();
    return parallel::muon_elems_in(ms, base + r.begin, base + std::min(r.end, psi));
  };
  MuonFormula m;
  m.dense_updated = updated(0, f.dense_params, f.dense_ranks, dense_rank);
  if (f.expert_params > 0) m.expert_updated = updated(f.dense_params, f.expert_params, f.edp_ranks, edp_rank);
  std::vector<std::pair<int64_t, int64_t>> units;
  for (int u = 0; u < model.num_units(); ++u) units.push_back(model.unit_range(u));
  m.bytes_per_step = parallel::muon_bytes_per_step(ms, units, stage);
  // Each region's owners (its tp-split matrices are gathered over the tp group by them).
  std::vector<parallel::MuonMatrix> dense, experts;
  for (const parallel::MuonMatrix& x : ms) (x.begin < f.dense_params ? dense : experts).push_back(x);
  m.bytes_per_step += parallel::muon_tp_bytes(dense, ns_steps, stage ? int(f.dense_ranks) : 1, stage ? dense_rank : 0) +
                      parallel::muon_tp_bytes(experts, ns_steps, stage ? int(f.edp_ranks) : 1, stage ? edp_rank : 0);
  m.ns_flops = parallel::muon_ns_flops(ms, ns_steps);
  return m;
}

void add_muon_section(SummaryBuilder& summary, const parallel::MuonConfig& c, const model::ModelPart& model,
                      const parallel::DataParallelEngine& engine, const MuonFormula& m) {
  const int64_t muon_params = parallel::muon_numel(model.param_table());
  summary.set("muon", {{"momentum", c.momentum},
                       {"ns_steps", c.ns_steps},
                       {"lr_scale", c.lr_scale},
                       {"nesterov", c.nesterov},
                       {"muon_params", muon_params},
                       {"adamw_params", model.num_params() - muon_params},
                       {"muon_elems_updated", m.dense_updated < 0 ? json() : json(m.dense_updated + m.expert_updated)},
                       {"bytes_per_step", engine.muon_bytes_last_step()},
                       {"bytes_per_step_formula", m.bytes_per_step},
                       {"ns_flops_per_step", m.ns_flops}});
  summary.line(cat("muon: ", muon_params, " of this rank's ", model.num_params(),
                   " parameters (the blocks' matrices; AdamW for the rest); gather/scatter bytes per step ",
                   engine.muon_bytes_last_step(), " (formula ", m.bytes_per_step, "); Newton-Schulz ",
                   fmt("%.3g", m.ns_flops), " FLOP per step"));
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
