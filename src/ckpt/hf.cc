#include "ckpt/hf.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <set>

#include "ckpt/fsutil.h"
#include "ckpt/hf_arch.h"
#include "ckpt/load.h"
#include "core/files.h"
#include "core/staged_dir.h"

namespace fs = std::filesystem;

namespace strata::ckpt {

using nlohmann::json;

namespace hf {

int64_t Problems::positive(const json& c, const char* key) {
  if (!c.contains(key)) {
    add("no '", key, "'");
    return 0;
  }
  const json& v = c[key];
  if (!v.is_number_integer() || v.get<int64_t>() < 1 || v.get<int64_t>() > (int64_t(1) << 31)) {
    add(key, " ", v.dump(), " is not a whole number in [1, 2^31]");
    return 0;
  }
  return v.get<int64_t>();
}

HfModel Problems::sizes(const json& c, const char* arch,
                        std::initializer_list<std::pair<const char*, int64_t HfModel::*>> keys) {
  HfModel m;
  m.arch = arch;
  for (const auto& [key, field] : keys) m.*field = positive(c, key);
  return m;
}

double Problems::number(const json& c, const char* key, double fallback) {
  if (!c.contains(key)) return fallback;
  if (!c[key].is_number()) {
    add(key, " ", c[key].dump(), " is not a number");
    return fallback;
  }
  return c[key].get<double>();
}

std::string Problems::text(const json& c, const char* key, const std::string& fallback) {
  if (!c.contains(key)) return fallback;
  if (!c[key].is_string()) {
    add(key, " ", c[key].dump(), " is not a string");
    return fallback;
  }
  return c[key].get<std::string>();
}

void Problems::must_be(const json& c, const char* key, const json& want, const std::string& why) {
  if (c.contains(key) && c[key] != want)
    add(key, " ", c[key].dump(), ": ", why, " (only ", want.dump(), " is read)");
}

void Problems::throw_if_any() const {
  if (lines.empty()) return;
  // A directory of another model can have thousands; the first dozen say what is wrong.
  constexpr size_t kShown = 12;
  std::string all;
  for (size_t i = 0; i < lines.size() && i < kShown; ++i) all += (i ? "\n" : "") + lines[i];
  if (lines.size() > kShown) all += cat("\n(", lines.size() - kShown, " more problems not shown)");
  throw Error(all);
}

double float_decimal(double v) {
  const float f = float(v);
  char buf[32];
  for (int digits = 1; digits <= 9; ++digits) {
    std::snprintf(buf, sizeof buf, "%.*g", digits, double(f));
    if (std::strtof(buf, nullptr) == f) return std::strtod(buf, nullptr);
  }
  return double(f);
}

namespace {

std::vector<Name> names_of(const HfModel& m) {
  return m.arch == "llama" ? llama_names(m) : gpt2_names(m);
}

std::string key_of(const std::string& file_name, const HfModel& m) {
  return m.arch == "llama" ? llama_key(file_name, m) : gpt2_key(file_name, m);
}

// in [rows, cols] -> out [cols, rows], elements of `es` bytes.
void transpose(const char* in, char* out, int64_t rows, int64_t cols, size_t es) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      std::memcpy(out + size_t(c * rows + r) * es, in + size_t(r * cols + c) * es, es);
}

// The shape of strata tensor `shape` in the Hugging Face file.
Shape hf_shape(const Name& n, Shape shape, int64_t vocab) {
  if (n.vocab_rows) shape[0] = vocab;
  if (n.transpose) shape = {shape[1], shape[0]};
  return shape;
}

}  // namespace
}  // namespace hf

HfModel read_hf_config(const std::string& dir, const std::string& what) {
  const std::string path = dir + "/config.json";
  const json c = json::parse(read_regular_file(path, what + " config"), nullptr, false);
  STRATA_CHECK(c.is_object(), what, " ", path, ": not a JSON object");
  hf::Problems p{what + " " + path, {}};
  const std::string type = p.text(c, "model_type", "");
  HfModel m;
  if (type == "gpt2")
    m = hf::gpt2_model(c, p);
  else if (type == "llama")
    m = hf::llama_model(c, p);
  else
    fail(what, " ", path, ": model_type ", c.value("model_type", json("missing")).dump(),
         "; strata reads \"gpt2\" (GPT2LMHeadModel) and \"llama\" (LlamaForCausalLM)");
  if (c.contains("torch_dtype") && c["torch_dtype"].is_string()) m.torch_dtype = c["torch_dtype"];
  p.throw_if_any();
  return m;
}

// The weight files of a directory: one model.safetensors, or the shards its index names.
struct HfImport::Files {
  std::vector<SafetensorsFile> files;
  std::map<std::string, std::pair<size_t, const SafetensorsTensor*>>
      tensors;  // by file name of the tensor

  Files(const std::string& dir, const std::string& what, std::vector<std::string>& problems) {
    const std::string single = dir + "/model.safetensors",
                      index = dir + "/model.safetensors.index.json";
    if (fs::exists(single)) {
      files.push_back(read_safetensors(single));
    } else {
      STRATA_CHECK(fs::exists(index), what, " ", dir,
                   ": no model.safetensors or model.safetensors.index.json "
                   "(strata reads safetensors, not pytorch_model.bin)");
      read_index(index, what, problems);
    }
    for (size_t f = 0; f < files.size(); ++f)
      for (const SafetensorsTensor& t : files[f].tensors)
        tensors.emplace(t.name, std::make_pair(f, &t));
  }

  void read_index(const std::string& index, const std::string& what,
                  std::vector<std::string>& problems) {
    const std::string head = what + " " + index + ": ";
    const json j = json::parse(read_regular_file(index, what + " index"), nullptr, false);
    STRATA_CHECK(j.is_object() && j.contains("weight_map") && j["weight_map"].is_object(), head,
                 "not a JSON object with a \"weight_map\" object");
    std::map<std::string, size_t> opened;
    std::map<std::string, std::string> where;  // tensor -> file
    for (const auto& [tensor, file] : j["weight_map"].items()) {
      STRATA_CHECK(file.is_string(), head, "'", tensor, "' maps to ", file.dump(),
                   ", not a file name");
      const std::string name = file.get<std::string>();
      // Only files beside the index: a weight_map is input, not a path to follow anywhere.
      STRATA_CHECK(
          !name.empty() && name.find('/') == std::string::npos && name != "." && name != "..", head,
          "'", tensor, "' maps to \"", name, "\", not a file name in ",
          fs::path(index).parent_path().string());
      const std::string path = (fs::path(index).parent_path() / name).string();
      STRATA_CHECK(fs::exists(path), head, "names ", name, " (for '", tensor,
                   "'), which is missing");
      if (!opened.count(name)) opened[name] = files.size(), files.push_back(read_safetensors(path));
      where[tensor] = name;
    }
    for (const auto& [name, f] : opened) {
      std::set<std::string> held;
      for (const SafetensorsTensor& t : files[f].tensors) {
        held.insert(t.name);
        auto w = where.find(t.name);
        if (w == where.end())
          problems.push_back(
              cat(head, name, " holds '", t.name, "', which the weight_map does not name"));
        else if (w->second != name)
          problems.push_back(cat(head, "'", t.name, "' is in ", name,
                                 " but the weight_map puts it in ", w->second));
      }
      for (const auto& [tensor, file] : where)
        if (file == name && !held.count(tensor))
          problems.push_back(cat(head, "the weight_map puts '", tensor, "' in ", name,
                                 ", which has no such tensor"));
    }
  }
};

// One strata tensor's source: the file tensor and how it maps.
struct HfImport::Source {
  hf::Name name;
  const SafetensorsFile* file = nullptr;
  const SafetensorsTensor* tensor = nullptr;
};

HfImport::~HfImport() = default;

HfImport::HfImport(const std::string& dir, const std::vector<TensorInfo>& table,
                   const std::string& what)
    : dir_(dir), what_(what), model_(read_hf_config(dir, what)) {
  std::vector<std::string> problems;
  files_ = std::make_unique<Files>(dir, what, problems);
  // A tied view (the same elements under a second name) is filled through its first.
  const std::vector<TensorInfo> views = unique_views(table);
  std::map<std::string, const TensorInfo*> ours;
  for (const TensorInfo& t : views) ours[t.name] = &t;
  // By the name *_names spells, each file tensor once.
  std::map<std::string, std::pair<const SafetensorsFile*, const SafetensorsTensor*>> file;
  for (const auto& [name, at] : files_->tensors) {
    const std::string key = hf::key_of(name, model_);
    if (key.empty()) continue;
    const SafetensorsFile* f = &files_->files[at.first];
    if (!file.emplace(key, std::make_pair(f, at.second)).second)
      problems.push_back(cat(what, " ", f->path, ": '", name, "' and '", file[key].second->name,
                             "' are the same tensor"));
  }
  auto head = [&](const SafetensorsFile* f) { return cat(what, " ", f ? f->path : dir, ": "); };
  for (const hf::Name& n : hf::names_of(model_)) {
    auto t = ours.find(n.strata);
    if (t == ours.end()) {
      problems.push_back(cat(what, " ", dir, "/config.json describes '", n.hf,
                             "', which this model lacks (its ", model_.arch,
                             " config does not match the model's shape)"));
      continue;
    }
    const TensorInfo& info = *t->second;
    ours.erase(t);
    auto f = file.find(n.hf);
    if (f == file.end()) {
      problems.push_back(cat(head(nullptr), "no tensor '", n.hf, "' of shape ",
                             shape_str(hf::hf_shape(n, info.shape, model_.vocab))));
      continue;
    }
    const auto [sf, st] = f->second;
    file.erase(f);
    if (n.vocab_rows && (info.shape.size() != 2 || model_.vocab > info.shape[0])) {
      problems.push_back(cat(head(nullptr), "config.json's vocab_size ", model_.vocab,
                             " does not fit this model's ", info.shape.empty() ? 0 : info.shape[0],
                             " rows of '", n.strata, "'"));
      continue;
    }
    const Shape want = hf::hf_shape(n, info.shape, model_.vocab);
    if (st->shape != want)
      problems.push_back(cat(head(sf), "'", st->name, "' is ", shape_str(st->shape), ", expected ",
                             shape_str(want), n.transpose ? " (Conv1D: [in, out])" : ""));
    else if (st->dtype != "F32" && st->dtype != "BF16" && st->dtype != "F16")
      problems.push_back(
          cat(head(sf), "'", st->name, "' is ", st->dtype, "; strata reads F32, BF16 or F16"));
    else
      sources_[n.strata] = std::make_unique<Source>(Source{n, sf, st});
  }
  for (const auto& [key, at] : file)
    problems.push_back(cat(head(at.first), "tensor '", at.second->name, "' is not one of a ",
                           model_.arch, " model's"));
  for (const auto& [name, t] : ours)
    problems.push_back(cat(
        what, " ", dir, ": this model's '", name, "' has no Hugging Face ", model_.arch,
        name.find(".mlp.") != std::string::npos ? " tensor (MoE blocks have none)" : " tensor"));
  hf::Problems all{"", std::move(problems)};
  all.throw_if_any();
}

std::string HfImport::dtypes() const {
  std::set<std::string> seen;
  for (const auto& [name, s] : sources_) seen.insert(s->tensor->dtype);
  std::string out;
  for (const std::string& d : seen) out += (out.empty() ? "" : ", ") + d;
  return out;
}

void HfImport::read(const TensorInfo& t, float* out) const {
  auto it = sources_.find(t.name);
  STRATA_CHECK(it != sources_.end(), what_, " ", dir_, ": no Hugging Face tensor for '", t.name,
               "'");
  const Source& s = *it->second;
  const std::vector<float> v = read_tensor_f32(*s.file, *s.tensor);
  // A NaN or an infinity in the weights only shows later as a NaN loss: refuse it here, by the
  // file's tensor name and the element in the file's order.
  for (size_t i = 0; i < v.size(); ++i)
    if (!std::isfinite(v[i]))
      fail(what_, " ", dir_, ": tensor ", s.tensor->name, " holds ", std::isnan(v[i]) ? "a NaN" : "an infinity",
           " at element ", i);
  if (s.name.transpose) {
    hf::transpose(reinterpret_cast<const char*>(v.data()), reinterpret_cast<char*>(out),
                  s.tensor->shape[0], s.tensor->shape[1], sizeof(float));
    return;
  }
  std::memcpy(out, v.data(), v.size() * sizeof(float));
  std::memset(out + v.size(), 0,
              size_t(numel(t.shape) - int64_t(v.size())) * sizeof(float));  // padding rows
}

HfImportResult import_hf(const std::string& dir, const std::vector<TensorInfo>& table,
                         float* params, int64_t numel_total, const std::string& what) {
  const HfImport in(dir, table, what);
  for (const TensorInfo& t : unique_views(table)) {
    STRATA_CHECK(t.offset >= 0 && t.offset + numel(t.shape) <= numel_total, what, ": tensor '",
                 t.name, "' lies outside the ", numel_total, "-element parameter buffer");
    in.read(t, params + t.offset);
  }
  return {in.tensors(), in.model()};
}

namespace {

int64_t config_int(const json& config, const char* key, const std::string& dir) {
  if (!config.contains(key) || !config[key].is_number_integer())
    fail(dir, ": the manifest's run configuration has no integer '", key,
         "' (needed for a Hugging Face config.json)");
  return config[key].get<int64_t>();
}

// The model a checkpoint holds, from the run configuration its manifest records.
HfModel model_of_checkpoint(const json& c, const std::string& dir) {
  HfModel m;
  m.arch = c.value("arch", "gpt2");
  m.layers = config_int(c, "layers", dir);
  m.dim = config_int(c, "dim", dir);
  m.heads = config_int(c, "heads", dir);
  m.max_seq = config_int(c, "max_seq", dir);
  m.vocab = config_int(c, "vocab", dir);
  m.kv_heads = m.heads;
  m.ffn = 4 * m.dim;
  if (m.arch == "llama") {
    m.kv_heads = config_int(c, "kv_heads", dir);
    m.ffn = config_int(c, "ffn", dir);
    m.norm_eps = c.at("norm_eps").get<double>();
    m.rope_theta = c.at("rope_theta").get<double>();
    if (c.contains("rope_scaling") && !c["rope_scaling"].is_null()) {  // model::GPTConfig::arch_json
      const json& r = c["rope_scaling"];
      m.rope_factor = r.at("factor").get<double>();
      m.rope_low = r.at("low_freq_factor").get<double>();
      m.rope_high = r.at("high_freq_factor").get<double>();
      m.rope_original = r.at("original_max_position_embeddings").get<double>();
    }
    m.tie = c.at("tie_embeddings").get<bool>();
  }
  return m;
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

// Writes config.json and model.safetensors into a staging directory of this process, then
// moves it to <out> in one rename (core/staged_dir.h): concurrent exports to one directory
// leave one of them whole.
void write_hf_dir(const std::string& out_dir, const std::string& what, const json& config,
                  const std::vector<std::string_view>& weights) {
  std::string out = out_dir;
  while (out.size() > 1 && out.back() == '/') out.pop_back();
  check_replaceable(out, what);
  const std::string staged = make_staging_dir(out, "tmp-export", what);
  try {
    strata::atomic_write_file(staged + "/config.json", config.dump(2) + "\n");
    strata::atomic_write_file(staged + "/model.safetensors", weights);
  } catch (...) {
    std::error_code ec;
    fs::remove_all(staged, ec);
    throw;
  }
  commit_staging_dir(staged, out, true, what);
  fsync_dir(fs::path(out).parent_path().empty() ? "." : fs::path(out).parent_path().string());
}

}  // namespace

HfExportResult export_hf(const std::string& dir, const std::string& out_dir,
                         const std::string& dtype, const std::string& what) {
  STRATA_CHECK(!out_dir.empty(), what, ": empty path; name the output directory");
  CheckpointReader reader(dir);
  const Manifest& m = reader.manifest();
  const StateInfo* st = &model_state(m, dir);
  const DType out_type = export_dtype(*st, dtype, dir);
  HfModel model = model_of_checkpoint(m.train.config, dir);
  const std::string label = model.arch == "llama" ? "Llama" : "GPT-2";
  for (const TensorInfo& t : m.tensors)
    STRATA_CHECK(t.name.find(".mlp.router.") == std::string::npos &&
                     t.name.find(".mlp.experts.") == std::string::npos,
                 dir, ": has MoE blocks ('", t.name, "'); Hugging Face ", label,
                 " has no mixture-of-experts layer to export to");
  model.torch_dtype = out_type == DType::f32 ? "float32" : "bfloat16";
  const std::vector<hf::Name> names = hf::names_of(model);
  STRATA_CHECK(names.size() == m.tensors.size(), dir, ": ", m.tensors.size(), " tensors, a ", label,
               " of ", model.layers, " layers has ", names.size());

  const size_t es = dtype_size(out_type);
  std::vector<SafetensorsEntry> entries;
  std::vector<std::string> data;
  for (const hf::Name& n : names) {
    const int index = m.find_tensor(n.strata);
    STRATA_CHECK(index >= 0, dir, ": no tensor '", n.strata, "' (not a ", label, " checkpoint)");
    const TensorInfo& t = m.tensors[size_t(index)];
    STRATA_CHECK(!n.transpose || t.shape.size() == 2, dir, ": '", n.strata, "' is ",
                 shape_str(t.shape), ", not a matrix");
    STRATA_CHECK(!n.vocab_rows || (t.shape.size() == 2 && t.shape[0] >= model.vocab), dir, ": '",
                 n.strata, "' is ", shape_str(t.shape), ", fewer rows than the vocabulary of ",
                 model.vocab);
    std::string bytes(size_t(numel(t.shape)) * es, '\0');
    reader.read_tensor(st->name, t, out_type, bytes.data());
    const Shape shape = hf::hf_shape(n, t.shape, model.vocab);
    bytes.resize(size_t(numel(shape)) * es);  // the rows past the real vocabulary are padding
    if (n.transpose) {
      std::string tr(bytes.size(), '\0');
      hf::transpose(bytes.data(), tr.data(), t.shape[0], t.shape[1], es);
      bytes = std::move(tr);
    }
    entries.push_back(
        {n.hf, out_type == DType::f32 ? "F32" : "BF16", shape, int64_t(bytes.size())});
    data.push_back(std::move(bytes));
  }
  const std::string header = safetensors_header(entries, {{"format", "pt"},
                                                          {"source", "strata"},
                                                          {"step", std::to_string(m.step)},
                                                          {"state", st->name}});
  std::vector<std::string_view> parts = {header};
  int64_t total = int64_t(header.size());
  for (const std::string& d : data) parts.push_back(d), total += int64_t(d.size());
  write_hf_dir(out_dir, what,
               model.arch == "llama" ? hf::llama_config(model) : hf::gpt2_config(model), parts);
  return {dir, st->name, model.arch, int(entries.size()), total};
}

}  // namespace strata::ckpt
