#include "model/presets.h"

#include "core/error.h"

namespace strata::model {

namespace {

ModelPreset gpt(std::string name, int64_t L, int64_t C, int64_t NH, int64_t seq, int64_t V,
                std::string source) {
  ModelPreset p;
  p.name = std::move(name);
  p.layers = L, p.dim = C, p.heads = NH, p.seq = seq, p.vocab = V;
  p.source = std::move(source);
  return p;
}

// A Llama of L blocks, width C, NH query and NKV key/value heads, MLP width F (0: the rule),
// context seq, vocabulary V, RoPE theta, tied or not.
ModelPreset llama(std::string name, int64_t L, int64_t C, int64_t NH, int64_t NKV, int64_t F,
                  int64_t seq, int64_t V, float theta, bool tied, std::string source) {
  ModelPreset p = gpt(std::move(name), L, C, NH, seq, V, std::move(source));
  p.llama = true;
  p.kv_heads = NKV, p.ffn = F, p.rope_theta = theta, p.tied = tied;
  return p;
}

std::vector<ModelPreset> build() {
  std::vector<ModelPreset> t;
  // strata's own (tests, the demo, benchmarks) and published shapes, smallest first.
  t.push_back(gpt("tiny", 4, 256, 4, 256, 256, "strata's test model (byte vocabulary)"));
  t.push_back(gpt("small", 6, 384, 6, 256, 256, "strata's benchmark model (byte vocabulary)"));
  ModelPreset g2 = gpt("gpt2", 12, 768, 12, 1024, 50257,
                       "Radford et al. 2019 (GPT-2 small, 124M; batch 512)");
  g2.global_batch = 512;
  t.push_back(g2);
  t.push_back(llama("llama-tiny", 4, 256, 4, 2, 0, 256, 256, 10000.0f, false,
                    "strata's Llama test model: GQA 4:2, SwiGLU of llama_ffn(256) = 768"));
  t.push_back(llama("llama-100m", 8, 768, 12, 4, 2048, 1024, 32000, 10000.0f, false,
                    "strata's Llama benchmark model: 99,496,704 parameters"));
  t.push_back(llama("tinyllama-1.1b", 22, 2048, 32, 4, 5632, 2048, 32000, 10000.0f, false,
                    "TinyLlama 1.1B's released config"));
  ModelPreset l32 = llama("llama-3.2-1b", 16, 2048, 32, 8, 8192, 2048, 128256, 500000.0f, true,
                          "Llama 3.2 1B's released config (rope_scaling llama3: factor 32)");
  l32.rope_factor = 32.0f;
  t.push_back(l32);
  t.push_back(llama("llama-3-8b", 32, 4096, 32, 8, 14336, 8192, 128256, 500000.0f, false,
                    "Llama 3 8B's released config"));
  ModelPreset l7 = llama("llama2-7b", 32, 4096, 32, 32, 11008, 4096, 32000, 10000.0f, false,
                         "Touvron et al. 2023 Table 1 and the released config (4M-token "
                         "batches, 2T tokens)");
  l7.global_batch = 1024, l7.train_tokens = 2e12;
  t.push_back(l7);
  ModelPreset l70 = llama("llama2-70b", 80, 8192, 64, 8, 28672, 4096, 32000, 10000.0f, false,
                          "Touvron et al. 2023 Table 1 and the released config (GQA, 8 KV "
                          "heads)");
  l70.global_batch = 1024, l70.train_tokens = 2e12;
  t.push_back(l70);
  ModelPreset mx = llama("mixtral-8x7b", 32, 4096, 32, 8, 14336, 32768, 32000, 1e6f, false,
                         "Jiang et al. 2024 Table 1 (8 experts, top-2, 32k context; batch not "
                         "published, 4M tokens assumed)");
  mx.experts = 8, mx.top_k = 2, mx.global_batch = 128;
  t.push_back(mx);
  ModelPreset g3 = gpt("gpt3-175b", 96, 12288, 96, 2048, 50257,
                       "Brown et al. 2020 Table 2.1 (batch 3.2M tokens, 300B tokens)");
  g3.global_batch = 1536, g3.train_tokens = 300e9;
  t.push_back(g3);
  ModelPreset l405 = llama("llama3-405b", 126, 16384, 128, 8, 53248, 8192, 128256, 500000.0f,
                           false,
                           "Llama 3 herd paper (Dubey et al. 2024) Table 3; 16M-token batches, "
                           "15.6T tokens");
  l405.global_batch = 2048, l405.train_tokens = 15.6e12;
  t.push_back(l405);
  return t;
}

}  // namespace

const std::vector<ModelPreset>& model_presets() {
  static const std::vector<ModelPreset> table = build();
  return table;
}

bool ModelPreset::published() const { return source.rfind("strata's", 0) != 0; }

std::string model_preset_list(bool published_first) {
  std::string out;
  for (int pass = 0; pass < 2; ++pass)
    for (const ModelPreset& p : model_presets())
      if (published_first ? p.published() == (pass == 0) : pass == 0)
        out += (out.empty() ? "" : ", ") + p.name;
  return out;
}

const ModelPreset& find_model_preset(const std::string& name, bool published_first) {
  for (const ModelPreset& p : model_presets())
    if (p.name == name) return p;
  fail("unknown model preset '", name, "' (known: ", model_preset_list(published_first), ")");
}

}  // namespace strata::model
