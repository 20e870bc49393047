// The single-process step engine: gradients are already complete after backward, so a step is
// zero -> accumulate (the model's backward) -> clip by global norm -> AdamW over the whole
// flat buffers. Optimizer state m and v are two more flat buffers of num_params floats
// (category "optimizer"); weight decay applies to the views whose ParamView::decay is set.
// Cost per step: O(num_params) memory traffic, a few passes.
#pragma once
#include <cstdint>
#include <vector>

#include "core/memory.h"
#include "model/gpt.h"
#include "parallel/engine.h"

namespace strata::train {

class LocalEngine : public parallel::StepEngine {
 public:
  LocalEngine(model::GPT& model, const parallel::OptimConfig& cfg);
  void begin_step() override;           // zeroes the gradients
  void end_backward() override {}       // nothing to communicate
  float step(float lr) override;        // clip + AdamW; returns the norm before clipping
  int64_t step_count() const override { return steps_; }
  // Parameters, m and v, each held whole: [0, Ψ) read and written by this one rank.
  std::vector<parallel::StateShard> state_shards() override;
  void state_loaded(int64_t step_count) override;

  const float* m() const { return m_.as<float>(); }
  const float* v() const { return v_.as<float>(); }

 private:
  model::GPT& model_;
  parallel::OptimConfig cfg_;
  Buffer m_, v_;
  std::vector<model::DecayRange> spans_;  // runs of one decay policy
  int64_t steps_ = 0;
};

}  // namespace strata::train
