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
//
// DeepSeekMoE and DeepSeek-V3 (Dai et al. 2024; DeepSeek-AI 2024): fine-grained experts
// (expert_ffn narrower than the dense MLP, so more of them at the same cost), S shared experts
// every token passes through beside its K routed ones (computed once on the rank that holds
// the token, never dispatched; as one MLP of S · expert_ffn hidden units, as Hugging Face's
// DeepseekV3MLP holds them), sigmoid scores with the gates normalised over the chosen k, the
// balance loss per sequence instead of per group, and routing limited to M of G expert groups
// (node-limited routing: a group is the experts of the ep ranks of one host, so a token's
// all-to-all crosses at most M hosts).
#pragma once
#include <cstdint>

#include "cost/shapes.h"

namespace strata::model::expert {

// How the router scores an expert: softmax over the E logits (Switch, Mixtral), or each
// logit's sigmoid (DeepSeek-V3; the gates are the chosen scores normalised to sum 1).
enum class RouterScore : uint8_t { softmax, sigmoid };
// Over which tokens the balance loss counts its fractions: each group (the micro-batch, the
// Switch loss), or each sequence (DeepSeek-V3's sequence-wise balance loss).
enum class AuxScope : uint8_t { group, sequence };

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
  int expert_ffn = 0;       // each routed expert's hidden width; 0: the dense MLP's
  int shared_experts = 0;   // S always-on experts of expert_ffn hidden units each
  RouterScore score = RouterScore::softmax;
  AuxScope aux_scope = AuxScope::group;
  // Node-limited routing: the E experts in route_groups groups of E / G consecutive experts;
  // each token keeps the route_max_groups groups whose best ceil(K / M) scores sum highest and
  // chooses its K experts among theirs. 0: no limit.
  int route_groups = 0, route_max_groups = 0;

  bool enabled() const { return experts > 0; }
  bool is_moe_layer(int layer) const { return experts > 0 && (layer + 1) % every == 0; }
  int moe_layers(int layers) const { return experts > 0 ? layers / every : 0; }
  // Index among the MoE blocks of MoE block `layer` (its expert unit is L + 2 + index).
  int moe_index(int layer) const { return (layer + 1) / every - 1; }
  // Slots per expert for a group of `tokens` tokens: ceil(F · tokens · K / E); dropless: all
  // tokens · K (an expert can never receive more).
  int64_t capacity(int64_t tokens) const;
  // Each routed expert's hidden width, given the dense MLP's (`dense`).
  int expert_width(int dense) const { return expert_ffn > 0 ? expert_ffn : dense; }
  // The shared experts' hidden units together (0: none).
  int shared_width(int dense) const { return shared_experts * expert_width(dense); }
  bool limits_groups() const { return route_max_groups > 0 && route_max_groups < route_groups; }
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
