// The Hugging Face GPT-2 export and the checkpoint listing, on checkpoints whose every element
// is a known function of its flat position: each exported element is looked up by HF name and
// coordinates and compared with the strata element it must come from (Conv1D's [in, out] is
// strata's [out, in] transposed; wte loses its padding rows).
#include <cstring>

#include "ckpt/hf_export.h"
#include "ckpt/listing.h"
#include "helpers.h"

using namespace ckpt_test;

namespace {

constexpr int64_t C = 4, L = 2, T = 3, V = 6, Vp = 8, kStep = 7;

std::vector<TensorInfo> gpt2_table(bool moe = false) {
  std::vector<TensorInfo> t;
  int64_t at = 0;
  auto add = [&](const std::string& name, Shape shape) {
    t.push_back({name, shape, at});
    at += numel(shape);
  };
  add("wte", {Vp, C});
  add("wpe", {T, C});
  for (int l = 0; l < L; ++l) {
    const std::string p = "h." + std::to_string(l) + ".";
    add(p + "ln_1.weight", {C});
    add(p + "ln_1.bias", {C});
    add(p + "attn.c_attn.weight", {3 * C, C});
    add(p + "attn.c_attn.bias", {3 * C});
    add(p + "attn.c_proj.weight", {C, C});
    add(p + "attn.c_proj.bias", {C});
    add(p + "ln_2.weight", {C});
    add(p + "ln_2.bias", {C});
    if (moe && l == 1) {
      add(p + "mlp.router.weight", {2, C});
      continue;
    }
    add(p + "mlp.c_fc.weight", {4 * C, C});
    add(p + "mlp.c_fc.bias", {4 * C});
    add(p + "mlp.c_proj.weight", {C, 4 * C});
    add(p + "mlp.c_proj.bias", {C});
  }
  add("ln_f.weight", {C});
  add("ln_f.bias", {C});
  return t;
}

int64_t table_numel(const std::vector<TensorInfo>& t) { return t.back().offset + numel(t.back().shape); }

// Saves step kStep of a GPT-2 table on n ranks at ZeRO stage `stage`; returns the step dir.
std::string save_gpt2(const TempDir& tmp, int n, int stage, bool moe = false, int64_t step = kStep) {
  const std::vector<TensorInfo> table = gpt2_table(moe);
  FullStates f(table_numel(table), step, false);
  Group g(n);
  g.run([&](int r) {
    Checkpointer c(options(tmp.str(), r, n, &g));
    SaveRequest req = request(f, step, r, n, stage);
    req.tensors = table;
    req.train.config = {{"layers", L}, {"dim", C}, {"heads", 2}, {"max_seq", T}, {"vocab", V}, {"padded_vocab", Vp}};
    c.save(req);
  });
  return tmp.str() + "/ckpt/" + step_dir_name(step);
}

float element(const ParsedSafetensors& p, const std::string& name, int64_t i) {
  const size_t b = p.header.at(name).at("data_offsets").at(0);
  float v;
  std::memcpy(&v, p.data.data() + b + size_t(i) * 4, 4);
  return v;
}

}  // namespace

TEST(CkptHfExport, NamesShapesTransposesAndTheRealVocabulary) {
  TempDir tmp;
  const std::string dir = save_gpt2(tmp, 3, 3);  // ZeRO-3 shards cut tensors anywhere
  const std::string out = tmp.str() + "/hf";
  const HfExportResult r = export_hf_gpt2(dir, out);
  EXPECT_EQ(r.tensors, 4 + 12 * L);
  EXPECT_EQ(r.state, "params");
  const nlohmann::json config = nlohmann::json::parse(test::read_file(out + "/config.json"));
  EXPECT_EQ(config.at("model_type"), "gpt2");
  EXPECT_EQ(config.at("architectures"), nlohmann::json::array({"GPT2LMHeadModel"}));
  EXPECT_EQ(config.at("n_embd"), C);
  EXPECT_EQ(config.at("n_layer"), L);
  EXPECT_EQ(config.at("n_head"), 2);
  EXPECT_EQ(config.at("n_positions"), T);
  EXPECT_EQ(config.at("n_ctx"), T);
  EXPECT_EQ(config.at("vocab_size"), V);
  EXPECT_EQ(config.at("activation_function"), "gelu_new");
  EXPECT_EQ(config.at("tie_word_embeddings"), true);
  EXPECT_EQ(config.at("torch_dtype"), "float32");
  const ParsedSafetensors p = parse_safetensors(out + "/model.safetensors");
  EXPECT_FALSE(p.header.contains("lm_head.weight"));
  size_t bytes = 0;
  for (const TensorInfo& t : gpt2_table()) {
    const std::string hf = "transformer." + t.name + (t.name == "wte" || t.name == "wpe" ? ".weight" : "");
    ASSERT_TRUE(p.header.contains(hf)) << hf;
    const bool matrix = t.shape.size() == 2 && t.name != "wte" && t.name != "wpe";
    const int64_t rows = t.name == "wte" ? V : t.shape[0], cols = t.shape.size() == 2 ? t.shape[1] : 1;
    const Shape want = matrix ? Shape{cols, rows} : t.shape.size() == 2 ? Shape{rows, cols} : t.shape;
    EXPECT_EQ(p.header.at(hf).at("shape").get<Shape>(), want) << hf;
    bytes += size_t(numel(want)) * 4;
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < cols; ++j) {
        const int64_t at = matrix ? j * rows + i : i * cols + j;  // HF's row-major position
        ASSERT_EQ(element(p, hf, at), value(0, kStep, t.offset + i * cols + j)) << hf << " [" << i << "," << j << "]";
      }
  }
  EXPECT_EQ(bytes, p.data.size());
  EXPECT_FALSE(fs::exists(out + ".tmp-export"));
}

TEST(CkptHfExport, ReplacesOnlyAnEarlierExportAndRefusesMixturesOfExperts) {
  TempDir tmp;
  const std::string dir = save_gpt2(tmp, 1, 0);
  const std::string out = tmp.str() + "/hf";
  export_hf_gpt2(dir, out, "BF16");
  EXPECT_EQ(parse_safetensors(out + "/model.safetensors").header.at("transformer.wpe.weight").at("dtype"), "BF16");
  export_hf_gpt2(dir, out);  // replaces the earlier export
  EXPECT_EQ(parse_safetensors(out + "/model.safetensors").header.at("transformer.wpe.weight").at("dtype"), "F32");
  std::ofstream(out + "/notes.txt") << "mine";
  try {
    export_hf_gpt2(dir, out, "", "--hf");
    FAIL() << "exported over a directory holding another file";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--hf " + out + ": holds 'notes.txt'"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(fs::exists(out + "/notes.txt"));
  EXPECT_TRUE(fs::exists(out + "/config.json"));

  TempDir moe_tmp;
  const std::string moe = save_gpt2(moe_tmp, 2, 1, true);
  const std::string dest = moe_tmp.str() + "/hf";
  try {
    export_hf_gpt2(moe, dest);
    FAIL() << "exported a mixture of experts as GPT-2";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("has MoE blocks ('h.1.mlp.router.weight')"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(fs::exists(dest));
  EXPECT_FALSE(fs::exists(dest + ".tmp-export"));
}

TEST(CkptListing, NewestFirstWithLayoutDamageLatestAndIncompleteSaves) {
  TempDir tmp;
  save_gpt2(tmp, 2, 1, false, 4);
  const std::string newest = save_gpt2(tmp, 2, 1, false, 8);
  fs::create_directories(tmp.str() + "/ckpt/.tmp-step-000012");
  std::ofstream(tmp.str() + "/ckpt/.tmp-step-000012/shard-00000-of-00002.bin") << "partial";
  // Damage the older one: a shard cut short.
  const std::string older = tmp.str() + "/ckpt/step-000004/" + shard_file_name(1, 2);
  fs::resize_file(older, fs::file_size(older) / 2);

  const CheckpointListing l = list_checkpoints(tmp.str());
  EXPECT_EQ(l.root, tmp.str() + "/ckpt");
  EXPECT_EQ(l.latest, "step-000008");
  ASSERT_EQ(l.entries.size(), 2u);
  const CheckpointEntry& a = l.entries[0];
  EXPECT_EQ(a.dir, newest);
  EXPECT_EQ(a.step, 8);
  EXPECT_TRUE(a.ok) << a.problem;
  EXPECT_TRUE(a.latest);
  EXPECT_EQ(a.shards, 2);
  EXPECT_EQ((std::vector<int>{a.train.world, a.dp(), a.train.zero_stage}), (std::vector<int>{2, 2, 1}));
  EXPECT_EQ(a.bytes, dir_bytes(newest));
  const CheckpointEntry& b = l.entries[1];
  EXPECT_EQ(b.step, 4);
  EXPECT_FALSE(b.ok);
  EXPECT_FALSE(b.latest);
  EXPECT_NE(b.problem.find("truncated"), std::string::npos) << b.problem;
  ASSERT_EQ(l.incomplete.size(), 1u);
  EXPECT_EQ(l.incomplete[0].name, ".tmp-step-000012");
  EXPECT_EQ(l.incomplete[0].bytes, 7);
  // One step directory lists only itself; without inspection nothing is opened.
  EXPECT_EQ(list_checkpoints(newest).entries.size(), 1u);
  const CheckpointListing quick = list_checkpoints(tmp.str(), false);
  EXPECT_EQ(quick.entries[1].step, 4);
  EXPECT_FALSE(quick.entries[1].ok);
  EXPECT_TRUE(quick.entries[1].problem.empty());
}
