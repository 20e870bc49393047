// Reading and writing the models of a PPO run (model_io.h).
#include "rlhf/model_io.h"

#include <xxhash.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "ckpt/fsutil.h"
#include "ckpt/load.h"
#include "ckpt/safetensors.h"
#include "core/error.h"

namespace strata::rlhf {

namespace fs = std::filesystem;
using nlohmann::json;

LineLog open_run_log(const std::string& run_dir, const char* key, int64_t done, const std::string& what) {
  std::filesystem::create_directories(run_dir);
  const std::string path = (std::filesystem::path(run_dir) / "metrics.jsonl").string();
  require_replaceable_file(path, what);  // before reading it: a FIFO would block
  std::vector<std::string> keep;
  std::ifstream old;
  if (done > 0) old.open(path);
  for (std::string line; done > 0 && std::getline(old, line);) {
    const json j = json::parse(line, nullptr, false);
    if (j.is_object() && j.value(key, int64_t(0)) <= done) keep.push_back(line);
  }
  LineLog log(path, false, what);
  for (const std::string& l : keep) log.write_line(l);
  return log;
}

bool same_shape(const model::GPTConfig& a, const model::GPTConfig& b) {
  return a.layers == b.layers && a.dim == b.dim && a.heads == b.heads && a.seq == b.seq &&
         a.vocab == b.vocab && a.padded_vocab == b.padded_vocab;
}

json config_json(const model::GPTConfig& c) {
  json j = {{"layers", c.layers}, {"dim", c.dim},     {"heads", c.heads},
            {"max_seq", c.seq},   {"vocab", c.vocab}, {"padded_vocab", c.padded_vocab}};
  j.update(c.arch_json());
  return j;
}

std::string describe(const model::GPTConfig& c) {
  return "layers " + std::to_string(c.layers) + ", dim " + std::to_string(c.dim) + ", heads " +
         std::to_string(c.heads) + ", max seq " + std::to_string(c.seq) + ", vocab " +
         std::to_string(c.vocab);
}

static model::GPTConfig config_from(const json& j, const std::string& where) {
  model::GPTConfig c;
  try {
    c.layers = j.at("layers").get<int>();
    c.dim = j.at("dim").get<int>();
    c.heads = j.at("heads").get<int>();
    c.seq = j.at("max_seq").get<int>();
    c.vocab = j.at("vocab").get<int>();
    c.padded_vocab = j.at("padded_vocab").get<int>();
    c.read_arch(j);
  } catch (const std::exception& e) {
    fail(where, ": no model architecture recorded (", e.what(), ")");
  }
  c.validate();
  return c;
}

static std::vector<ckpt::TensorInfo> gpt_tensors(const model::GPTConfig& cfg, bool head) {
  std::vector<ckpt::TensorInfo> t;
  for (const model::ParamView& v : model::build_param_table(cfg)) t.push_back({v.name, v.shape, v.offset});
  if (head) {
    const int64_t psi = cfg.num_params();
    t.push_back({"v_head.weight", {int64_t(cfg.dim)}, psi});
    t.push_back({"v_head.bias", {1}, psi + cfg.dim});
  }
  return t;
}

static ModelFile load_run(const std::string& path, const std::string& flag) {
  const ckpt::CkptLocation loc = ckpt::locate(path);
  std::vector<std::string> dirs;
  if (!loc.step_dir.empty()) {
    dirs.push_back(loc.step_dir);
  } else {
    std::vector<std::string> notes;
    dirs = ckpt::candidate_dirs(loc.root, &notes);
  }
  STRATA_CHECK(!dirs.empty(), flag, " ", path, ": the run has no checkpoint");
  ModelFile f;
  const std::string dir = dirs.front();
  {
    ckpt::CheckpointReader reader(dir);
    f.cfg = config_from(reader.manifest().train.config, flag + " " + dir);
  }
  f.params.resize(size_t(f.cfg.num_params()));
  ckpt::LoadOptions opts;
  opts.expected_tensors = gpt_tensors(f.cfg, false);
  opts.log = [](const std::string&) {};
  ckpt::load_checkpoint(dir, {{"master", DType::f32, {0, f.cfg.num_params()}, f.params.data(), {"params"}}},
                        opts);
  f.metadata = {{"source", dir}};
  return f;
}

ModelFile load_model(const std::string& path, const std::string& flag) {
  STRATA_CHECK(!path.empty(), flag, ": no file given");
  STRATA_CHECK(fs::exists(path), flag, " ", path, ": no such file or directory");
  if (fs::is_directory(path)) return load_run(path, flag);
  const ckpt::SafetensorsFile st = ckpt::read_safetensors(path);
  STRATA_CHECK(st.metadata.contains("strata_config") && st.metadata["strata_config"].is_string(),
               flag, " ", path, ": no 'strata_config' metadata (not written by strata rlhf; a ",
               "training run's directory is read as well)");
  ModelFile f;
  f.cfg = config_from(json::parse(st.metadata["strata_config"].get<std::string>(), nullptr, false),
                      flag + " " + path);
  f.metadata = st.metadata;
  bool head = false;
  for (const ckpt::SafetensorsTensor& t : st.tensors) head |= t.name == "v_head.weight";
  const int64_t psi = f.cfg.num_params(), C = f.cfg.dim;
  std::vector<float> all(size_t(psi + (head ? C + 1 : 0)));
  ckpt::import_safetensors(path, gpt_tensors(f.cfg, head), all.data(), int64_t(all.size()));
  f.params.assign(all.begin(), all.begin() + psi);
  if (head) f.head.assign(all.begin() + psi, all.end());
  return f;
}

// Header + data of one safetensors file of F32 tensors.
static void write_safetensors(const std::string& path, const std::vector<NamedTensor>& ts,
                              const std::vector<std::vector<int64_t>>& shapes, const json& meta) {
  json header = json::object();
  header["__metadata__"] = meta;
  int64_t at = 0;
  for (size_t i = 0; i < ts.size(); ++i) {
    header[ts[i].name] = {{"dtype", "F32"}, {"shape", shapes[i]}, {"data_offsets", {at, at + 4 * ts[i].n}}};
    at += 4 * ts[i].n;
  }
  std::string hs = header.dump();
  hs.append((8 - hs.size() % 8) % 8, ' ');
  std::string data;
  data.reserve(size_t(8 + hs.size() + at));
  const uint64_t len = hs.size();
  data.append(reinterpret_cast<const char*>(&len), 8);
  data += hs;
  for (const NamedTensor& t : ts) data.append(reinterpret_cast<const char*>(t.data), size_t(4 * t.n));
  ckpt::atomic_write_file(path, data);
}

void save_model(const std::string& path, const model::GPTConfig& cfg, const float* params,
                const std::vector<float>& head, const json& extra) {
  json meta = {{"format", "pt"}, {"source", "strata"}, {"strata_config", config_json(cfg).dump()}};
  for (const auto& [k, v] : extra.items()) meta[k] = v.is_string() ? v.get<std::string>() : v.dump();
  std::vector<NamedTensor> ts;
  std::vector<std::vector<int64_t>> shapes;
  std::vector<std::pair<int64_t, int64_t>> seen;  // a tied view is written once
  for (const model::ParamView& v : model::build_param_table(cfg)) {
    const int64_t n = numel(v.shape);
    bool dup = false;
    for (auto& s : seen) dup |= s.first == v.offset && s.second == n;
    if (dup) continue;
    seen.push_back({v.offset, n});
    ts.push_back({v.name, params + v.offset, n});
    shapes.push_back(std::vector<int64_t>(v.shape.begin(), v.shape.end()));
  }
  if (!head.empty()) {
    STRATA_CHECK(int64_t(head.size()) == cfg.dim + 1, "internal: value head of ", head.size(),
                 " floats for width ", cfg.dim);
    ts.push_back({"v_head.weight", head.data(), cfg.dim});
    shapes.push_back({cfg.dim});
    ts.push_back({"v_head.bias", head.data() + cfg.dim, 1});
    shapes.push_back({1});
  }
  write_safetensors(path, ts, shapes, meta);
}

// xxh64 of the tensors' bytes in the order given: a run state is checksummed as the training
// checkpoints are, so a damaged file is refused instead of resumed.
static std::string tensors_xxh64(const std::vector<NamedTensor>& ts) {
  XXH64_state_t* h = XXH64_createState();
  XXH64_reset(h, 0);
  for (const NamedTensor& t : ts) XXH64_update(h, t.data, size_t(4 * t.n));
  const unsigned long long d = XXH64_digest(h);
  XXH64_freeState(h);
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", d);
  return hex;
}

void save_tensors(const std::string& path, const std::vector<NamedTensor>& ts, const json& metadata) {
  std::vector<std::vector<int64_t>> shapes;
  for (const NamedTensor& t : ts) shapes.push_back({t.n});
  write_safetensors(path, ts, shapes, {{"strata_state", metadata.dump()}, {"strata_xxh64", tensors_xxh64(ts)}});
}

json load_tensors(const std::string& path, const std::vector<NamedTensor>& ts) {
  const ckpt::SafetensorsFile st = ckpt::read_safetensors(path);
  std::ifstream in(path, std::ios::binary);
  for (const NamedTensor& want : ts) {
    const ckpt::SafetensorsTensor* got = nullptr;
    for (const ckpt::SafetensorsTensor& t : st.tensors)
      if (t.name == want.name) got = &t;
    STRATA_CHECK(got, path, ": tensor '", want.name, "' missing (a checkpoint of another run?)");
    STRATA_CHECK(got->dtype == "F32" && got->end - got->begin == 4 * want.n, path, ": tensor '",
                 want.name, "' has ", (got->end - got->begin) / 4, " elements, this run needs ", want.n);
    in.seekg(st.data_start() + got->begin);
    in.read(reinterpret_cast<char*>(const_cast<float*>(want.data)), std::streamsize(4 * want.n));
    STRATA_CHECK(in, path, ": cannot read tensor '", want.name, "'");
  }
  STRATA_CHECK(st.metadata.contains("strata_state"), path, ": no run state in its metadata");
  STRATA_CHECK(st.metadata.contains("strata_xxh64") && st.metadata["strata_xxh64"].is_string(), path,
               ": no checksum in its metadata (damaged, or not a strata run state)");
  const std::string want = st.metadata["strata_xxh64"].get<std::string>(), got = tensors_xxh64(ts);
  STRATA_CHECK(want == got, path, ": checksum mismatch (xxh64 ", got, ", recorded ", want,
               "): the file is damaged");
  const json& state = st.metadata["strata_state"];
  json j = state.is_string() ? json::parse(state.get<std::string>(), nullptr, false) : json(json::value_t::discarded);
  STRATA_CHECK(!j.is_discarded() && j.is_object(), path, ": its strata_state metadata is not a JSON object");
  return j;
}

}  // namespace strata::rlhf
