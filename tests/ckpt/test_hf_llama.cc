// The Hugging Face LlamaForCausalLM export and import (ckpt/hf.h), sharded directories, the
// refusals of what strata cannot read, and the placement of whole tensors into a layout.
// Checkpoints hold elements that are a known function of their flat position, so every
// exported element is checked against the strata element it must come from.
#include <algorithm>
#include <cstring>

#include "ckpt/hf.h"
#include "ckpt/safetensors.h"
#include "core/files.h"
#include "helpers.h"

using namespace ckpt_test;

namespace test_hf_llama {  // its own names in a unity build
namespace {

constexpr int64_t C = 8, L = 2, NH = 4, KV = 2, HS = C / NH, F = 12, T = 16, V = 10, Vp = 64,
                  kStep = 5;

std::vector<TensorInfo> llama_table(bool tied) {
  std::vector<TensorInfo> t;
  int64_t at = 0;
  auto add = [&](const std::string& name, Shape shape) {
    t.push_back({name, shape, at});
    at += numel(shape);
  };
  add("embed_tokens.weight", {Vp, C});
  for (int l = 0; l < L; ++l) {
    const std::string p = "layers." + std::to_string(l) + ".";
    add(p + "input_layernorm.weight", {C});
    add(p + "self_attn.q_proj.weight", {NH * HS, C});
    add(p + "self_attn.k_proj.weight", {KV * HS, C});
    add(p + "self_attn.v_proj.weight", {KV * HS, C});
    add(p + "self_attn.o_proj.weight", {C, NH * HS});
    add(p + "post_attention_layernorm.weight", {C});
    add(p + "mlp.gate_proj.weight", {F, C});
    add(p + "mlp.up_proj.weight", {F, C});
    add(p + "mlp.down_proj.weight", {C, F});
  }
  add("norm.weight", {C});
  if (!tied) add("lm_head.weight", {Vp, C});
  return t;
}

// Saves step kStep of a Llama on n ranks at ZeRO stage `stage`; returns the step dir.
std::string save_llama(const TempDir& tmp, int n, int stage, bool tied) {
  const nlohmann::json config = {{"arch", "llama"},
                                 {"layers", L},
                                 {"dim", C},
                                 {"heads", NH},
                                 {"kv_heads", KV},
                                 {"ffn", F},
                                 {"max_seq", T},
                                 {"vocab", V},
                                 {"padded_vocab", Vp},
                                 {"norm_eps", double(1e-5f)},
                                 {"rope_theta", 500000.0},
                                 {"tie_embeddings", tied}};
  return save_model(tmp.str(), llama_table(tied), config, n, stage, kStep);
}

// The import's error, or "(accepted)".
std::string refusal(const std::string& dir, const std::vector<TensorInfo>& table) {
  std::vector<float> params(size_t(table_numel(table)));
  try {
    import_hf(dir, table, params.data(), table_numel(table), "--init-from");
  } catch (const Error& e) {
    return e.what();
  }
  return "(accepted)";
}

bool has(const std::string& s, const std::string& needle) {
  return s.find(needle) != std::string::npos;
}

void edit_config(const std::string& dir, const std::function<void(nlohmann::json&)>& edit) {
  nlohmann::json c = nlohmann::json::parse(test::read_file(dir + "/config.json"));
  edit(c);
  std::ofstream(dir + "/config.json", std::ios::trunc) << c.dump();
}

// Rewrites dir/model.safetensors as `files` shards (tensors dealt round-robin) and an index;
// `edit` may change the weight_map before it is written.
void shard(
    const std::string& dir, int files,
    const std::function<void(nlohmann::json&)>& edit = [](nlohmann::json&) {}) {
  const ParsedSafetensors p = parse_safetensors(dir + "/model.safetensors");
  std::vector<std::vector<SafetensorsEntry>> entries(static_cast<size_t>(files));
  std::vector<std::string> data(static_cast<size_t>(files));
  nlohmann::json map = nlohmann::json::object();
  int i = 0;
  for (const auto& [name, e] : p.header.items()) {
    if (name == "__metadata__") continue;
    const size_t f = size_t(i++ % files), b = e.at("data_offsets").at(0),
                 en = e.at("data_offsets").at(1);
    const std::string file = cat("model-0000", f + 1, "-of-0000", files, ".safetensors");
    entries[f].push_back({name, e.at("dtype"), e.at("shape").get<Shape>(), int64_t(en - b)});
    data[f] += p.data.substr(b, en - b);
    map[name] = file;
  }
  fs::remove(dir + "/model.safetensors");
  for (int f = 0; f < files; ++f)
    strata::atomic_write_file(
        cat(dir, "/model-0000", f + 1, "-of-0000", files, ".safetensors"),
        safetensors_header(entries[size_t(f)], nlohmann::json::object()) + data[size_t(f)]);
  nlohmann::json index = {{"metadata", {{"total_size", p.data.size()}}}, {"weight_map", map}};
  edit(index);
  std::ofstream(dir + "/model.safetensors.index.json") << index.dump();
}

}  // namespace

TEST(CkptHfLlama, ExportNamesShapesConfigAndTheRealVocabulary) {
  for (bool tied : {false, true}) {
    TempDir tmp;
    const std::string out = tmp.str() + "/hf";
    const HfExportResult r =
        export_hf(save_llama(tmp, 3, 3, tied), out);  // ZeRO-3 cuts tensors anywhere
    EXPECT_EQ(r.arch, "llama");
    EXPECT_EQ(r.tensors, 2 + 9 * L + (tied ? 0 : 1));
    const nlohmann::json c = nlohmann::json::parse(test::read_file(out + "/config.json"));
    const nlohmann::json want = {{"architectures", {"LlamaForCausalLM"}},
                                 {"model_type", "llama"},
                                 {"hidden_size", C},
                                 {"intermediate_size", F},
                                 {"num_hidden_layers", L},
                                 {"num_attention_heads", NH},
                                 {"num_key_value_heads", KV},
                                 {"head_dim", HS},
                                 {"hidden_act", "silu"},
                                 {"max_position_embeddings", T},
                                 {"rms_norm_eps", 1e-5},
                                 {"rope_theta", 500000.0},
                                 {"rope_scaling", nullptr},
                                 {"attention_bias", false},
                                 {"mlp_bias", false},
                                 {"vocab_size", V},
                                 {"tie_word_embeddings", tied},
                                 {"torch_dtype", "float32"}};
    for (const auto& [key, value] : want.items()) EXPECT_EQ(c.at(key), value) << key;
    const ParsedSafetensors p = parse_safetensors(out + "/model.safetensors");
    EXPECT_EQ(p.header.contains("lm_head.weight"), !tied);
    size_t bytes = 0;
    for (const TensorInfo& t : llama_table(tied)) {
      const std::string hf = t.name == "lm_head.weight" ? t.name : "model." + t.name;
      ASSERT_TRUE(p.header.contains(hf)) << hf;
      const bool vocab_rows = t.shape[0] == Vp;
      Shape shape = t.shape;
      if (vocab_rows) shape[0] = V;
      EXPECT_EQ(p.header.at(hf).at("shape").get<Shape>(), shape) << hf;
      bytes += size_t(numel(shape)) * 4;
      for (int64_t i = 0; i < numel(shape);
           ++i)  // [out, in] as strata's: no transpose, no permutation
        ASSERT_EQ(element(p, hf, i), value(0, kStep, t.offset + i)) << hf << " " << i;
    }
    EXPECT_EQ(bytes, p.data.size());
  }
}

TEST(CkptHfLlama, ImportRoundTripsOneFileAndShardsExactly) {
  for (bool tied : {false, true}) {
    TempDir tmp;
    const std::string hf = tmp.str() + "/hf";
    export_hf(save_llama(tmp, 2, 1, tied), hf);
    const std::vector<TensorInfo> table = llama_table(tied);
    const int64_t n = table_numel(table);
    auto check = [&](const std::string& what) {
      std::vector<float> params(size_t(n), -1.0f);
      const HfImportResult r = import_hf(hf, table, params.data(), n);
      EXPECT_EQ(r.tensors, int(table.size())) << what;
      EXPECT_EQ((std::vector<int64_t>{r.model.layers, r.model.dim, r.model.heads, r.model.kv_heads,
                                      r.model.ffn, r.model.vocab, r.model.max_seq}),
                (std::vector<int64_t>{L, C, NH, KV, F, V, T}))
          << what;
      EXPECT_EQ(r.model.tie, tied);
      EXPECT_EQ(float(r.model.norm_eps), 1e-5f);
      EXPECT_EQ(r.model.rope_theta, 500000.0);
      for (const TensorInfo& t : table)
        for (int64_t i = 0; i < numel(t.shape); ++i) {
          const bool padding = t.shape[0] == Vp && i >= V * C;  // strata's rows past the vocabulary
          ASSERT_EQ(params[size_t(t.offset + i)], padding ? 0.0f : value(0, kStep, t.offset + i))
              << what << " " << t.name << " " << i;
        }
    };
    check("model.safetensors");
    shard(hf, 3);
    check("3 shards");
  }
}

TEST(CkptHfLlama, UnsupportedConfigIsRefusedOneLineEach) {
  TempDir tmp;
  const std::string hf = tmp.str() + "/hf";
  export_hf(save_llama(tmp, 1, 0, false), hf);
  const std::vector<TensorInfo> table = llama_table(false);
  ASSERT_EQ(refusal(hf, table), "(accepted)");
  edit_config(hf, [](nlohmann::json& c) {
    c["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 32.0}};
    c["attention_bias"] = true;
    c["mlp_bias"] = true;
    c["hidden_act"] = "gelu";
    c["head_dim"] = 4;
  });
  const std::string e = refusal(hf, table);
  const std::string at = "--init-from " + hf + "/config.json: ";
  EXPECT_TRUE(has(e, at + "rope_scaling {\"factor\":32.0,\"rope_type\":\"yarn\"}: strata's RoPE "
                          "scales frequencies only as Llama 3.1's rope_type \"llama3\""))
      << e;
  EXPECT_TRUE(has(e, at + "attention_bias true: strata's Llama attention has no biases")) << e;
  EXPECT_TRUE(has(e, at + "mlp_bias true: strata's Llama MLP has no biases")) << e;
  EXPECT_TRUE(has(e, at + "hidden_act \"gelu\": strata's Llama MLP is SwiGLU (silu)")) << e;
  EXPECT_TRUE(
      has(e, at + "head_dim 4: strata's heads are hidden_size / num_attention_heads = 2 wide"))
      << e;
  EXPECT_EQ(std::count(e.begin(), e.end(), '\n'), 4) << e;  // five problems, one line each
  // Llama 3.1's scaling is read, whole: a key it lacks is named.
  edit_config(hf, [](nlohmann::json& c) {
    c = nlohmann::json::parse(c.dump());
    c["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 32.0}, {"low_freq_factor", 1.0},
                         {"high_freq_factor", 4.0}};
    c.erase("attention_bias"), c.erase("mlp_bias"), c.erase("hidden_act"), c.erase("head_dim");
  });
  EXPECT_EQ(refusal(hf, table),
            "--init-from " + hf + "/config.json: rope_scaling lacks original_max_position_embeddings");
}

TEST(CkptHfLlama, ConfigThatDoesNotMatchItsTensorsNamesEachTensor) {
  TempDir tmp;
  const std::string hf = tmp.str() + "/hf";
  export_hf(save_llama(tmp, 1, 0, false), hf);
  // The model built from a config of 1 key/value head, against files of 2.
  edit_config(hf, [](nlohmann::json& c) { c["num_key_value_heads"] = 1; });
  std::vector<TensorInfo> table = llama_table(false);
  for (TensorInfo& t : table)
    if (has(t.name, "k_proj") || has(t.name, "v_proj")) t.shape[0] = HS;
  const std::string e = refusal(hf, table);
  EXPECT_TRUE(has(e, "--init-from " + hf +
                         "/model.safetensors: 'model.layers.0.self_attn.k_proj.weight' is (4,8), "
                         "expected (2,8)"))
      << e;
  EXPECT_EQ(std::count(e.begin(), e.end(), '\n'), 2 * L - 1) << e;  // k and v of each layer
}

TEST(CkptHfLlama, MissingUnknownAndMisnamedTensorsAreNamed) {
  TempDir tmp;
  const std::string hf = tmp.str() + "/hf";
  export_hf(save_llama(tmp, 1, 0, false), hf);
  const ParsedSafetensors p = parse_safetensors(hf + "/model.safetensors");
  std::vector<SafetensorsEntry> entries;
  std::string data;
  for (const auto& [name, e] : p.header.items()) {
    if (name == "__metadata__" || name == "model.layers.1.mlp.up_proj.weight") continue;
    const size_t b = e.at("data_offsets").at(0), en = e.at("data_offsets").at(1);
    entries.push_back({name, "F32", e.at("shape").get<Shape>(), int64_t(en - b)});
    data += p.data.substr(b, en - b);
  }
  entries.push_back({"model.layers.0.self_attn.q_proj.bias", "F32", {C}, C * 4});
  data += std::string(C * 4, '\0');
  entries.push_back(
      {"model.layers.0.self_attn.rotary_emb.inv_freq", "F32", {HS / 2}, HS / 2 * 4});  // read past
  data += std::string(HS / 2 * 4, '\0');
  strata::atomic_write_file(hf + "/model.safetensors",
                            safetensors_header(entries, nlohmann::json::object()) + data);
  const std::string e = refusal(hf, llama_table(false));
  EXPECT_TRUE(has(
      e, "--init-from " + hf + ": no tensor 'model.layers.1.mlp.up_proj.weight' of shape (12,8)"))
      << e;
  EXPECT_TRUE(has(e, "--init-from " + hf +
                         "/model.safetensors: tensor 'model.layers.0.self_attn.q_proj.bias' is not "
                         "one of a llama model's"))
      << e;
  EXPECT_EQ(std::count(e.begin(), e.end(), '\n'), 1) << e;
}

TEST(CkptHfLlama, DamagedFilesAndIndexesAreOneLine) {
  TempDir tmp;
  const std::string hf = tmp.str() + "/hf";
  export_hf(save_llama(tmp, 1, 0, true), hf);
  const std::vector<TensorInfo> table = llama_table(true);
  const std::string file = hf + "/model.safetensors";
  const auto size = fs::file_size(file);
  // A data section cut short.
  fs::resize_file(file, size - 4);
  std::string e = refusal(hf, table);
  EXPECT_TRUE(has(e, file + ": tensor ")) << e;
  EXPECT_TRUE(has(e, "outside the data section")) << e;
  EXPECT_EQ(std::count(e.begin(), e.end(), '\n'), 0) << e;
  // An offset past 2^63 (read as a negative number) and one past the file.
  for (const char* offsets : {"[0, 18446744073709551615]", "[0, 4611686018427387904]"}) {
    const std::string header =
        std::string(R"({"model.norm.weight":{"dtype":"F32","shape":[8],"data_offsets":)") +
        offsets + "}}";
    const uint64_t len = header.size();
    strata::atomic_write_file(
        file, std::string(reinterpret_cast<const char*>(&len), 8) + header + std::string(32, '\0'));
    e = refusal(hf, table);
    EXPECT_TRUE(has(e, file + ": tensor 'model.norm.weight': data_offsets")) << e;
    EXPECT_EQ(std::count(e.begin(), e.end(), '\n'), 0) << e;
  }

  // Shards: an index naming a missing file, and a tensor its file lacks.
  TempDir tmp2;
  const std::string sharded = tmp2.str() + "/hf";
  export_hf(save_llama(tmp2, 1, 0, true), sharded);
  shard(sharded, 2);
  ASSERT_EQ(refusal(sharded, table), "(accepted)");
  fs::remove(sharded + "/model-00002-of-00002.safetensors");
  e = refusal(sharded, table);
  EXPECT_TRUE(has(e, "--init-from " + sharded +
                         "/model.safetensors.index.json: names model-00002-of-00002.safetensors"))
      << e;
  EXPECT_TRUE(has(e, "which is missing")) << e;
  EXPECT_EQ(std::count(e.begin(), e.end(), '\n'), 0) << e;

  // A tensor the weight_map puts in another shard, and a file name that leaves the directory.
  TempDir tmp3;
  const std::string ckpt = save_llama(tmp3, 1, 0, true), moved = tmp3.str() + "/hf";
  auto sharded_with = [&](const std::function<void(nlohmann::json&)>& edit) {
    fs::remove_all(moved);
    export_hf(ckpt, moved);
    shard(moved, 2, edit);
    return refusal(moved, table);
  };
  e = sharded_with([](nlohmann::json& index) {
    nlohmann::json& where = index["weight_map"]["model.norm.weight"];
    where = where == "model-00001-of-00002.safetensors" ? "model-00002-of-00002.safetensors"
                                                        : "model-00001-of-00002.safetensors";
  });
  EXPECT_TRUE(has(e, "'model.norm.weight' is in model-0000")) << e;
  EXPECT_TRUE(has(e, "the weight_map puts 'model.norm.weight' in model-0000")) << e;
  e = sharded_with([](nlohmann::json& index) {
    index["weight_map"]["model.norm.weight"] = "../elsewhere.safetensors";
  });
  EXPECT_TRUE(
      has(e, "'model.norm.weight' maps to \"../elsewhere.safetensors\", not a file name in"))
      << e;
}

// Whole tensors placed into a layout the way a checkpoint load places saved chunks: a column
// box of one tensor, a row block of another, and ZeRO padding past the layout's elements.
TEST(CkptFillFromGlobal, PlacesBoxesAndZeroesThePadding) {
  const Shape a{4, 6}, b{5, 2};
  const TensorLayout layout = {{"a", a, {1, 2}, {3, 3}, 0, true},
                               {"b", b, {2, 0}, {2, 2}, 9, true}};
  auto global = [&](const TensorPiece& p) -> const float* {
    static std::vector<float> v;
    v.assign(size_t(numel(p.global_shape)), 0.0f);
    for (size_t i = 0; i < v.size(); ++i) v[i] = (p.name == "a" ? 100.0f : 200.0f) + float(i);
    return v.data();
  };
  std::vector<float> out(16, -1.0f);
  fill_from_global({"params", DType::f32, {0, 16}, out.data(), {}}, layout, global);
  const std::vector<float> want = {108, 109, 110, 114, 115, 116, 120, 121, 122,  // a[1:4, 2:5]
                                   204, 205, 206, 207,                           // b[2:4, :]
                                   0,   0,   0};                                 // padding
  EXPECT_EQ(out, want);
  // A shard of the same flat space, in bf16 (exact for these integers).
  std::vector<uint16_t> half(6);
  fill_from_global({"params", DType::bf16, {7, 13}, half.data(), {}}, layout, global);
  for (size_t i = 0; i < half.size(); ++i) EXPECT_EQ(bf16_to_f32(half[i]), want[7 + i]) << i;
}

}  // namespace test_hf_llama
