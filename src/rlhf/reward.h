// Reward model training on preference pairs (Bradley-Terry; Christiano et al. 2017,
// Ouyang et al. 2022): a value model (value_model.h) scores a whole sequence by its value
// at the last position, r = v(prompt + response)[P + R - 1], and learns
//   loss = mean over pairs of -log σ(r_chosen - r_rejected)
// (d/d r_chosen = σ(Δ) - 1, d/d r_rejected = 1 - σ(Δ), Δ = r_chosen - r_rejected).
// A step takes `batch` pairs (2·batch sequences through the trunk); pairs are visited in a
// seeded random order, epoch after epoch. Accuracy: the fraction of pairs with
// r_chosen > r_rejected. Cost per step: forward + backward of 2·batch sequences.
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "nlohmann/json.hpp"
#include "parallel/engine.h"
#include "rlhf/gold.h"
#include "rlhf/sampler.h"
#include "rlhf/value_model.h"

namespace strata::rlhf {

struct RewardConfig {
  int steps = 200;
  int batch = 16;  // pairs per step
  float lr = 1e-3f;
  parallel::OptimConfig optim;
  uint64_t seed = 1;
};

struct RewardResult {
  std::vector<double> losses;  // per step
  double eval_accuracy_before = 0, train_accuracy = 0, eval_accuracy = 0;
  std::vector<float> params;  // the trained trunk (rm.gpt().num_params())
};

// Rewards (n) of the sequences prompt + response, scored in chunks of the model's batch.
std::vector<double> score_sequences(ValueModel& rm, const int32_t* prompts, const int32_t* responses,
                                    int64_t n, int P, int R);
double pair_accuracy(ValueModel& rm, const PairSet& pairs);

// Trains rm from the trunk parameters `params` and its head as it is: the trunk through the
// data-parallel engine (parallel/data_parallel.h) over a group of one rank, the one
// gradient-norm, clipping and AdamW path of every trained model, the head (C + 1 values,
// outside the engine as the PPO critic's) clipped together with it. rm must be built
// trainable with allocate_state = false (the engine owns the trunk's parameters; they stay
// bound to rm after the call, and a copy is returned in RewardResult::params). log(record)
// after every step (may be empty).
RewardResult train_reward(ValueModel& rm, const std::vector<float>& params, const PairSet& train,
                          const PairSet& eval, const RewardConfig& cfg,
                          const std::function<void(const nlohmann::json&)>& log);

// n synthetic pairs (gold.h): two responses per prompt sampled from the policy whose
// parameters `policy` the decoder is bound to, ranked by the gold rule; pairs whose two
// responses tie in gold are skipped (the next prompt is drawn). Throws one line when under
// one prompt in 16 yields a pair (near-greedy sampling: both responses alike), so the prompts
// drawn stay below max(256, 16 n) plus one round whatever the temperature.
PairSet synthetic_pairs(KvDecoder& dec, const model::GPTConfig& cfg, const GoldRule& gold, int64_t n,
                        int P, int R, const SampleConfig& s, uint64_t seed);

}  // namespace strata::rlhf
