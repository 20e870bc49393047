// GPT configurations and the flat parameter layout (the table of named views).
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <vector>

#include "core/error.h"
#include "core/finite.h"
#include "nlohmann/json.hpp"
#include "model/gpt.h"
#include "model/shard.h"

namespace strata::model {

GPTConfig GPTConfig::preset(const std::string& name) {
  const ModelPreset& p = find_model_preset(name);
  GPTConfig c;
  c.arch = p.llama ? Arch::llama : Arch::gpt2;
  c.layers = int(p.layers), c.dim = int(p.dim), c.heads = int(p.heads);
  c.kv_heads = p.llama ? int(p.kv_heads) : 0;
  c.ffn = p.llama ? int(p.ffn) : 0;  // 0: the width rule (default_ffn)
  c.seq = int(p.seq);
  c.vocab = int(p.vocab), c.padded_vocab = int(cost::padded_vocab(p.vocab));
  c.rope_theta = p.rope_theta, c.rope_factor = p.rope_factor;
  c.tie_embeddings = p.tied;
  if (p.experts > 0) c.moe.experts = int(p.experts), c.moe.top_k = int(p.top_k);
  return c;
}

Arch parse_arch(const std::string& s) {
  if (s == "gpt2" || s == "gpt") return Arch::gpt2;
  if (s == "llama") return Arch::llama;
  fail_setting(setting("arch"), " ", s, ": must be gpt2 or llama");
}

const char* arch_name(Arch a) { return a == Arch::llama ? "llama" : "gpt2"; }

kernels::Rope GPTConfig::rope() const {
  kernels::Rope r(rope_theta);
  r.factor = rope_factor, r.low_freq_factor = rope_low_freq_factor;
  r.high_freq_factor = rope_high_freq_factor, r.original = rope_original_max_pos;
  return r;
}

// --rope-scaling FACTOR[,LOW,HIGH,ORIGINAL], each number read as typed (core/finite.h). A FACTOR
// below 1 is refused, 0 included: "none" is the one spelling of no scaling, so a typo never
// turns it off silently.
void parse_rope_scaling(const std::string& s, GPTConfig& c) {
  c.rope_factor = 0, c.rope_low_freq_factor = 1, c.rope_high_freq_factor = 4;
  c.rope_original_max_pos = 8192;
  if (s == "none") return;
  const char* usage = "expected none, FACTOR or FACTOR,LOW,HIGH,ORIGINAL (Llama 3.1's llama3 scaling, e.g. "
                      "32,1,4,8192)";
  const std::vector<std::string> parts = split_fields(s);
  STRATA_CHECK_SETTING(parts.size() == 1 || parts.size() == 4, setting("rope-scaling"), " ",
                       s.empty() ? "''" : s, ": ", usage);
  const char* names[] = {"FACTOR", "LOW", "HIGH", "ORIGINAL"};
  const NumberRange ranges[] = {{1, std::numeric_limits<float>::max()}, NumberRange::positive(),
                                NumberRange::positive(), NumberRange::positive()};
  std::vector<float> v;
  for (size_t i = 0; i < parts.size(); ++i) {
    const std::string problem = number_problem(parts[i], ranges[i]);
    STRATA_CHECK_SETTING(problem.empty(), setting("rope-scaling"), " ", s, ": ", names[i], " ",
                         problem, " (", usage, ")");
    v.push_back(std::strtof(parts[i].c_str(), nullptr));
  }
  c.rope_factor = v[0];
  if (v.size() == 4) {
    STRATA_CHECK_SETTING(v[2] > v[1], setting("rope-scaling"), " ", s, ": HIGH ", parts[2],
                         " must be above LOW ", parts[1]);
    c.rope_low_freq_factor = v[1], c.rope_high_freq_factor = v[2], c.rope_original_max_pos = v[3];
  }
}

nlohmann::json GPTConfig::arch_json() const {
  if (!llama()) return nlohmann::json::object();
  nlohmann::json scaling = nullptr;
  if (rope_factor > 0)
    scaling = {{"rope_type", "llama3"},
               {"factor", rope_factor},
               {"low_freq_factor", rope_low_freq_factor},
               {"high_freq_factor", rope_high_freq_factor},
               {"original_max_position_embeddings", rope_original_max_pos}};
  return {{"arch", "llama"},          {"kv_heads", kv()},          {"ffn", hidden()},
          {"norm_eps", norm_eps},     {"rope_theta", rope_theta},  {"rope_scaling", scaling},
          {"tie_embeddings", tie_embeddings}};
}

void GPTConfig::read_arch(const nlohmann::json& j) {
  arch = parse_arch(j.value("arch", "gpt2"));
  if (!llama()) return;
  kv_heads = j.at("kv_heads").get<int>();
  ffn = j.at("ffn").get<int>();
  norm_eps = j.at("norm_eps").get<float>();
  rope_theta = j.at("rope_theta").get<float>();
  tie_embeddings = j.at("tie_embeddings").get<bool>();
  rope_factor = 0;
  if (j.contains("rope_scaling") && !j["rope_scaling"].is_null()) {
    const nlohmann::json& r = j["rope_scaling"];
    rope_factor = r.at("factor").get<float>();
    rope_low_freq_factor = r.at("low_freq_factor").get<float>();
    rope_high_freq_factor = r.at("high_freq_factor").get<float>();
    rope_original_max_pos = r.at("original_max_position_embeddings").get<float>();
  }
}

bool parse_recompute_inputs(const std::string& s) {
  if (s == "fp32") return false;
  if (s == "bf16") return true;
  fail_setting(setting("recompute-inputs"), " ", s.empty() ? "''" : s, ": must be fp32 or bf16");
}

void GPTConfig::validate() const {
  auto positive = [](const char* what, int v) {
    STRATA_CHECK(v > 0, "model ", what, " must be positive (got ", v, ")");
  };
  positive("layers", layers);
  positive("dim", dim);
  positive("heads", heads);
  positive("seq", seq);
  positive("vocab", vocab);
  STRATA_CHECK(dim % heads == 0, "model dim ", dim, " is not divisible by heads ", heads);
  STRATA_CHECK_SETTING(kv_heads >= 0, setting("kv-heads"), " must not be negative (got ", kv_heads,
                       ")");
  STRATA_CHECK_SETTING(ffn >= 0, setting("ffn"), " must not be negative (got ", ffn, ")");
  if (!llama()) {
    STRATA_CHECK_SETTING(kv_heads == 0 || kv_heads == heads, setting("kv-heads"), " ", kv_heads,
                         ": grouped-query attention needs ", setting("arch"),
                         " llama (GPT-2 blocks are multi-head)");
    STRATA_CHECK_SETTING(ffn == 0 || ffn == cost::default_ffn(false, dim), setting("ffn"), " ", ffn,
                         ": GPT-2 blocks have an MLP of 4 x dim; another width needs ",
                         setting("arch"), " llama");
    STRATA_CHECK(tie_embeddings, "GPT-2 blocks tie the output layer to the embedding");
  } else {
    STRATA_CHECK_SETTING(
        heads % kv() == 0, setting("kv-heads"), " ", kv(), " does not divide the model's ", heads,
        " attention heads (each key/value head serves a whole group of query heads)");
    STRATA_CHECK(head_dim() % 2 == 0, "rotary embeddings need an even head size (dim ", dim,
                 " / heads ", heads, " = ", head_dim(), ")");
    STRATA_CHECK_SETTING(norm_eps > 0, setting("norm-eps"), " must be positive (got ", norm_eps,
                         ")");
    STRATA_CHECK_SETTING(rope_theta > 0, setting("rope-theta"), " must be positive (got ",
                         rope_theta, ")");
    STRATA_CHECK_SETTING(rope_factor == 0 || (rope_factor >= 1 && rope_low_freq_factor > 0 &&
                                              rope_high_freq_factor > rope_low_freq_factor &&
                                              rope_original_max_pos > 0),
                         setting("rope-scaling"), " ", rope_factor, ",", rope_low_freq_factor, ",",
                         rope_high_freq_factor, ",", rope_original_max_pos,
                         ": needs FACTOR >= 1, LOW > 0, HIGH > LOW and ORIGINAL > 0");
  }
  STRATA_CHECK(padded_vocab >= vocab, "model padded vocab ", padded_vocab, " is below vocab ",
               vocab);
  GPTConfig dense = *this;  // the experts are counted below, in double
  dense.moe = {};
  const double n = double(dense.num_params());
  moe.validate();
  // Every part of an MoE run (expert regions, expert parallelism, the per-step expert metrics)
  // assumes at least one MoE block.
  STRATA_CHECK_SETTING(!moe.enabled() || moe.every <= layers, setting("moe-every"), " ", moe.every,
                       " is greater than ", setting("layers"), " ", layers,
                       ": no block would be MoE; drop ", setting("experts"), " or lower ",
                       setting("moe-every"));
  STRATA_CHECK_SETTING(recompute.layers >= 0, setting("recompute-layers"),
                       " must not be negative (got ", recompute.layers, ")");
  STRATA_CHECK_SETTING(recompute.layers == 0 || recompute.mode == Recompute::full,
                       setting("recompute-layers"), " ", recompute.layers, " needs ",
                       setting("recompute"), " full");
  STRATA_CHECK_SETTING(!recompute.bf16_inputs || recompute.mode == Recompute::full,
                       setting("recompute-inputs"), " bf16 needs ", setting("recompute"),
                       " full (it rounds the block inputs full "
                       "recomputation keeps)");
  STRATA_CHECK_SETTING(!recompute.bf16_inputs || !moe.enabled(), setting("recompute-inputs"),
                       " bf16 is for dense models: MoE blocks keep every activation "
                       "(",
                       setting("experts"), ")");
  STRATA_CHECK(n < 4e9, "model has ~", n, " parameters: too many for one flat fp32 buffer");
  // Counted in double before any table or buffer is built: 2^31 - 1 experts once spent
  // minutes building before anything failed.
  const double width = moe.expert_width(hidden()), mats = llama() ? 3.0 : 2.0;
  const double experts = double(moe.moe_layers(layers)) * (double(moe.experts) + moe.shared_experts) *
                         (mats * dim * width + width + dim);
  STRATA_CHECK_SETTING(n + experts < 4e9, setting("experts"), " ", moe.experts,
                       ": the model would have ~", n + experts, " parameters (",
                       moe.moe_layers(layers), " MoE blocks x ", moe.experts,
                       " expert MLPs): too many for one flat fp32 buffer");
}

// GPT-2, per block: ln_1 (2C) + c_attn (3C*C + 3C) + attn c_proj (C*C + C) + ln_2 (2C)
//                   + c_fc (4C*C + 4C) + mlp c_proj (4C*C + C)  = 12 C^2 + 13 C
// Llama, per block: 2 norms (2C) + q, k, v (C*(NH + 2NKV)*hs) + o (C*C) + gate, up, down
//                   (3*F*C); embeddings Vp*C, and as much again for an untied lm_head.
// Counted in 64 bits (cost/shapes.h), so an oversized config is refused, not wrapped.
int64_t GPTConfig::num_params() const {
  return cost::local_params(gpt_shape(*this), 1, 0);
}

std::vector<ParamView> build_param_table(const GPTConfig& cfg, TpShard shard,
                                         ExpertShard experts) {
  std::vector<ParamView> t;
  for (ShardedView& v : build_sharded_table(cfg, shard, experts)) t.push_back(std::move(v.view));
  return t;
}

std::vector<DecayRange> decay_ranges(const std::vector<ParamView>& table, int64_t begin,
                                     int64_t end) {
  std::vector<DecayRange> out;
  for (const ParamView& v : table) {
    const int64_t b = std::max(begin, v.offset), e = std::min(end, v.offset + numel(v.shape));
    if (b >= e) continue;
    if (!out.empty() && out.back().decay == v.decay && out.back().end == b)
      out.back().end = e;
    else
      out.push_back({b, e, v.decay});
  }
  return out;
}

TensorLayout tensor_layout(const GPTConfig& cfg) { return tensor_layout(cfg, TpShard{}); }

}  // namespace strata::model
