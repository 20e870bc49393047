// A value model: a GPT trunk (model/gpt.h without its logits) and a scalar head on the final
// LayerNorm's output, v = h · w + b at every position. Both the reward model (its value at a
// sequence's last position is the reward, trained on preference pairs with the
// Bradley-Terry loss) and the PPO critic (a value per response position) are one.
// Memory: the GPT's parameters, gradients and activations for (max_batch, cfg.seq), plus
// C + 1 head parameters and gradients; a frozen model has no gradients (bind_frozen).
#pragma once
#include <cstdint>
#include <vector>

#include "core/memory.h"
#include "model/gpt.h"

namespace strata::rlhf {

// Gives a GPT built without state (allocate_state = false) the parameters in `params`
// (num_params floats) and no gradient memory: inference only.
void bind_frozen(model::GPT& gpt, float* params);

class ValueModel {
 public:
  // trainable = false: a frozen model (reward model in PPO): parameters only, no gradients.
  // allocate_state = false: a trained trunk whose parameters and gradients a data-parallel
  // engine owns and binds (parallel/data_parallel.h), or a frozen one whose units someone
  // else binds (frozen_shards.h); the head stays here.
  ValueModel(const model::GPTConfig& cfg, int max_batch, bool trainable = true,
             bool allocate_state = true);
  model::GPT& gpt() { return gpt_; }
  float* params() { return frozen_.data() ? frozen_.as<float>() : gpt_.params(); }
  const model::GPTConfig& config() const { return gpt_.config(); }
  std::vector<float>& head() { return head_; }  // w (C), then b
  float* head_grad() { return head_grad_.data(); }
  // values (B, T) at every position of tokens (B, T).
  void forward(const int32_t* tokens, int B, int T, float* values);
  // Accumulates (+=) the gradients of a loss with d loss / d values = dvalues (B, T) of the
  // last forward into the trunk's and the head's gradients.
  void backward(const float* dvalues);
  void zero_grads();
  void zero_head_grad();

 private:
  model::GPT gpt_;
  Buffer frozen_;  // the parameters of a frozen model (the GPT then owns none)
  std::vector<float> head_, head_grad_, dhidden_, hidden_;
  int B_ = 0, T_ = 0;
};

}  // namespace strata::rlhf
