// The training loop. One Trainer runs on every rank; the step engine decides how gradients
// become updated parameters (single process here, data parallel / ZeRO elsewhere), so the
// loop itself never changes with the parallel layout:
//
//   per step:  batch = loader.next()                      (this rank's A micro-batches)
//              engine.begin_step()
//              for each micro-batch m: engine.begin_micro(m, A)
//                                      loss += model.forward(m)         (sum of token losses)
//                                      model.backward(1 / global_real_tokens)
//              engine.end_backward(); grad_norm = engine.step(lr_at(step))
//
// Dividing by the *global* real-token count makes the accumulated gradient the mean over
// every real token of the global batch, whatever the split into ranks and micro-batches.
// Only rank 0 writes metrics, the summary and progress lines.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "comm/process_group.h"
#include "core/error.h"
#include "diag/fault_inject.h"
#include "diag/straggler.h"
#include "model/gpt.h"
#include "nlohmann/json.hpp"
#include "parallel/engine.h"
#include "train/config.h"
#include "train/summary.h"

namespace strata::data {
struct StepBatch;
}

namespace strata::train {

// Thrown by Trainer::run at a step boundary where Topology::world_changes said so.
class WorldChange : public Error {
 public:
  explicit WorldChange(int64_t step) : Error(cat("the job's world changes after step ", step)), step(step) {}
  int64_t step;  // steps done
};

// Builds the step engine once the model exists. model_owns_state = false asks for a model
// without flat parameter/gradient buffers (the engine binds every unit, e.g. ZeRO-3) and
// makes the engine responsible for initialising parameters from `seed`.
struct EngineFactory {
  bool model_owns_state = true;
  std::function<std::unique_ptr<parallel::StepEngine>(model::GPT&, const parallel::OptimConfig&,
                                                      uint64_t seed)>
      make;
  // Adds the parallel dimensions' sections to summary.json (train/summary.h), after the
  // last step, on every rank together (it may run collectives), e.g. the engine's memory
  // report and the traced overlap; rank 0's sections are written. Empty: none.
  std::function<void(SummaryBuilder&)> summary_sections;
  DType compute = DType::f32;  // the model's matmul precision (bf16 under --precision bf16)
  // Pipeline parallelism (train/pipeline_rank.h): the stage keeps its own model, so the
  // trainer's GPT holds activations for model_max_batch sequences (>= 0; -1: the
  // micro-batch); run_step runs every micro-batch's forward and backward of a step and
  // returns this rank's sum of token losses; forward_sum returns this rank's sum of an eval
  // batch's token losses (counted as run_step's are: topo.counts_loss); step_metrics adds
  // keys to each step's metrics record (rank 0); samples = false skips sampling (it needs
  // the whole model on one rank).
  int model_max_batch = -1;
  std::function<double(const data::StepBatch&, float scale)> run_step;
  std::function<double(const data::StepBatch&)> forward_sum;
  std::function<nlohmann::json()> step_metrics;
  bool samples = true;
  // The MoE layer of the model run_step runs (a pipeline stage's, covering its blocks), for
  // the step's load statistics; null: the trainer's GPT's.
  model::expert::MoE* moe = nullptr;
  // The model run_step runs (a pipeline stage), for its recomputation time; null: the
  // trainer's GPT.
  const model::StageModel* stage = nullptr;
};
EngineFactory local_engine_factory();

struct TrainResult {
  std::vector<double> losses;    // per step, mean over the global batch's real tokens
  double eval_loss = -1;         // last eval; < 0 when none ran
  int64_t eval_sequences = 0;    // held-out sequences the last eval covered (whole job)
  double entropy_floor = -1;     // of the held-out data when known
  double median_tokens_per_s = 0;
  double median_mfu = 0;
  double wall_s = 0;
  nlohmann::json summary;        // what summary.json holds
};

class Trainer {
 public:
  Trainer(TrainConfig cfg, Topology topo = {}, EngineFactory engine = local_engine_factory());
  ~Trainer();
  // Validates the configuration, opens the data, builds model and engine, trains, evaluates
  // and writes the summary. Throws Error on bad input; never exits.
  TrainResult run();

 private:
  struct Run;
  TrainConfig cfg_;
  Topology topo_;
  EngineFactory engine_factory_;
};

}  // namespace strata::train
