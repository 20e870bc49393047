// Per-GPU memory of PPO fine-tuning (InstructGPT-style RLHF, as in DeepSpeed-Chat): four
// models live at once.
//   actor (the policy) and critic (value model): trained, 16 bytes per parameter under
//       bf16 + AdamW (zero_model_state_bytes with their ZeRO stage over the N/tp data ranks)
//   reference (frozen copy of the initial actor) and reward model: inference only, the
//       working precision's bytes per parameter (2 under bf16, 4 under fp32), sharded over
//       the N/tp data ranks under ZeRO-3 (the reward model's value head replicated), else
//       replicated
//   KV cache of the actor generating rollouts:
//       rollout batch × sequence × layers × 2 (K and V) × kv-hidden/tp × 2 bytes (4 in fp32)
//   activations of whichever trained model is in its backward (the larger of the two)
// Reference shares the actor's shape and reward the critic's. Critic and reward model carry
// a value head of h + 1 parameters (h weights and a bias on the last hidden state, a tensor
// of its own, replicated with its gradient and optimizer state at every stage); an untied model's LM
// head stays counted too (a slight overestimate). For an fp32 strata run (rlhf/ppo.h, any
// rank count, ZeRO 0-3) the model states are exact: tests/rlhf checks
// them to the byte.
#pragma once
#include <string>
#include <vector>

#include "plan/estimate.h"

namespace strata::plan {

struct RlhfSetup {
  ModelSpec actor, critic;
  GpuSpec gpu;
  int64_t gpus = 8;
  int tp = 1;
  int zero = 3;
  Precision precision = Precision::bf16;
  bool fp32_grads = false;
  Optimizer optimizer = Optimizer::adamw;
  int micro_batch = 1;
  Recompute recompute = Recompute::full;
  int64_t rollout_batch = 8;  // sequences each GPU generates at once
  double headroom = 0.10;
  bool seq_parallel = true;
};

struct RlhfModelMemory {
  std::string role;    // actor, critic, reference, reward
  int64_t params = 0;  // whole model
  bool trained = false;
  ModelStateBytes states;  // per GPU
};

struct RlhfEstimate {
  std::vector<RlhfModelMemory> models;
  double kv_cache = 0;
  double activations = 0;  // with the communication buffers of the training pass
  double usable = 0;
  double total() const;
  bool fits() const { return total() <= usable; }
};

RlhfEstimate estimate_rlhf(const RlhfSetup& s);
// Smallest GPU count above s.gpus (node multiples above one node) where it fits; 0 if none
// up to max_gpus.
int64_t smallest_rlhf_cluster(const RlhfSetup& s, int64_t max_gpus = int64_t(1) << 20);

}  // namespace strata::plan
