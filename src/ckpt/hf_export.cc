#include "ckpt/hf_export.h"

#include <unistd.h>

#include <cstring>
#include <filesystem>

#include "ckpt/fsutil.h"
#include "ckpt/load.h"
#include "ckpt/safetensors.h"
#include "core/files.h"

namespace fs = std::filesystem;

namespace strata::ckpt {

using nlohmann::json;

namespace {

// One exported tensor: strata's name, HF's, whether it is a matrix to transpose.
struct HfName {
  std::string strata, hf;
  bool transpose = false;
};

std::vector<HfName> gpt2_names(int64_t layers) {
  std::vector<HfName> out = {{"wte", "transformer.wte.weight"}, {"wpe", "transformer.wpe.weight"}};
  for (int64_t l = 0; l < layers; ++l) {
    const std::string s = "h." + std::to_string(l) + ".", h = "transformer." + s;
    for (const char* p : {"ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias",
                          "attn.c_proj.weight", "attn.c_proj.bias", "ln_2.weight", "ln_2.bias", "mlp.c_fc.weight",
                          "mlp.c_fc.bias", "mlp.c_proj.weight", "mlp.c_proj.bias"}) {
      const std::string n = p;
      out.push_back({s + n, h + n, n.size() > 7 && n.compare(n.size() - 7, 7, ".weight") == 0 && n.rfind("ln_", 0) != 0});
    }
  }
  out.push_back({"ln_f.weight", "transformer.ln_f.weight"});
  out.push_back({"ln_f.bias", "transformer.ln_f.bias"});
  return out;
}

int64_t config_int(const json& config, const char* key, const std::string& dir) {
  if (!config.contains(key) || !config[key].is_number_integer())
    fail(dir, ": the manifest's run configuration has no integer '", key,
         "' (needed for a Hugging Face config.json)");
  return config[key].get<int64_t>();
}

// [rows, cols] -> [cols, rows], elements of `es` bytes.
std::string transposed(const std::string& in, int64_t rows, int64_t cols, size_t es) {
  std::string out(in.size(), '\0');
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      std::memcpy(&out[size_t(c * rows + r) * es], &in[size_t(r * cols + c) * es], es);
  return out;
}

// Checks that `out` may be replaced by an export: absent, an empty directory or an earlier one.
void check_replaceable(const std::string& out, const std::string& what) {
  if (!fs::exists(out)) return;
  STRATA_CHECK(fs::is_directory(out), what, " ", out, ": exists and is not a directory");
  for (const auto& e : fs::directory_iterator(out)) {
    const std::string f = e.path().filename().string();
    STRATA_CHECK(f == "config.json" || f == "model.safetensors", what, " ", out, ": holds '", f,
                 "', not only an earlier export; give a new or empty directory");
  }
}

}  // namespace

HfExportResult export_hf_gpt2(const std::string& dir, const std::string& out_dir, const std::string& dtype,
                              const std::string& what) {
  CheckpointReader reader(dir);
  const Manifest& m = reader.manifest();
  const StateInfo* st = &model_state(m, dir);
  const DType out_type = export_dtype(*st, dtype, dir);
  for (const TensorInfo& t : m.tensors)
    STRATA_CHECK(t.name.find(".mlp.router.") == std::string::npos && t.name.find(".mlp.experts.") == std::string::npos,
                 dir, ": has MoE blocks ('", t.name, "'); Hugging Face GPT-2 has no mixture-of-experts layer to export to");
  const json& config = m.train.config;
  const int64_t layers = config_int(config, "layers", dir), C = config_int(config, "dim", dir);
  const int64_t heads = config_int(config, "heads", dir), T = config_int(config, "max_seq", dir);
  const int64_t vocab = config_int(config, "vocab", dir);
  const std::vector<HfName> names = gpt2_names(layers);
  STRATA_CHECK(names.size() == m.tensors.size(), dir, ": ", m.tensors.size(), " tensors, a GPT-2 of ", layers,
               " layers has ", names.size());

  const size_t es = dtype_size(out_type);
  std::vector<SafetensorsEntry> entries;
  std::vector<std::string> data;
  for (const HfName& n : names) {
    const int index = m.find_tensor(n.strata);
    STRATA_CHECK(index >= 0, dir, ": no tensor '", n.strata, "' (not a GPT-2 checkpoint)");
    const TensorInfo& t = m.tensors[size_t(index)];
    std::string bytes(size_t(numel(t.shape)) * es, '\0');
    reader.read_tensor(st->name, t, out_type, bytes.data());
    Shape shape = t.shape;
    if (n.strata == "wte") {  // rows past the real vocabulary are padding
      STRATA_CHECK(shape.size() == 2 && shape[0] >= vocab && shape[1] == C, dir, ": wte is ", shape_str(shape),
                   ", expected (>= ", vocab, ", ", C, ")");
      shape[0] = vocab;
      bytes.resize(size_t(vocab * C) * es);
    }
    if (n.transpose) {
      STRATA_CHECK(shape.size() == 2, dir, ": '", n.strata, "' is ", shape_str(shape), ", not a matrix");
      bytes = transposed(bytes, shape[0], shape[1], es);
      shape = {shape[1], shape[0]};
    }
    entries.push_back({n.hf, out_type == DType::f32 ? "F32" : "BF16", shape, int64_t(bytes.size())});
    data.push_back(std::move(bytes));
  }
  const std::string header = safetensors_header(
      entries, {{"format", "pt"}, {"source", "strata"}, {"step", std::to_string(m.step)}, {"state", st->name}});
  std::vector<std::string_view> parts = {header};
  int64_t total = int64_t(header.size());
  for (const std::string& d : data) parts.push_back(d), total += int64_t(d.size());
  const json hf_config = {{"model_type", "gpt2"},
                          {"architectures", {"GPT2LMHeadModel"}},
                          {"n_embd", C},
                          {"n_layer", layers},
                          {"n_head", heads},
                          {"n_positions", T},
                          {"n_ctx", T},
                          {"n_inner", nullptr},
                          {"vocab_size", vocab},
                          {"layer_norm_epsilon", 1e-5},
                          {"activation_function", "gelu_new"},
                          {"scale_attn_weights", true},
                          {"resid_pdrop", 0.0},
                          {"embd_pdrop", 0.0},
                          {"attn_pdrop", 0.0},
                          {"tie_word_embeddings", true},
                          {"torch_dtype", out_type == DType::f32 ? "float32" : "bfloat16"}};

  std::string out = out_dir;
  while (out.size() > 1 && out.back() == '/') out.pop_back();
  check_replaceable(out, what);
  const std::string staged = out + ".tmp-export";
  std::error_code ec;
  fs::remove_all(staged, ec);  // an export that died before its rename
  try {
    make_dirs(staged);
    strata::atomic_write_file(staged + "/config.json", hf_config.dump(2) + "\n");
    strata::atomic_write_file(staged + "/model.safetensors", parts);
    if (fs::exists(out)) fs::remove_all(out);
    rename_path(staged, out);
    fsync_dir(fs::path(out).parent_path().empty() ? "." : fs::path(out).parent_path().string());
  } catch (...) {
    fs::remove_all(staged, ec);
    throw;
  }
  return {dir, st->name, int(entries.size()), total};
}

}  // namespace strata::ckpt
