// The step engine of one pipeline stage (parallel/engine.h): AdamW over the stage's flat
// buffers (model/stage.h), after the gradients that several ranks share are summed.
//
//   end_backward  the tied wte gradient all-reduced (sum) over the embed group (first and
//                 last stage: the embedding's and the logits' contributions, Megatron's
//                 approach), then every gradient all-reduced over the dp·cp group (the
//                 replicas of the stage: cp ranks hold the same parameters, each the gradient
//                 of its rows; ZeRO 0: the trainer's loss scale makes the sum the global mean),
//                 or reduce-scattered into each dp·cp rank's 1/D share (ZeRO 1, D = dp·cp)
//   step          the global gradient norm: squares summed on each stage (wte counted on the
//                 first stage only, tp-replicated views on tp rank 0 only; under ZeRO 1 over
//                 the share, added over dp) and all-reduced over the tp and pp groups; clip, AdamW (ZeRO 1: on the share, whose
//                 parameters are then all-gathered over dp)
// Every copy of wte (first and last stage) then gets the same update, so the stages keep one
// model: the one-process model's numbers up to the order of float additions.
// State per rank: the stage's parameters and gradients (Ψ_stage floats each), m and v
// (2 · Ψ_stage; ZeRO 1: 2 · Ψ_stage / D, plus the Ψ_stage / D gradient share).
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
  // zero: 0 or 1 (ZeRO stage over the data-parallel group). reduce: the dtype gradients are
  // summed in over the dp·cp replicas (bf16: rounded into a wire buffer of category comm,
  // summed there, widened back, as the data-parallel engine does; the tied embedding's sum
  // between the first and last stage stays fp32).
  StageEngine(model::StageModel& model, Mesh& mesh, const OptimConfig& optim, uint64_t seed,
              int zero = 0, DType reduce = DType::f32);
  void begin_step() override;
  void end_backward() override;
  float step(float lr) override;
  int64_t step_count() const override { return steps_; }
  std::vector<StateShard> state_shards() override;
  void state_loaded(int64_t step_count) override;
  int zero_stage() const override { return zero_; }
  // Ranks holding this stage's parameters: dp · cp.
  int replicas() const { return mesh_.dims().dp * mesh_.dims().cp; }

 private:
  model::StageModel& model_;
  Mesh& mesh_;
  OptimConfig optim_;
  int zero_;
  int64_t begin_ = 0, end_ = 0;      // this rank's optimizer share of [0, Ψ_stage)
  std::vector<size_t> counts_;        // every dp rank's share
  Buffer m_, v_, share_grads_;
  DType reduce_;
  Buffer wire_, wire_share_;  // bf16 reduction: the whole gradient, and this rank's share
  std::vector<model::DecayRange> spans_;
  int64_t steps_ = 0;
};

}  // namespace strata::parallel::pipeline
