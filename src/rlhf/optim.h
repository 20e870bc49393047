// AdamW for the few parameters a trained model keeps outside its data-parallel engine (the
// value heads of the PPO critic and of the reward model, C + 1 replicated values): their
// squared gradient norm joins the engine's global norm (parallel::DataParallelEngine::step's
// extra_sum_sq), and the engine's clip factor scales their update, so norm and clipping live
// in the engine; the update is parallel::adamw_step's arithmetic through
// kernels::adamw_update, per range of equal decay policy. Moments m and v are owned here
// (category "optimizer"), 8 bytes per parameter.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/memory.h"
#include "model/gpt.h"
#include "parallel/engine.h"
#include "rlhf/model_io.h"

namespace strata::rlhf {

class AdamWGroup {
 public:
  explicit AdamWGroup(const parallel::OptimConfig& cfg) : cfg_(cfg) {}
  // A range of n parameters with gradients; spans say where weight decay applies (relative
  // to p; empty: none).
  void add(std::string name, float* p, float* g, int64_t n, std::vector<model::DecayRange> spans);
  // The squared norm of every range's gradients, and the AdamW update with gradients scaled
  // by grad_scale (the clip factor the engine computed over its gradients and these:
  // parallel::DataParallelEngine::step).
  double sum_squares() const;
  void apply(float lr, float grad_scale);
  int64_t steps() const { return steps_; }
  void set_steps(int64_t s) { steps_ = s; }
  // Parameters and moments as named tensors "<prefix><name>.{params,exp_avg,exp_avg_sq}".
  std::vector<NamedTensor> tensors(const std::string& prefix) const;

 private:
  struct Range {
    std::string name;
    float *p, *g;
    int64_t n;
    std::vector<model::DecayRange> spans;
    Buffer m, v;
  };
  parallel::OptimConfig cfg_;
  std::vector<Range> ranges_;
  int64_t steps_ = 0;
};

}  // namespace strata::rlhf
