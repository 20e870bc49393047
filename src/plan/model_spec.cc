// Model presets with their published shapes, validation, and parameter / FLOP counts.
#include "plan/model_spec.h"

#include <algorithm>

#include "core/error.h"
#include "cost/flops.h"
#include "cost/shapes.h"
#include "model/expert/checks.h"
#include "model/presets.h"

namespace strata::plan {

void apply_arch(ModelSpec& m, const std::string& arch) {
  if (arch == "gpt" || arch == "gpt2") {  // gpt2: strata train's spelling
    m.mlp = MlpKind::gelu;
    m.biases = m.layernorm = m.learned_pos = m.tied = m.dropout = true;
  } else if (arch == "llama") {
    m.mlp = MlpKind::swiglu;
    m.biases = m.layernorm = m.learned_pos = m.tied = m.dropout = false;
  } else {
    fail("--arch '", arch, "' is not known (known: gpt or gpt2, llama)");
  }
}

ModelSpec model_preset(const std::string& name) {
  const model::ModelPreset& p = model::find_model_preset(name, /*published_first=*/true);
  ModelSpec m;
  apply_arch(m, p.llama ? "llama" : "gpt");
  m.name = p.name;
  m.layers = p.layers, m.hidden = p.dim, m.heads = p.heads;
  m.kv_heads = p.kv_heads > 0 ? p.kv_heads : p.heads;
  m.ffn = p.ffn > 0 ? p.ffn : cost::default_ffn(p.llama, p.dim);
  m.seq = p.seq, m.vocab = p.vocab;
  if (p.llama) m.tied = p.tied;
  m.experts = p.experts, m.top_k = p.top_k;
  m.global_batch = p.global_batch;
  m.train_tokens = p.train_tokens;
  m.source = p.source;
  return m;
}

const std::vector<std::string>& model_preset_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> n;
    for (const model::ModelPreset& p : model::model_presets()) n.push_back(p.name);
    return n;
  }();
  return names;
}

void ModelSpec::validate() const {
  STRATA_CHECK(layers > 0, "--layers must be positive (got ", layers, ")");
  STRATA_CHECK(hidden > 0, "--hidden must be positive (got ", hidden, ")");
  STRATA_CHECK(heads > 0, "--heads must be positive (got ", heads, ")");
  STRATA_CHECK(hidden % heads == 0, "--hidden ", hidden, " is not divisible by --heads ", heads);
  STRATA_CHECK(kv_heads > 0 && kv_heads <= heads && heads % kv_heads == 0, "--kv-heads ", kv_heads,
               " must divide --heads ", heads);
  STRATA_CHECK(ffn > 0, "--ffn must be positive (got ", ffn, ")");
  STRATA_CHECK(seq > 0, "--seq must be positive (got ", seq, ")");
  STRATA_CHECK(vocab > 0, "--vocab must be positive (got ", vocab, ")");
  STRATA_CHECK(experts >= 0, "--experts must be 0 (dense) or positive (got ", experts, ")");
  if (experts > 0)
    STRATA_CHECK(top_k >= 1 && top_k <= experts, "--top-k ", top_k, " must be in 1..--experts ",
                 experts);
  // Fine-grained and shared experts, node-limited routing: the engine's checks and words.
  model::expert::check_expert_widths(experts, expert_ffn, shared_experts);
  model::expert::check_route_groups(experts, top_k, route_groups, route_max_groups);
  // Sizes a person typed, bounded so that every count, byte and FLOP figure of the planner
  // (int64 parameter counts times bytes per parameter) stays exact and positive.
  constexpr int64_t kMaxDim = int64_t(1) << 31;
  for (auto [flag, v] : {std::pair{"--layers", layers}, {"--hidden", hidden}, {"--heads", heads},
                         {"--ffn", ffn}, {"--seq", seq}, {"--vocab", vocab},
                         {"--experts", experts}, {"--expert-ffn", expert_ffn},
                         {"--shared-experts", shared_experts}})
    STRATA_CHECK(v <= kMaxDim, flag, " ", v, " is above the planner's limit of ", kMaxDim);
  const double h = double(hidden);
  const double mlp_units = moe() ? double(expert_width()) * (double(experts) + double(shared_experts))
                                 : double(ffn);
  const double approx = double(layers) * (4 * h * h + 3 * h * mlp_units) + 2 * double(vocab) * h +
                        double(seq) * h;
  STRATA_CHECK(approx <= kMaxPlanParams, "the model has about ", approx, " parameters (--layers ",
               layers, ", --hidden ", hidden, ", --ffn ", ffn, ", --experts ", experts,
               moe() ? cat(", --expert-ffn ", expert_width(), ", --shared-experts ", shared_experts)
                     : std::string(),
               "): above the planner's limit of ", kMaxPlanParams);
}

ParamCounts count_params(const ModelSpec& m) {
  m.validate();
  const cost::GptShape g = gpt_shape(m);
  ParamCounts c;
  c.layers = m.layers;
  c.embedding = cost::embedding_params(g, 1, 0);
  c.position = cost::position_params(g);
  c.output_head = cost::head_params(g, 1, 0);
  c.final_norm = cost::norm_params(g);
  c.attention = cost::attention_params(g, 1);
  c.norms = 2 * cost::norm_params(g);
  c.expert_mlp = cost::mlp_params_of(g, 1, cost::dense_ffn(g));
  if (m.moe()) {
    c.experts = m.experts;
    c.top_k = m.top_k;
    c.router = cost::router_params(g);
    c.expert_mlp = cost::expert_mlp_params(g, 1);
    c.shared = cost::shared_mlp_params(g, 1);
  }
  return c;
}

cost::GptShape gpt_shape(const ModelSpec& m) {
  cost::GptShape g;
  g.layers = m.layers, g.dim = m.hidden, g.heads = m.heads, g.kv_heads = m.kv_heads;
  g.ffn = m.ffn, g.max_seq = m.seq;
  g.vocab = m.vocab, g.padded_vocab = m.padded_vocab();
  const cost::BlockParts parts{m.mlp == MlpKind::swiglu, m.biases, m.layernorm, m.learned_pos};
  g.llama = parts.gated;  // the engine's block nearest to it
  if (parts != cost::BlockParts::of(g.llama)) g.parts = parts;
  g.tied = m.tied;
  if (m.moe()) {
    g.moe_layers = m.layers, g.experts = m.experts, g.top_k = m.top_k;
    g.expert_ffn = m.expert_ffn, g.shared_ffn = m.shared_width();
    g.route_groups = m.route_groups, g.route_max_groups = m.route_max_groups;
  }
  return g;
}

ModelSpec model_spec(const cost::GptShape& g) {
  ModelSpec m;
  apply_arch(m, g.llama ? "llama" : "gpt");
  const cost::BlockParts parts = cost::block_parts(g);
  m.mlp = parts.gated ? MlpKind::swiglu : MlpKind::gelu;
  m.biases = parts.biases, m.layernorm = parts.layernorm, m.learned_pos = parts.learned_pos;
  m.tied = g.tied;
  m.layers = g.layers, m.hidden = g.dim, m.heads = g.heads, m.kv_heads = cost::kv_heads_of(g);
  m.ffn = cost::dense_ffn(g), m.seq = g.max_seq;
  // The planner pads the vocabulary itself; rows padded otherwise (a multiple of 64) stand
  // for the vocabulary, since every count is of rows.
  m.vocab = cost::padded_vocab(g.vocab) == g.padded_vocab ? g.vocab : g.padded_vocab;
  STRATA_CHECK(m.padded_vocab() == g.padded_vocab, "a model of ", g.padded_vocab,
               " embedding rows for a vocabulary of ", g.vocab,
               ": the planner pads vocabularies to a multiple of 64");
  if (g.moe_layers > 0) {
    STRATA_CHECK(g.moe_layers == g.layers, "a model with ", g.moe_layers, " MoE blocks of ",
                 g.layers, ": the planner's MoE models route every block (--moe-every 1)");
    m.experts = g.experts, m.top_k = g.top_k, m.expert_ffn = g.expert_ffn;
    const int64_t width = cost::expert_ffn(g);
    STRATA_CHECK(g.shared_ffn % width == 0, "shared experts of ", g.shared_ffn,
                 " hidden units are not whole experts of ", width);
    m.shared_experts = g.shared_ffn / width;
    m.route_groups = g.route_groups, m.route_max_groups = g.route_max_groups;
  }
  return m;
}

double layer_forward_flops_per_token(const ModelSpec& m, double s) {
  m.validate();
  return cost::block_forward_flops_per_token(gpt_shape(m), s, m.moe());
}

double attention_core_forward_flops_per_token(const ModelSpec& m, double s) {
  return cost::attention_core_forward_flops_per_token(double(m.hidden), s);
}

double logits_forward_flops_per_token(const ModelSpec& m) {
  return cost::logits_forward_flops_per_token(gpt_shape(m));
}

double model_flops_per_token(const ModelSpec& m) {
  m.validate();
  return cost::model_flops_per_token(gpt_shape(m), m.seq);
}

}  // namespace strata::plan
