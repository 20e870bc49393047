// The Hugging Face GPT-2 export and import, and the checkpoint listing, on checkpoints whose every element
// is a known function of its flat position: each exported element is looked up by HF name and
// coordinates and compared with the strata element it must come from (Conv1D's [in, out] is
// strata's [out, in] transposed; wte loses its padding rows).
#include <algorithm>
#include <cstring>

#include "ckpt/hf.h"
#include "ckpt/listing.h"
#include "ckpt/safetensors.h"
#include "core/files.h"
#include "helpers.h"
#include "support/run.h"

using namespace ckpt_test;

namespace {

constexpr int64_t C = 4, L = 2, T = 3, V = 6, Vp = 8, kStep = 7;

std::vector<TensorInfo> gpt2_table(bool moe = false, int64_t C = ::C) {
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

// Saves step `step` of a GPT-2 table of width C on n ranks at ZeRO stage `stage`; returns the
// step dir.
std::string save_gpt2(const TempDir& tmp, int n, int stage, bool moe = false, int64_t step = kStep,
                      int64_t C = ::C) {
  return save_model(tmp.str(), gpt2_table(moe, C),
                    {{"layers", L}, {"dim", C}, {"heads", 2}, {"max_seq", T}, {"vocab", V}, {"padded_vocab", Vp}},
                    n, stage, step);
}

}  // namespace

TEST(CkptHfExport, NamesShapesTransposesAndTheRealVocabulary) {
  TempDir tmp;
  const std::string dir = save_gpt2(tmp, 3, 3);  // ZeRO-3 shards cut tensors anywhere
  const std::string out = tmp.str() + "/hf";
  const HfExportResult r = export_hf(dir, out);
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
  export_hf(dir, out, "BF16");
  EXPECT_EQ(parse_safetensors(out + "/model.safetensors").header.at("transformer.wpe.weight").at("dtype"), "BF16");
  export_hf(dir, out);  // replaces the earlier export
  EXPECT_EQ(parse_safetensors(out + "/model.safetensors").header.at("transformer.wpe.weight").at("dtype"), "F32");
  std::ofstream(out + "/notes.txt") << "mine";
  try {
    export_hf(dir, out, "", "--hf");
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
    export_hf(moe, dest);
    FAIL() << "exported a mixture of experts as GPT-2";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("has MoE blocks ('h.1.mlp.router.weight')"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(fs::exists(dest));
  for (const auto& e : fs::directory_iterator(moe_tmp.path()))
    EXPECT_EQ(e.path().filename().string().find("hf.tmp-export"), std::string::npos) << e.path();
}

// Two `strata ckpt export --hf` processes into one directory (absent, then an earlier export),
// one F32 and one BF16: each writes a directory of its own that one rename moves into place,
// so the directory holds one export whole: both files, and config.json's dtype that of
// model.safetensors (before, 4 of 8 pairs left config.json.tmp + model.safetensors, or one
// file, or nothing, and both exited 0). `--hf ""` is refused before anything is written.
TEST(CkptHfExport, ConcurrentExportsToOneDirectoryLeaveOneWhole) {
  TempDir tmp;
  const std::string dir = save_gpt2(tmp, 1, 0, false, kStep, 256);  // 6 MB to write: the two overlap
  for (int round = 0; round < 8; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    const std::string out = tmp.str() + "/hf" + std::to_string(round / 2);
    std::vector<strata::test::Proc> runs;
    for (const char* dtype : {"F32", "BF16"})
      runs.push_back(strata::test::start({STRATA_BINARY, "ckpt", "export", dir, "--hf", out, "--dtype", dtype}, {},
                                         strata::test::Streams::separate));
    int ok = 0;
    for (strata::test::Proc& p : runs) {
      ASSERT_TRUE(strata::test::wait_for(p, 120)) << p.err;
      ok += p.exit_code() == 0;
      if (p.exit_code() != 0) {
        EXPECT_EQ(std::count(p.err.begin(), p.err.end(), '\n'), 1) << p.err;
      }
    }
    EXPECT_GE(ok, 1);
    std::vector<std::string> files;
    for (const auto& e : fs::directory_iterator(out)) files.push_back(e.path().filename().string());
    std::sort(files.begin(), files.end());
    ASSERT_EQ(files, (std::vector<std::string>{"config.json", "model.safetensors"}));
    const SafetensorsFile f = read_safetensors(out + "/model.safetensors");
    ASSERT_FALSE(f.tensors.empty());
    const nlohmann::json config = nlohmann::json::parse(std::ifstream(out + "/config.json"));
    EXPECT_EQ(config.at("torch_dtype"), f.tensors[0].dtype == "F32" ? "float32" : "bfloat16");
    for (const auto& e : fs::directory_iterator(tmp.path()))
      EXPECT_EQ(e.path().filename().string().find("tmp-export"), std::string::npos) << e.path();
  }
  const strata::test::RunResult r = strata::test::run_strata("ckpt export " + dir + " --hf ''", "cd " + tmp.str() + " &&");
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_EQ(r.out, "strata: error: --hf: empty path; name the output directory\n");
  for (const auto& e : fs::directory_iterator(tmp.path()))
    EXPECT_EQ(e.path().filename().string().rfind(".tmp-export", 0), std::string::npos) << e.path();
}

// A GPT-2 directory as transformers' own gpt2 weights name it: no "transformer." prefix, the
// attention-mask buffers, a tied lm_head, BF16 data.
void write_hf_style(const std::string& from, const std::string& to) {
  const ParsedSafetensors p = parse_safetensors(from + "/model.safetensors");
  std::vector<SafetensorsEntry> entries;
  std::string data;
  for (const auto& [name, e] : p.header.items()) {
    if (name == "__metadata__") continue;
    const size_t b = e.at("data_offsets").at(0), en = e.at("data_offsets").at(1);
    std::string bf16;
    for (size_t i = b; i < en; i += 4) {
      float v;
      std::memcpy(&v, p.data.data() + i, 4);
      const uint16_t h = f32_to_bf16(v);
      bf16.append(reinterpret_cast<const char*>(&h), 2);
    }
    entries.push_back({name.substr(12), "BF16", e.at("shape").get<Shape>(), int64_t(bf16.size())});
    data += bf16;
    if (name == "transformer.wte.weight") {
      entries.push_back({"lm_head.weight", "BF16", e.at("shape").get<Shape>(), int64_t(bf16.size())});
      data += bf16;
    }
  }
  const std::string mask(size_t(T * T) * 2, '\0');
  for (int l = 0; l < L; ++l) {
    entries.push_back({"h." + std::to_string(l) + ".attn.bias", "BF16", {1, 1, T, T}, int64_t(mask.size())});
    data += mask;
  }
  fs::create_directories(to);
  fs::copy_file(from + "/config.json", to + "/config.json");
  strata::atomic_write_file(to + "/model.safetensors", safetensors_header(entries, nlohmann::json::object()) + data);
}

TEST(CkptHfImport, RoundTripsTheExportAndReadsHuggingFacesOwnNaming) {
  TempDir tmp;
  const std::string dir = save_gpt2(tmp, 2, 1);
  export_hf(dir, tmp.str() + "/hf");
  const std::vector<TensorInfo> table = gpt2_table();
  const int64_t n = table_numel(table);
  auto expected = [&](int64_t i, bool bf16) {
    if (i >= V * C && i < Vp * C) return 0.0f;  // wte's padding rows come back zero
    const float v = value(0, kStep, i);
    return bf16 ? bf16_to_f32(f32_to_bf16(v)) : v;
  };
  std::vector<float> params(size_t(n), -1.0f);
  const HfImportResult r = import_hf(tmp.str() + "/hf", table, params.data(), n);
  EXPECT_EQ(r.tensors, 4 + 12 * L);
  EXPECT_EQ(r.model.vocab, V);
  EXPECT_EQ(r.model.heads, 2);
  EXPECT_EQ(r.model.arch, "gpt2");
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(params[size_t(i)], expected(i, false)) << i;

  write_hf_style(tmp.str() + "/hf", tmp.str() + "/hf-own");
  std::fill(params.begin(), params.end(), -1.0f);
  import_hf(tmp.str() + "/hf-own", table, params.data(), n);
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(params[size_t(i)], expected(i, true)) << i;
}

TEST(CkptHfImport, AnotherShapeOrAMixtureOfExpertsIsRefusedNamingTheKey) {
  TempDir tmp;
  export_hf(save_gpt2(tmp, 1, 0), tmp.str() + "/hf");
  auto refusal = [&](const std::vector<TensorInfo>& table) {
    std::vector<float> params(size_t(table_numel(table)));
    try {
      import_hf(tmp.str() + "/hf", table, params.data(), table_numel(table), "--init-from");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("(accepted)");
  };
  std::vector<TensorInfo> wider = gpt2_table();
  for (TensorInfo& t : wider)
    if (t.name == "wpe") t.shape = {T + 1, C};
  EXPECT_NE(refusal(wider).find("--init-from " + tmp.str() +
                                 "/hf/model.safetensors: 'transformer.wpe.weight' is (3,4), expected (4,4)"),
            std::string::npos)
      << refusal(wider);
  std::vector<TensorInfo> small_vocab = gpt2_table();
  small_vocab[0].shape = {V - 1, C};
  EXPECT_NE(refusal(small_vocab).find("config.json's vocab_size 6 does not fit this model's 5 rows of 'wte'"),
            std::string::npos)
      << refusal(small_vocab);
  EXPECT_NE(refusal(gpt2_table(true)).find("this model's 'h.1.mlp.router.weight' has no Hugging Face gpt2 tensor "
                                           "(MoE blocks have none)"),
            std::string::npos)
      << refusal(gpt2_table(true));
  std::ofstream(tmp.str() + "/hf/config.json") << R"({"model_type": "bert"})";
  EXPECT_NE(refusal(gpt2_table()).find("model_type \"bert\"; strata reads \"gpt2\" (GPT2LMHeadModel) and \"llama\""),
            std::string::npos)
      << refusal(gpt2_table());
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
