// RLHF with PPO, GRPO or RLOO: four models in the loop under PPO (Ouyang et al. 2022;
// Ziegler et al. 2019), three under the critic-free GRPO and RLOO (Shao et al. 2024;
// Ahmadian et al. 2024); arithmetic in ppo_math.h.
//
//   actor      the policy, trained; generates rollouts through the KV cache (kv_cache.h)
//   reference  a frozen copy of the initial actor: the per-token KL penalty's anchor
//   reward     a frozen value model (value_model.h): its value at the last position scores a
//              whole response
//   critic     a value model, trained (initialised from the reward model unless given);
//              PPO only
//
// One iteration:
//   generate  rollout_batch prompts (gold.h's synthetic prompts), response_len tokens each,
//             sampled with temperature / top-k (sampler.h); sequence i of iteration k draws
//             from its own Philox stream, so rollouts do not depend on batching
//   score     forwards of actor (old log-probs), reference, critic (values) and reward model
//             over the rollout; PPO: r_t = -β (old_t - ref_t), plus the score at the last
//             token; GAE (γ, λ); advantages whitened over the rollout. GRPO and RLOO: each
//             prompt is answered group_size times (sequence j of prompt p draws from stream
//             p·k + j); a response's reward is its score (minus β Σ_t k1 unless GRPO puts the
//             KL in the loss), its advantage the group's (ppo_math.h), on every token
//   train     `epochs` passes over the rollout in seeded random minibatches: clipped policy
//             loss with entropy bonus (actor; GRPO with --kl-in loss adds β·k3 per token),
//             clipped value loss (critic, PPO), each clipped by its global gradient norm and
//             updated by AdamW; then the KL controller
// Metrics per iteration (metrics.jsonl): proxy reward, gold score, KL (k1 and k3 summed over
// a response, the mean over responses), β, clip fraction, approx-KL, entropy, policy and
// value loss, value clip fraction, explained variance, gradient norms, and the seconds and
// shares of generate / score / train with the generation tokens/s.
// Checkpoints (<run-dir>/ppo-state.safetensors, every ckpt_every iterations): actor and
// critic parameters and AdamW moments, β, the iteration and the configuration; a resumed run
// continues bit for bit. At the end <run-dir>/actor.safetensors and critic.safetensors.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "comm/process_group.h"
#include "nlohmann/json.hpp"
#include "parallel/engine.h"
#include "plan/rlhf.h"
#include "rlhf/model_io.h"
#include "rlhf/sampler.h"

namespace strata::rlhf {

// Where GRPO's KL to the reference goes: β·k3 per token in the loss (the paper's), or
// -β Σ k1 in each response's reward before the group's advantages (PPO and RLOO always).
enum class KlIn { reward, loss };
KlIn parse_kl_in(const std::string& s);  // "reward" | "loss"
const char* kl_in_name(KlIn k);

struct PpoConfig {
  plan::RlAlgo algo = plan::RlAlgo::ppo;  // ppo, grpo or rloo
  model::RecomputePolicy recompute;  // of the trained trunks, actor and critic (docs/recompute.md)
  int iterations = 20;
  int rollout_batch = 16;  // prompts per iteration
  int group_size = 1;      // responses per prompt (GRPO, RLOO: >= 2)
  KlIn kl_in = KlIn::reward;
  bool dr_grpo = false;    // GRPO: no division by the group's std, a constant token normaliser
  int minibatch = 8;       // sequences per update
  int epochs = 4;          // passes over a rollout
  int prompt_len = 8;
  int response_len = 16;
  SampleConfig sample;
  bool kv_cache = true;       // false: every new token recomputes the whole prefix
  // One update off-policy, the asynchronous systems' schedule: iteration k's rollout is
  // sampled with the weights before update k - 1 (iterations 1 and 2 both with the initial
  // ones), and the importance ratio divides by that behaviour policy's log-probabilities,
  // taken from the sampler's logits (sampler.h).
  bool off_policy = false;
  // Rollouts on their own ranks (off_policy implied): the last rollout_ranks ranks of the
  // group only sample (each its share of the prompts) and send every trainer the tokens and
  // behaviour log-probabilities, while the other ranks, the trainers, score and train on the
  // rollout before; after each update trainer 0 sends them the new weights (whole, fp32: the
  // trainers' shards gathered). 0: colocated, every rank samples and trains.
  int rollout_ranks = 0;
  double kl_coef = 0.05;      // β (initial β when adaptive)
  double kl_target = 0;       // > 0: adaptive controller toward this KL per response
  double kl_horizon = 10000;  // of the adaptive controller
  double gamma = 1.0, lambda = 0.95;
  double clip = 0.2, value_clip = 0.2;
  double ent_coef = 0.0;
  float actor_lr = 1e-4f, critic_lr = 1e-4f;
  parallel::OptimConfig optim;
  uint64_t seed = 1;       // prompts, sampling, minibatch order
  uint64_t gold_seed = 1;  // the gold rule (gold.h) for evaluation
  std::string run_dir;     // empty: no files
  int ckpt_every = 0;      // iterations between checkpoints (0: none)
  bool resume = false;     // continue from <run-dir>/ppo-state.safetensors
  bool trace = false;      // Chrome trace of the phases and kernels: <run-dir>/trace-rank0.json
  int zero = 0;            // ZeRO stage of the actor's and critic's engines (0-3)
  // Throws one line naming the flag for an impossible setting.
  void validate() const;
  nlohmann::json to_json() const;
};

// Responses per iteration: rollout_batch prompts × group_size.
inline int rollout_sequences(const PpoConfig& c) { return c.rollout_batch * c.group_size; }
inline bool has_critic(const PpoConfig& c) { return c.algo == plan::RlAlgo::ppo; }

struct PpoModels {
  ModelFile actor, reference, reward, critic;  // critic.params empty: from the reward model (PPO)
  std::string actor_path, reference_path, reward_path, critic_path;  // for messages
};

// Ranks that train: the group's size less the rollout ranks.
inline int trainer_ranks(const PpoConfig& c, int world) { return world - c.rollout_ranks; }

// Checks shapes and heads before anything runs (one line naming the flag and file).
void check_models(const PpoModels& m, const PpoConfig& cfg);

struct PpoResult {
  std::vector<nlohmann::json> iterations;  // the metrics records
  nlohmann::json summary;
};

// Runs the loop; log(record) after every iteration (may be empty). With a group of N > 1
// ranks (every rank calls it with the same arguments) the rollouts are data parallel: rank r
// generates and scores the responses to prompts [r·B/N, (r+1)·B/N) of each iteration (whole
// groups), the shares are
// all-gathered, every global minibatch is split N ways. Actor and critic trunk are trained
// by parallel::DataParallelEngine at ZeRO cfg.zero (also on one process, over a one-rank
// group); the critic's value head is replicated and its gradient summed by hand; the frozen
// models are whole on every rank below ZeRO-3 and sharded at 3 (frozen_shards.h). Rank 0
// writes the files. The same run as one process up to
// fp32 summation order, at any stage.
PpoResult run_ppo(const PpoConfig& cfg, PpoModels models,
                  const std::function<void(const nlohmann::json&)>& log,
                  comm::ProcessGroup* group = nullptr);

}  // namespace strata::rlhf
