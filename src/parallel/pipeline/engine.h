// The step engine of one pipeline stage (parallel/engine.h): AdamW over the stage's flat
// buffers (model/stage.h), after the gradients that several ranks share are summed.
//
//   end_backward  the tied wte gradient all-reduced (sum) over the embed group (first and
//                 last stage: the embedding's and the logits' contributions, Megatron's
//                 approach), then every gradient all-reduced over the data-parallel group
//                 (ZeRO 0: the trainer's loss scale makes the sum the global mean)
//   step          the global gradient norm: squares summed on each stage (wte counted on the
//                 first stage only) and all-reduced over the pp group; clip, AdamW
// Every copy of wte (first and last stage) then gets the same update, so the stages keep one
// model: the one-process model's numbers up to the order of float additions.
// State per rank: the stage's parameters, gradients, m and v (4 · Ψ_stage floats).
#pragma once
#include <cstdint>
#include <vector>

#include "core/memory.h"
#include "model/stage.h"
#include "parallel/engine.h"
#include "parallel/mesh.h"

namespace strata::parallel::pipeline {

class StageEngine final : public StepEngine {
 public:
  // Initialises the stage's parameters from `seed` (the one-process model's values).
  StageEngine(model::StageModel& model, Mesh& mesh, const OptimConfig& optim, uint64_t seed);
  void begin_step() override;
  void end_backward() override;
  float step(float lr) override;
  int64_t step_count() const override { return steps_; }
  std::vector<StateShard> state_shards() override;
  void state_loaded(int64_t step_count) override;

 private:
  model::StageModel& model_;
  Mesh& mesh_;
  OptimConfig optim_;
  Buffer m_, v_;
  std::vector<model::DecayRange> spans_;
  int64_t steps_ = 0;
};

}  // namespace strata::parallel::pipeline
