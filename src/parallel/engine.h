// The step engine: how one optimizer step turns per-rank gradients into updated parameters.
// The trainer drives any engine the same way:
//
//   engine.begin_step();
//   for (micro = 0 .. A-1) { engine.begin_micro(micro, A); model.forward(...); model.backward(...); }
//   engine.end_backward();          // all gradient communication finished
//   float norm = engine.step(lr);   // clip by global norm, AdamW, parameters up to date
//
// Implementation: the data-parallel engine with ZeRO stages 0-3 (parallel/data_parallel.h),
// which serves one process (a group of one rank), every layout and every pipeline stage.
// Every rank must call these in the same order.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "kernels/adamw.h"
#include "kernels/muon.h"

namespace strata::parallel {

enum class OptimizerKind : uint8_t { adamw, muon };
const char* optimizer_name(OptimizerKind k);
OptimizerKind parse_optimizer(const std::string& name);  // throws naming the choices

// Muon's settings (kernels/muon.h, parallel/muon.h); AdamW's betas and eps serve the
// parameters Muon does not take.
struct MuonConfig {
  float momentum = 0.95f;
  int ns_steps = 5;
  float lr_scale = 0.2f;  // the update's RMS relative to lr (Moonshot's matching to AdamW)
  bool nesterov = true;
};

struct OptimConfig {
  OptimizerKind kind = OptimizerKind::adamw;
  MuonConfig muon;
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  float eps = 1e-8f;
  float weight_decay = 0.1f;  // applied to matrices and embeddings, not to biases or norms
  float grad_clip = 1.0f;     // global-norm clipping threshold; <= 0 disables
};

// The AdamW update of step t (1-based) at learning rate lr, gradients scaled by grad_scale
// (the clipping factor), with the configuration's betas, eps and weight decay.
inline kernels::AdamWStep adamw_step(const OptimConfig& c, float lr, int64_t t, float grad_scale) {
  kernels::AdamWStep s;
  s.lr = lr;
  s.beta1 = c.beta1;
  s.beta2 = c.beta2;
  s.eps = c.eps;
  s.weight_decay = c.weight_decay;
  s.t = t;
  s.grad_scale = grad_scale;
  return s;
}

inline kernels::MuonStep muon_step(const OptimConfig& c, float lr, float grad_scale) {
  kernels::MuonStep s;
  s.lr = lr;
  s.momentum = c.muon.momentum;
  s.weight_decay = c.weight_decay;
  s.grad_scale = grad_scale;
  s.lr_scale = c.muon.lr_scale;
  s.ns_steps = c.muon.ns_steps;
  s.nesterov = c.muon.nesterov;
  return s;
}

// One optimizer-state tensor as this rank holds it, for checkpoints, which save and load by
// range of the rank's flat parameter index space [0, Ψ) (Ψ: the elements this rank's model
// holds; its TensorLayout, core/tensor_layout.h, says which global tensors they belong to).
//   name  "params": the fp32 weights the optimizer updates (the fp32 master under bf16; a
//         bf16 working copy is derived from it), "exp_avg", "exp_avg_sq" (AdamW m, v;
//         Muon's momentum is "exp_avg" of its matrices, which have no "exp_avg_sq").
//   partial  the state holds only some tensors, each whole (Muon's "exp_avg_sq").
//   held  [begin, end): the elements this rank keeps (may reach into ZeRO padding past Ψ);
//         data points at element `begin`. A load must fill all of them.
//   write [write_begin, write_end) within held: what this rank writes on save; the write
//         ranges of the ranks that share a layout (a data-parallel group) are disjoint and
//         cover [0, Ψ).
struct StateShard {
  std::string name;
  DType dtype = DType::f32;
  int64_t begin = 0, end = 0;
  int64_t write_begin = 0, write_end = 0;
  void* data = nullptr;
  bool partial = false;
};

class StepEngine {
 public:
  virtual ~StepEngine() = default;
  virtual void begin_step() = 0;
  virtual void begin_micro(int micro, int num_micro) {}
  virtual void end_backward() = 0;
  // Returns the global gradient norm before clipping.
  virtual float step(float lr) = 0;
  // step(lr), unless accept(norm) (the global norm, the same on every rank) says no: then
  // the parameters and the optimizer's moments stay as they are, and only the step count
  // advances (it stays the run's step, which checkpoints record). Returns the norm.
  virtual float step_if(float lr, const std::function<bool(float norm)>& accept) = 0;
  // Number of optimizer steps taken (AdamW bias correction uses step_count()+1).
  virtual int64_t step_count() const = 0;

  // Checkpoint access. state_shards() points into the engine's live state; after a load has
  // written into it, state_loaded(step_count) restores the step count and re-derives whatever
  // is computed from the optimizer's weights (working copies, gathered shards). Every rank
  // calls state_loaded at the same point (it may communicate).
  virtual std::vector<StateShard> state_shards() = 0;
  virtual void state_loaded(int64_t step_count) = 0;
  // ZeRO stage of the state layout (0 when every rank holds everything), and the precision
  // of the working parameters, recorded in checkpoints.
  virtual int zero_stage() const { return 0; }
  virtual const char* precision() const { return "fp32"; }
};

}  // namespace strata::parallel
