// Mixture-of-Experts settings of a GPT (Shazeer et al. 2017; GShard, Lepikhin et al. 2020;
// Switch Transformer, Fedus et al. 2021).
//
// Terms. E experts per MoE block, K experts chosen per token (top-k of the router's
// softmax, gates renormalised over the chosen k), F capacity factor. Every `every`-th block
// (blocks l with (l + 1) % every == 0) replaces its MLP with E expert MLPs of the same shape
// (c_fc (4C, C), c_proj (C, 4C)) and a linear router (E, C) without bias.
// A *group* is the tokens of one micro-batch on one rank (GShard's group): capacity, the
// drop order and the load-balancing loss are defined per group, so two layouts give the
// same losses when they group the same tokens together (e.g. one sequence per micro-batch).
// Capacity per expert and group: ceil(F · tokens · K / E) slots; dropless has no limit.
#pragma once
#include <cstdint>

#include "cost/shapes.h"

namespace strata::model::expert {

struct MoEConfig {
  int experts = 0;  // E; 0: a dense model
  int top_k = 2;    // K
  int every = 1;    // every N-th block is an MoE block
  double capacity_factor = 1.25;  // F (ignored when dropless)
  bool dropless = false;
  float aux_coef = 1e-2f;   // Switch/GShard load-balancing loss coefficient
  float z_coef = 1e-3f;     // router z-loss coefficient (ST-MoE)
  float jitter = 0.0f;      // router input multiplied by U(1 - j, 1 + j) in training
  // Balancing without an auxiliary loss (DeepSeek-V3; Wang et al. 2024): a bias per expert
  // and block, added to the routing probabilities for the top-k choice only (the gates stay
  // the probabilities), moved after every step by rate toward balance: b_e += rate ·
  // sign(mean load - load_e), the loads the step's chosen assignments summed over every rank.
  // 0: off.
  double bias_rate = 0;

  bool enabled() const { return experts > 0; }
  bool is_moe_layer(int layer) const { return experts > 0 && (layer + 1) % every == 0; }
  int moe_layers(int layers) const { return experts > 0 ? layers / every : 0; }
  // Index among the MoE blocks of MoE block `layer` (its expert unit is L + 2 + index).
  int moe_index(int layer) const { return (layer + 1) / every - 1; }
  // Slots per expert for a group of `tokens` tokens: ceil(F · tokens · K / E); dropless: all
  // tokens · K (an expert can never receive more).
  int64_t capacity(int64_t tokens) const;
  // Parameters of the experts a token does not use, over every MoE block: (E - K) expert
  // MLPs of `expert` parameters each (cost::expert_mlp_params; for FLOPs per token: the active
  // parameters are the others).
  int64_t inactive_params(int layers, int64_t expert) const {
    return enabled() ? int64_t(moe_layers(layers)) * (experts - top_k) * expert : 0;
  }
  // Throws one line naming the flag and the numbers (--top-k above --experts, F <= 0, ...).
  void validate() const;
};

}  // namespace strata::model::expert
