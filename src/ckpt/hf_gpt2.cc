// Hugging Face GPT2LMHeadModel (ckpt/hf.h): config.json and names.
//   config.json  model_type "gpt2", n_embd, n_layer, n_head, n_positions = n_ctx, vocab_size (the
//                real vocabulary), layer_norm_epsilon 1e-5, activation_function gelu_new
//                (GPT-2's tanh GELU, strata's), tied embeddings, torch_dtype
//   tensors      c_attn's outputs are q | k | v with heads of C/heads each in strata as in HF,
//                so the Conv1D transpose is all the matrices need.
// Dropout settings (resid_pdrop, ...) are read past: they are training settings, not part of
// the weights, and strata trains without dropout.
#include <cstring>

#include "ckpt/hf_arch.h"

namespace strata::ckpt::hf {

using nlohmann::json;

HfModel gpt2_model(const json& c, Problems& p) {
  HfModel m = p.sizes(c, "gpt2",
                      {{"n_embd", &HfModel::dim},
                       {"n_layer", &HfModel::layers},
                       {"n_head", &HfModel::heads},
                       {"vocab_size", &HfModel::vocab},
                       {c.contains("n_positions") ? "n_positions" : "n_ctx", &HfModel::max_seq}});
  m.kv_heads = m.heads;
  m.ffn = 4 * m.dim;
  m.tie = true;
  if (m.heads > 0 && m.dim % m.heads != 0)
    p.add("n_embd ", m.dim, " does not split into n_head ", m.heads, " heads");
  const std::string act = p.text(c, "activation_function", "gelu_new");
  // gelu_pytorch_tanh is the same tanh approximation, computed by PyTorch's kernel.
  if (act != "gelu_new" && act != "gelu_pytorch_tanh")
    p.add("activation_function \"", act, "\": strata's GPT-2 MLP is gelu_new (the tanh GELU)");
  if (c.contains("n_inner") && !c["n_inner"].is_null() && c["n_inner"] != json(4 * m.dim))
    p.add("n_inner ", c["n_inner"].dump(), ": strata's GPT-2 MLP is 4 x n_embd = ", 4 * m.dim,
          " wide");
  const double eps = p.number(c, "layer_norm_epsilon", 1e-5);
  if (eps != 1e-5) p.add("layer_norm_epsilon ", eps, ": strata's LayerNorm uses 1e-5");
  p.must_be(c, "scale_attn_weights", true, "strata scales attention scores by 1/sqrt(head size)");
  p.must_be(c, "scale_attn_by_inverse_layer_idx", false, "strata does not scale scores by layer");
  p.must_be(c, "add_cross_attention", false, "strata's blocks have no cross-attention");
  p.must_be(c, "tie_word_embeddings", true, "strata's GPT-2 ties lm_head to wte");
  return m;
}

json gpt2_config(const HfModel& m) {
  return {{"model_type", "gpt2"},
          {"architectures", {"GPT2LMHeadModel"}},
          {"n_embd", m.dim},
          {"n_layer", m.layers},
          {"n_head", m.heads},
          {"n_positions", m.max_seq},
          {"n_ctx", m.max_seq},
          {"n_inner", nullptr},
          {"vocab_size", m.vocab},
          {"layer_norm_epsilon", 1e-5},
          {"activation_function", "gelu_new"},
          {"scale_attn_weights", true},
          {"resid_pdrop", 0.0},
          {"embd_pdrop", 0.0},
          {"attn_pdrop", 0.0},
          {"tie_word_embeddings", true},
          {"torch_dtype", m.torch_dtype}};
}

std::vector<Name> gpt2_names(const HfModel& m) {
  std::vector<Name> out = {{"wte", "transformer.wte.weight", false, true},
                           {"wpe", "transformer.wpe.weight"}};
  for (int64_t l = 0; l < m.layers; ++l) {
    const std::string s = "h." + std::to_string(l) + ".", h = "transformer." + s;
    for (const char* part :
         {"ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias",
          "attn.c_proj.weight", "attn.c_proj.bias", "ln_2.weight", "ln_2.bias", "mlp.c_fc.weight",
          "mlp.c_fc.bias", "mlp.c_proj.weight", "mlp.c_proj.bias"}) {
      const std::string n = part;
      const bool matrix =
          n.rfind("ln_", 0) != 0 && n.size() > 7 && n.compare(n.size() - 7, 7, ".weight") == 0;
      out.push_back({s + n, h + n, matrix});
    }
  }
  out.push_back({"ln_f.weight", "transformer.ln_f.weight"});
  out.push_back({"ln_f.bias", "transformer.ln_f.bias"});
  return out;
}

std::string gpt2_key(const std::string& name, const HfModel&) {
  auto ends = [&](const char* tail) {
    const size_t n = std::strlen(tail);
    return name.size() >= n && name.compare(name.size() - n, n, tail) == 0;
  };
  if (ends(".attn.bias") || ends(".attn.masked_bias")) return "";  // causal-mask buffers
  if (name == "lm_head.weight") return "";  // the tied head (tie_word_embeddings is required)
  return name.rfind("transformer.", 0) == 0 ? name : "transformer." + name;
}

}  // namespace strata::ckpt::hf
