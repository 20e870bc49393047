// Per-GPU memory and time of one RLHF iteration, by RL algorithm (RlAlgo):
//   ppo (InstructGPT-style, as in DeepSpeed-Chat): actor, critic, reference, reward
//   grpo, rloo: actor, reference, reward (the baseline is the group's mean reward, no critic)
//   dpo: actor (the policy) and reference only; no generation, so no KV cache
// The models' memory:
//   actor (the policy) and critic (value model): trained, 16 bytes per parameter under
//       bf16 + AdamW (zero_model_state_bytes with their ZeRO stage over the N/tp data ranks)
//   reference (frozen copy of the initial actor) and reward model: inference only, the
//       working precision's bytes per parameter (2 under bf16, 4 under fp32), sharded over
//       the N/tp data ranks under ZeRO-3 (the reward model's value head replicated), else
//       replicated
//   KV cache of the actor generating rollouts (not dpo):
//       rollout batch × sequence × layers × 2 (K and V) × kv-hidden/tp × 2 bytes (4 in fp32)
//   activations of whichever trained model is in its backward (the larger of the two)
// Reference shares the actor's shape and reward the critic's. Critic and reward model carry
// a value head of h + 1 parameters (h weights and a bias on the last hidden state, a tensor
// of its own, replicated with its gradient and optimizer state at every stage); an untied model's LM
// head stays counted too (a slight overestimate). For an fp32 strata run (rlhf/ppo.h, any
// rank count, ZeRO 0-3) the model states are exact: tests/rlhf checks
// them to the byte.
//
// Time of one iteration on one GPU, a first-order model (seconds, not a measurement): B =
// rollout_batch sequences (a tp group shares them, as it shares their KV cache; dpo: B
// preference pairs, 2B sequences), T = prompt_len + response_len tokens each, N_m = model
// m's matmul weights (cost::active_matmul_params) over tp, F = peak × efficiency, the
// sustained FLOP/s the planner's step time uses (--efficiency), W = HBM bandwidth.
//   generate  prefill 2·N_a·B·prompt_len / F, then response_len decode steps of
//             max(2·N_a·B / F, (actor's tp-local parameter bytes + the KV cache of B
//             sequences at the mean prefix prompt_len + response_len/2) / W): each new token
//             reads every weight and the cache once (dpo: 0)
//   score     one forward, 2·N_m·B·T / F, of each scoring model: ppo actor (old
//             log-probabilities), reference, critic, reward; grpo/rloo actor, reference,
//             reward; dpo the reference on chosen and rejected
//   train     epochs × (6·N_m·B·T, 8·N_m·B·T under full recomputation) / F for each trained
//             model: ppo actor and critic, the others the actor (dpo: 2B sequences)
// Not counted: attention's 4·T·h per token and layer, ZeRO-3's parameter gathers, gradient
// reduction, the optimizer step, sampling and the elementwise losses. Real decoding at small
// batches is also bound by kernel launches and latency, so generate is a lower bound.
#pragma once
#include <string>
#include <vector>

#include "plan/estimate.h"

namespace strata::plan {

enum class RlAlgo { ppo, grpo, rloo, dpo };
// "ppo", "grpo", "rloo", "dpo"; anything else throws listing them.
RlAlgo parse_rl_algo(const std::string& name);
const char* rl_algo_name(RlAlgo a);
// The algorithms' names, comma-separated: "ppo, grpo, rloo, dpo".
const std::string& rl_algo_choices();

struct RlhfSetup {
  RlAlgo algo = RlAlgo::ppo;
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
  int64_t rollout_batch = 8;  // sequences each GPU generates at once (dpo: pairs per GPU)
  int64_t prompt_len = 256, response_len = 256;  // tokens per sequence (time only)
  int epochs = 1;  // passes of the trained models over each batch
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
  std::vector<RlhfModelMemory> models;  // the algorithm's, in the order of the comment above
  double kv_cache = 0;
  double activations = 0;  // with the communication buffers of the training pass
  double usable = 0;
  // Seconds of one iteration per GPU by phase (the first-order model above).
  double generate_s = 0, score_s = 0, train_s = 0;
  double total() const;
  bool fits() const { return total() <= usable; }
  double iteration_s() const { return generate_s + score_s + train_s; }
  double share(double phase_s) const { return phase_s / iteration_s(); }
};

RlhfEstimate estimate_rlhf(const RlhfSetup& s);
// Smallest GPU count above s.gpus (node multiples above one node) where it fits; 0 if none
// up to max_gpus.
int64_t smallest_rlhf_cluster(const RlhfSetup& s, int64_t max_gpus = int64_t(1) << 20);

}  // namespace strata::plan
