#include "ckpt/hf_gpt2.h"

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <map>

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

// in [rows, cols] -> out [cols, rows], elements of `es` bytes.
void transpose(const char* in, char* out, int64_t rows, int64_t cols, size_t es) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) std::memcpy(out + size_t(c * rows + r) * es, in + size_t(r * cols + c) * es, es);
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
      std::string t(bytes.size(), '\0');
      transpose(bytes.data(), t.data(), shape[0], shape[1], es);
      bytes = std::move(t);
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

namespace {

bool is_moe_tensor(const std::string& name) {
  return name.find(".mlp.router.") != std::string::npos || name.find(".mlp.experts.") != std::string::npos;
}

}  // namespace

HfImportResult import_hf_gpt2(const std::string& dir, const std::vector<TensorInfo>& table, float* params,
                              int64_t numel_total, const std::string& what) {
  const std::string config_path = dir + "/config.json", weights_path = dir + "/model.safetensors";
  const json config = json::parse(read_regular_file(config_path, what + " config"), nullptr, false);
  STRATA_CHECK(config.is_object(), what, " ", config_path, ": not a JSON object");
  STRATA_CHECK(config.value("model_type", "") == "gpt2", what, " ", config_path, ": model_type ",
               config.value("model_type", json("missing")).dump(), ", expected \"gpt2\"");
  auto number = [&](const char* key) {
    STRATA_CHECK(config.contains(key) && config[key].is_number_integer(), what, " ", config_path,
                 ": no integer '", key, "'");
    return config[key].get<int64_t>();
  };
  const std::vector<TensorInfo> views = unique_views(table);  // a tied view is filled with its first
  std::map<std::string, const TensorInfo*> by_name;
  for (const TensorInfo& t : views) {
    STRATA_CHECK(!is_moe_tensor(t.name), what, " ", dir, ": this model has MoE blocks ('", t.name,
                 "'); a Hugging Face GPT-2 has no experts to initialise them from");
    by_name[t.name] = &t;
  }
  auto tensor = [&](const std::string& name) -> const TensorInfo& {
    auto it = by_name.find(name);
    STRATA_CHECK(it != by_name.end(), what, ": this model has no tensor '", name, "' (not a GPT-2)");
    return *it->second;
  };
  const TensorInfo& wte = tensor("wte");
  const TensorInfo& wpe = tensor("wpe");
  STRATA_CHECK(wte.shape.size() == 2 && wpe.shape.size() == 2, what, ": wte or wpe of this model is not a matrix");
  const int64_t C = wte.shape[1], layers = number("n_layer"), vocab = number("vocab_size");
  const std::vector<HfName> names = gpt2_names(layers);
  STRATA_CHECK(names.size() == by_name.size(), what, " ", config_path, ": n_layer ", layers, " gives ", names.size(),
               " tensors, this model has ", by_name.size());
  STRATA_CHECK(number("n_embd") == C, what, " ", config_path, ": n_embd ", number("n_embd"), ", this model's dim is ", C);
  STRATA_CHECK(number("n_positions") == wpe.shape[0], what, " ", config_path, ": n_positions ", number("n_positions"),
               ", this model has ", wpe.shape[0], " positions");
  STRATA_CHECK(vocab >= 1 && vocab <= wte.shape[0], what, " ", config_path, ": vocab_size ", vocab,
               " does not fit this model's ", wte.shape[0], " embedding rows");
  const bool tied = config.value("tie_word_embeddings", true);

  const SafetensorsFile f = read_safetensors(weights_path);
  std::map<std::string, const SafetensorsTensor*> file;  // by HF name without "transformer."
  for (const SafetensorsTensor& s : f.tensors) {
    const std::string key = s.name.rfind("transformer.", 0) == 0 ? s.name.substr(12) : s.name;
    auto ends = [&](const char* tail) {
      const size_t n = std::strlen(tail);
      return key.size() >= n && key.compare(key.size() - n, n, tail) == 0;
    };
    if (ends(".attn.bias") || ends(".attn.masked_bias")) continue;  // causal-mask buffers
    if (key == "lm_head.weight") {
      STRATA_CHECK(tied, what, " ", weights_path, ": an untied lm_head.weight; strata ties the head to wte");
      continue;
    }
    file[key] = &s;
  }
  int filled = 0;
  for (const HfName& n : names) {
    const std::string key = n.hf.substr(12);  // every name gpt2_names makes starts "transformer."
    auto it = file.find(key);
    STRATA_CHECK(it != file.end(), what, " ", weights_path, ": no tensor '", key, "' (nor '", n.hf, "')");
    const SafetensorsTensor& s = *it->second;
    const TensorInfo& t = tensor(n.strata);
    STRATA_CHECK(t.offset >= 0 && t.offset + numel(t.shape) <= numel_total, what, ": tensor '", t.name,
                 "' lies outside the ", numel_total, "-element parameter buffer");
    Shape want = t.shape;
    if (n.strata == "wte") want[0] = vocab;
    if (n.transpose) want = {t.shape[1], t.shape[0]};
    STRATA_CHECK(s.shape == want, what, " ", weights_path, ": '", s.name, "' is ", shape_str(s.shape), ", expected ",
                 shape_str(want), n.transpose ? " (Conv1D: [in, out])" : "");
    const std::vector<float> v = read_tensor_f32(f, s);
    float* dst = params + t.offset;
    if (n.transpose) {
      transpose(reinterpret_cast<const char*>(v.data()), reinterpret_cast<char*>(dst), want[0], want[1], sizeof(float));
    } else {
      std::memcpy(dst, v.data(), v.size() * sizeof(float));
      if (n.strata == "wte")  // strata's padding rows
        std::memset(dst + v.size(), 0, size_t(numel(t.shape) - int64_t(v.size())) * sizeof(float));
    }
    file.erase(it);
    ++filled;
  }
  STRATA_CHECK(file.empty(), what, " ", weights_path, ": tensor '", file.empty() ? "" : file.begin()->second->name,
               "' is not a GPT-2 tensor");
  return {filled, vocab, number("n_head")};
}

}  // namespace strata::ckpt
