// Hugging Face LlamaForCausalLM (ckpt/hf.h): config.json and names.
//   config.json  model_type "llama", hidden_size, intermediate_size, num_hidden_layers,
//                num_attention_heads, num_key_value_heads (absent: = heads), head_dim (absent
//                or hidden/heads), max_position_embeddings, rms_norm_eps (absent: HF's 1e-6),
//                rope_theta (absent: 10000), vocab_size, tie_word_embeddings (absent: false),
//                hidden_act silu, rope_scaling null or Llama 3.1's rope_type "llama3"
//                (factor, low_freq_factor, high_freq_factor, original_max_position_embeddings;
//                kernels/rope.h). Refused: other rope_scaling types (linear, dynamic, YaRN),
//                attention_bias and mlp_bias (strata's Llama has no biases), another head_dim
//                or activation.
//   tensors      strata's names are HF's without "model."; q and k need no permutation (strata
//                rotates pairs (i, i + hs/2) as rotate_half does); rotary_emb.inv_freq buffers
//                of older files are read past.
// attention_dropout, like GPT-2's dropouts, is a training setting strata does not have.
#include <cstring>

#include "ckpt/hf_arch.h"

namespace strata::ckpt::hf {

using nlohmann::json;

namespace {

// rope_scaling as Llama 3.1 writes it: {"rope_type": "llama3", "factor": 8.0,
// "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}
// (older files say "type").
void read_rope_scaling(const json& r, HfModel& m, Problems& p) {
  const std::string type = !r.is_object()             ? ""
                           : r.contains("rope_type") ? p.text(r, "rope_type", "")
                                                     : p.text(r, "type", "");
  if (type != "llama3") {
    p.add("rope_scaling ", r.dump(), ": strata's RoPE scales frequencies only as Llama 3.1's "
          "rope_type \"llama3\"");
    return;
  }
  double* fields[] = {&m.rope_factor, &m.rope_low, &m.rope_high, &m.rope_original};
  const char* keys[] = {"factor", "low_freq_factor", "high_freq_factor",
                        "original_max_position_embeddings"};
  bool complete = true;
  for (int i = 0; i < 4; ++i) {
    if (!r.contains(keys[i])) p.add("rope_scaling lacks ", keys[i]), complete = false;
    *fields[i] = p.number(r, keys[i], 0);
  }
  if (complete && !(m.rope_factor >= 1 && m.rope_low > 0 && m.rope_high > m.rope_low && m.rope_original > 0))
    p.add("rope_scaling ", r.dump(), ": needs factor >= 1, low_freq_factor > 0, high_freq_factor "
          "> low_freq_factor and original_max_position_embeddings > 0");
}

json rope_scaling_json(const HfModel& m) {
  if (m.rope_factor <= 0) return nullptr;
  return {{"rope_type", "llama3"},
          {"factor", float_decimal(m.rope_factor)},
          {"low_freq_factor", float_decimal(m.rope_low)},
          {"high_freq_factor", float_decimal(m.rope_high)},
          {"original_max_position_embeddings", int64_t(m.rope_original)}};
}

}  // namespace

HfModel llama_model(const json& c, Problems& p) {
  HfModel m = p.sizes(c, "llama",
                      {{"hidden_size", &HfModel::dim},
                       {"num_hidden_layers", &HfModel::layers},
                       {"num_attention_heads", &HfModel::heads},
                       {"intermediate_size", &HfModel::ffn},
                       {"vocab_size", &HfModel::vocab},
                       {"max_position_embeddings", &HfModel::max_seq}});
  m.kv_heads = c.contains("num_key_value_heads") && !c["num_key_value_heads"].is_null()
                   ? p.positive(c, "num_key_value_heads")
                   : m.heads;
  m.norm_eps = p.number(c, "rms_norm_eps", 1e-6);
  m.rope_theta = p.number(c, "rope_theta", 10000.0);
  m.tie = c.contains("tie_word_embeddings") && c["tie_word_embeddings"].is_boolean() &&
          c["tie_word_embeddings"].get<bool>();
  if (c.contains("tie_word_embeddings") && !c["tie_word_embeddings"].is_boolean())
    p.add("tie_word_embeddings ", c["tie_word_embeddings"].dump(), " is not true or false");
  if (m.heads > 0 && m.dim % m.heads != 0)
    p.add("hidden_size ", m.dim, " does not split into num_attention_heads ", m.heads, " heads");
  if (m.heads > 0 && m.kv_heads > 0 && m.heads % m.kv_heads != 0)
    p.add("num_key_value_heads ", m.kv_heads, " does not divide num_attention_heads ", m.heads);
  if (!(m.norm_eps > 0)) p.add("rms_norm_eps ", m.norm_eps, " must be positive");
  if (!(m.rope_theta > 0)) p.add("rope_theta ", m.rope_theta, " must be positive");
  const std::string act = p.text(c, "hidden_act", "silu");
  if (act != "silu") p.add("hidden_act \"", act, "\": strata's Llama MLP is SwiGLU (silu)");
  if (c.contains("head_dim") && !c["head_dim"].is_null() && m.heads > 0 &&
      c["head_dim"] != json(m.dim / m.heads))
    p.add("head_dim ", c["head_dim"].dump(),
          ": strata's heads are hidden_size / num_attention_heads = ", m.dim / m.heads, " wide");
  if (c.contains("rope_scaling") && !c["rope_scaling"].is_null()) read_rope_scaling(c["rope_scaling"], m, p);
  p.must_be(c, "attention_bias", false, "strata's Llama attention has no biases");
  p.must_be(c, "mlp_bias", false, "strata's Llama MLP has no biases");
  return m;
}

json llama_config(const HfModel& m) {
  return {{"architectures", {"LlamaForCausalLM"}},
          {"model_type", "llama"},
          {"hidden_size", m.dim},
          {"intermediate_size", m.ffn},
          {"num_hidden_layers", m.layers},
          {"num_attention_heads", m.heads},
          {"num_key_value_heads", m.kv_heads},
          {"head_dim", m.dim / m.heads},
          {"hidden_act", "silu"},
          {"max_position_embeddings", m.max_seq},
          {"rms_norm_eps", float_decimal(m.norm_eps)},
          {"rope_theta", float_decimal(m.rope_theta)},
          {"rope_scaling", rope_scaling_json(m)},
          {"attention_bias", false},
          {"attention_dropout", 0.0},
          {"mlp_bias", false},
          {"pretraining_tp", 1},
          {"initializer_range", 0.02},
          {"use_cache", true},
          {"vocab_size", m.vocab},
          {"tie_word_embeddings", m.tie},
          {"torch_dtype", m.torch_dtype}};
}

std::vector<Name> llama_names(const HfModel& m) {
  std::vector<Name> out = {{"embed_tokens.weight", "model.embed_tokens.weight", false, true}};
  for (int64_t l = 0; l < m.layers; ++l) {
    const std::string s = "layers." + std::to_string(l) + ".";
    for (const char* part :
         {"input_layernorm.weight", "self_attn.q_proj.weight", "self_attn.k_proj.weight",
          "self_attn.v_proj.weight", "self_attn.o_proj.weight", "post_attention_layernorm.weight",
          "mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight"})
      out.push_back({s + part, "model." + s + part});
  }
  out.push_back({"norm.weight", "model.norm.weight"});
  if (!m.tie) out.push_back({"lm_head.weight", "lm_head.weight", false, true});
  return out;
}

std::string llama_key(const std::string& name, const HfModel& m) {
  const std::string tail = ".rotary_emb.inv_freq";
  if (name.size() >= tail.size() && name.compare(name.size() - tail.size(), tail.size(), tail) == 0)
    return "";
  if (name == "lm_head.weight" && m.tie) return "";  // a tied head some files store anyway
  return name;
}

}  // namespace strata::ckpt::hf
