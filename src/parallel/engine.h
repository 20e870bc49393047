// The step engine: how one optimizer step turns per-rank gradients into updated parameters.
// The trainer drives any engine the same way:
//
//   engine.begin_step();
//   for (micro = 0 .. A-1) { engine.begin_micro(micro, A); model.forward(...); model.backward(...); }
//   engine.end_backward();          // all gradient communication finished
//   float norm = engine.step(lr);   // clip by global norm, AdamW, parameters up to date
//
// Implementations: single process (train/local_engine) and data parallel with ZeRO stages
// 0-3 (parallel/). Every rank must call these in the same order.
#pragma once
#include <cstdint>

namespace strata::parallel {

struct OptimConfig {
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  float eps = 1e-8f;
  float weight_decay = 0.1f;  // applied to matrices and embeddings, not to biases or norms
  float grad_clip = 1.0f;     // global-norm clipping threshold; <= 0 disables
};

class StepEngine {
 public:
  virtual ~StepEngine() = default;
  virtual void begin_step() = 0;
  virtual void begin_micro(int micro, int num_micro) {}
  virtual void end_backward() = 0;
  // Returns the global gradient norm before clipping.
  virtual float step(float lr) = 0;
  // Number of optimizer steps taken (AdamW bias correction uses step_count()+1).
  virtual int64_t step_count() const = 0;
};

}  // namespace strata::parallel
