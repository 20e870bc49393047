#include "train/step_runner.h"

#include "comm/process_group.h"
#include "core/phase.h"
#include "data/sampler.h"
#include "model/context/context_comm.h"
#include "parallel/data_parallel.h"
#include "train/context_metrics.h"
#include "train/expert_state.h"

namespace strata::train {

model::StageModel& ModelRunner::build_model(const TrainConfig& cfg, const Topology& topo, int micro_batch) {
  model_ = std::make_unique<model::GPT>(cfg.model, micro_batch, /*allocate_state=*/false, topo.tp, compute_,
                                        topo.cp, topo.ep);
  check_activation_budget(cfg.max_activation_mb, *model_, micro_batch, cfg.train_seq());  // train/context_metrics.h
  return *model_;
}

std::unique_ptr<parallel::StepEngine> ModelRunner::make_engine(const parallel::OptimConfig& optim, uint64_t seed) {
  std::unique_ptr<parallel::StepEngine> e = build_engine(*model_, optim, seed);
  engine_ = e.get();
  return e;
}

double ModelRunner::forward_backward(const data::StepBatch& batch, float scale) {
  double loss_sum = 0;
  const int micro = int(batch.micro.size());
  for (int m = 0; m < micro; ++m) {
    const data::MicroBatch& mb = batch.micro[m];
    engine_->begin_micro(m, micro);
    // B = 0 (a rank without samples at an uneven epoch end) still runs: the model then only
    // calls its hooks, so the rank takes part in the engine's collectives.
    current_phase().set_kind(PhaseKind::forward);
    // The rows' sample ids and the epoch key the MoE router's jitter (docs/moe.md).
    loss_sum += model_->forward(mb.tokens.data(), mb.targets.data(), mb.weights.data(), mb.B, mb.T,
                                {mb.sample_ids.data(), batch.epoch}, data::doc_starts(mb));
    if (model_->moe()) {  // under cp a rank's aux and z sums cover its chunks only
      double aux_z = model_->moe()->last_aux() + model_->moe()->last_z();
      if (cp_) cp_->group().all_reduce(&aux_z, 1);
      loss_sum += aux_z;
    }
    current_phase().set_kind(PhaseKind::backward);
    model_->backward(scale);
  }
  return loss_sum;
}

double ModelRunner::forward_sum(const data::StepBatch& batch) {
  double sum = 0;
  for (const data::MicroBatch& mb : batch.micro)
    sum += model_->forward(mb.tokens.data(), mb.targets.data(), mb.weights.data(), mb.B, mb.T, {},
                           data::doc_starts(mb));
  return sum;
}

namespace {

class OneProcessRunner final : public ModelRunner {
  std::unique_ptr<parallel::StepEngine> build_engine(model::GPT& m, const parallel::OptimConfig& o,
                                                     uint64_t seed) override {
    if (!solo_) solo_ = comm::make_thread_world(1, comm::Options{}).front();
    optim_ = o;
    auto e = parallel::make_data_parallel_engine(m, *solo_, parallel::DataParallelOptions{}, o, seed);
    engine_ = e.get();
    return e;
  }
  void summary_sections(SummaryBuilder& summary) override {
    if (optim_.kind != parallel::OptimizerKind::muon) return;
    RankStateFormula f;  // one rank, ZeRO 0: every matrix updated here, nothing moved
    f.dense_params = model_->num_params();
    add_muon_section(summary, optim_.muon, *model_, *engine_, muon_formula(*model_, f, 0, 0, 0, optim_.muon.ns_steps));
  }
  comm::GroupPtr solo_;
  parallel::OptimConfig optim_;
  parallel::DataParallelEngine* engine_ = nullptr;
};

}  // namespace

std::unique_ptr<StepRunner> one_process_runner() { return std::make_unique<OneProcessRunner>(); }

}  // namespace strata::train
