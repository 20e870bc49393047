// Transformer shapes the planner reasons about, the published presets, and their parameter
// and FLOP counts.
//
// Terms: L layers, h hidden, a heads (head dim h/a), kv-heads (grouped-query attention when
// fewer than a), f MLP width, s sequence, V vocabulary rows (padded to a multiple of 64, as
// strata's GPT and Megatron do), E experts with top-k routing (E = 0: dense), each of fe hidden
// units (fine-grained experts, DeepSeekMoE; fe = f unless --expert-ffn), and S shared experts
// every token passes through, held as one MLP of S·fe units (model/expert/config.h).
// The parameters are counted once, by cost/shapes.h's parts on the model's cost::GptShape
// (gpt_shape below), the engine's count: per layer attention 2h² + 2h·kv (Q, O; K, V of width
// kv = kv-heads·h/a); MLP 2hf (GELU) or 3hf (SwiGLU); for MoE instead E routed MLPs of width
// fe, an h·E router and the shared MLP of width S·fe; norms 2h (RMSNorm) or 4h (LayerNorm).
// GPT-style layers also carry biases: 2h + 2kv + f + h (each MLP of width w: w + h). A token
// uses the router, the shared MLP and K routed ones: active = total - L·(E - K)·(one routed
// MLP). Megatron-LM (Narayanan et al. 2021) counts a GPT as P = 12lh²(1 + 13/(12h) +
// (V+s)/(12lh)): the same sum without the final norm.
//
// A ModelSpec and a cost::GptShape describe the same model. gpt_shape(m) exists for every
// ModelSpec: its MoE routes every layer (moe_layers = L), a block mixing GPT's and Llama's
// parts (a GELU MLP without biases, say) keeps them as cost::BlockParts, and the run settings
// a shape also carries (recomputation) stay unset: the planner's Layout holds them.
// model_spec(g) is the way back, for the shapes the engine builds (model::gpt_shape): what a
// shape does not say (dropout, the published batch and tokens, the name and source) is the
// matching arch's default (apply_arch) or empty; a shape whose MoE blocks are some layers only
// (--moe-every above 1) has none, since the planner's layers are all alike, and throws.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "cost/shapes.h"
#include "model/presets.h"

namespace strata::plan {

enum class MlpKind : uint8_t { gelu, swiglu };

struct ModelSpec {
  std::string name = "custom";
  int64_t layers = 0, hidden = 0, heads = 0, kv_heads = 0, ffn = 0, seq = 0, vocab = 0;
  int64_t experts = 0;  // 0: dense
  int64_t top_k = 0;
  int64_t expert_ffn = 0;      // each routed expert's hidden width (0: ffn)
  int64_t shared_experts = 0;  // S always-on experts of expert_width() units each
  // Node-limited routing: the experts in G groups of E/G, each token's K within M of them
  // (fewer all-to-all rows per token: cost/comm.h); 0: no limit.
  int64_t route_groups = 0, route_max_groups = 0;
  MlpKind mlp = MlpKind::gelu;
  bool biases = true;        // GPT: biases on every linear layer
  bool layernorm = true;     // LayerNorm (weight and bias) vs RMSNorm (weight)
  bool learned_pos = true;   // learned position table (s × h) vs rotary (no parameters)
  bool tied = true;          // output head shares the input embedding
  bool dropout = true;       // dropout after attention and MLP (its 1-byte masks are stored)
  int64_t global_batch = 0;  // published global batch in sequences (0: unknown)
  double train_tokens = 0;   // published training tokens (0: unknown)
  std::string source;        // where the shape comes from

  // Most parameters a model may have (1e15, thousands of times today's largest): at 16-20
  // bytes per parameter every byte count still fits in int64.
  static constexpr double kMaxPlanParams = 1e15;
  int64_t head_dim() const { return hidden / heads; }
  int64_t kv_hidden() const { return kv_heads * head_dim(); }
  int64_t padded_vocab() const { return cost::padded_vocab(vocab); }
  bool moe() const { return experts > 0; }
  // A routed expert's hidden width, and the shared experts' together (0: none).
  int64_t expert_width() const { return expert_ffn > 0 ? expert_ffn : ffn; }
  int64_t shared_width() const { return shared_experts * expert_width(); }
  bool limits_groups() const { return route_max_groups > 0 && route_max_groups < route_groups; }
  // Throws a one-line Error naming the flag for impossible shapes.
  void validate() const;
};

// Applies "gpt" (GELU, LayerNorm, biases, learned positions, tied, dropout) or "llama"
// (SwiGLU, RMSNorm, no biases, rotary, untied, no dropout) conventions.
void apply_arch(ModelSpec& m, const std::string& arch);

// The preset of model/presets.h's table (strata's and the published shapes); throws listing
// the known presets, the published first.
ModelSpec model_preset(const std::string& name);
const std::vector<std::string>& model_preset_names();

struct ParamCounts {
  int64_t embedding = 0;    // input embedding V × h
  int64_t position = 0;     // learned positions s × h
  int64_t output_head = 0;  // untied output projection V × h (0 when tied)
  int64_t final_norm = 0;
  int64_t attention = 0;   // one layer: Q, K, V, O (+ biases)
  int64_t norms = 0;       // one layer: both norms
  int64_t expert_mlp = 0;  // one MLP (one routed expert for MoE; the dense MLP otherwise)
  int64_t router = 0;      // one layer's router (MoE)
  int64_t shared = 0;      // one layer's shared experts, one MLP of S·fe units (MoE; 0: none)
  int64_t experts = 1;     // MLPs per layer
  int64_t top_k = 1;       // MLPs a token visits
  int64_t layers = 0;

  int64_t per_layer() const { return attention + norms + expert_mlp * experts + router + shared; }
  int64_t per_layer_active() const { return attention + norms + expert_mlp * top_k + router + shared; }
  int64_t non_layer() const { return embedding + position + output_head + final_norm; }
  int64_t total() const { return layers * per_layer() + non_layer(); }
  int64_t active() const { return layers * per_layer_active() + non_layer(); }
  // The routed experts' parameters (the shared ones are dense: every token uses them).
  int64_t expert_total() const { return experts > 1 ? layers * expert_mlp * experts : 0; }
  int64_t shared_total() const { return layers * shared; }
};

// The breakdown of cost/shapes.h's count at tp 1 (validates m first).
ParamCounts count_params(const ModelSpec& m);

// The model as the cost models see it, and back (above).
cost::GptShape gpt_shape(const ModelSpec& m);
ModelSpec model_spec(const cost::GptShape& g);

// Megatron-LM's closed form P = 12lh²(1 + 13/(12h) + (V+s)/(12lh)).
inline double megatron_param_count(double l, double h, double V, double s) {
  return 12 * l * h * h * (1 + 13 / (12 * h) + (V + s) / (12 * l * h));
}

// Forward FLOPs of one token through one layer at sequence length s: 2 per active matrix
// weight plus 4·s·h for attention scores and values (Megatron's convention: no causal
// halving; norms and biases left out), and of the logits: 2·h·V (cost/flops.h's).
double layer_forward_flops_per_token(const ModelSpec& m, double s);
double attention_core_forward_flops_per_token(const ModelSpec& m, double s);
double logits_forward_flops_per_token(const ModelSpec& m);

// Model FLOPs per trained token for MFU (cost/flops.h: 6N + 12·L·h·s, N the parameters a
// token multiplies by: cost::active_matmul_params).
double model_flops_per_token(const ModelSpec& m);

}  // namespace strata::plan
