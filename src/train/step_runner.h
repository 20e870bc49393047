// How a layout computes a training step, as named parts the trainer (train/trainer.h) calls
// in order. The trainer owns the loop, the data, the guard, the metrics and the checkpoints;
// a runner owns how this rank's passes run and what its layout adds to the record:
//
//   once:      part = runner.build_model(cfg, topo, micro_batch)   the model this rank runs
//              engine = runner.make_engine(optim, seed)
//   per step:  engine.begin_step()
//              loss = runner.forward_backward(batch, scale)    every micro-batch's passes
//              engine.end_backward(); engine.step(lr)            (the trainer)
//              record += runner.step_metrics()
//   evals:     loss = runner.forward_sum(batch)
//   at the end (every rank, collective): runner.summary_sections(summary)
//
// ModelRunner runs the whole model on this rank (a model::GPT): one process, and data, tensor,
// context and expert parallelism, where the engine (parallel/engine.h) decides how gradients
// meet. A pipeline stage runs its chunks of the model (a model::StageModel) under its
// schedule (train/pipeline_rank.cc). The trainer sees either as the StageModel it is.
#pragma once
#include <cstdint>
#include <memory>

#include "core/dtype.h"
#include "model/gpt.h"
#include "nlohmann/json.hpp"
#include "parallel/engine.h"
#include "train/config.h"
#include "train/summary.h"

namespace strata::data {
struct StepBatch;
}

namespace strata::train {

class StepRunner {
 public:
  virtual ~StepRunner() = default;

  // Builds the model this rank runs, once, for micro-batches of `micro_batch` sequences, and
  // checks its activations against --max-activation-mb. Its parameters are the engine's to
  // bind and initialise (make_engine). The runner owns it; it outlives the engine.
  virtual model::StageModel& build_model(const TrainConfig& cfg, const Topology& topo, int micro_batch) = 0;
  // The whole model when this rank runs one, for what needs every layer (sampling text); null
  // for a pipeline stage.
  virtual model::GPT* whole_model() { return nullptr; }

  // Builds the step engine over the model build_model made.
  virtual std::unique_ptr<parallel::StepEngine> make_engine(const parallel::OptimConfig& optim, uint64_t seed) = 0;
  // Every micro-batch's forward and backward of one step, gradients scaled by `scale`, into
  // the engine begun by the trainer; returns this rank's sum of token losses (MoE's aux and z
  // losses included where its rows are counted).
  virtual double forward_backward(const data::StepBatch& batch, float scale) = 0;
  // This rank's sum of an eval batch's token losses (no gradients).
  virtual double forward_sum(const data::StepBatch& batch) = 0;
  // Keys this layout adds to each step's metrics record (rank 0 writes them); null: none.
  virtual nlohmann::json step_metrics() { return nullptr; }
  // The layout's sections of summary.json, after the last step, on every rank together (they
  // may run collectives); rank 0's are written.
  virtual void summary_sections(SummaryBuilder&) {}
  // Replica groups: the bytes of global state this rank holds by the formula
  // (cost::outer_state_bytes over the layout's regions); -1 where the layout has none.
  virtual int64_t outer_state_formula(bool overlap, bool error_feedback) const { return -1; }
};

// Runs the whole model on this rank, micro-batch by micro-batch. Subclasses build the
// engine (build_engine) and may add metrics and summary sections. `compute`: the matmul
// precision of the model's passes. `cp`: under context parallelism, the group whose ranks
// each hold a chunk of every sequence (their MoE aux and z sums are added over it).
class ModelRunner : public StepRunner {
 public:
  explicit ModelRunner(DType compute = DType::f32, model::ContextComm* cp = nullptr)
      : compute_(compute), cp_(cp) {}
  model::StageModel& build_model(const TrainConfig& cfg, const Topology& topo, int micro_batch) final;
  model::GPT* whole_model() final { return model_.get(); }
  std::unique_ptr<parallel::StepEngine> make_engine(const parallel::OptimConfig& optim, uint64_t seed) final;
  double forward_backward(const data::StepBatch& batch, float scale) override;
  double forward_sum(const data::StepBatch& batch) override;

 protected:
  virtual std::unique_ptr<parallel::StepEngine> build_engine(model::GPT& model, const parallel::OptimConfig& optim,
                                                             uint64_t seed) = 0;
  std::unique_ptr<model::GPT> model_;       // built by build_model
  parallel::StepEngine* engine_ = nullptr;  // owned by the trainer's run

 private:
  DType compute_;
  model::ContextComm* cp_;
};

// One process: the data-parallel engine over a group of one rank (ZeRO 0, fp32 working
// parameters), whose reductions are no-ops, so a step is accumulate -> clip -> AdamW, the one
// optimizer path every layout takes.
std::unique_ptr<StepRunner> one_process_runner();

}  // namespace strata::train
