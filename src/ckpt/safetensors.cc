#include "ckpt/safetensors.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <map>
#include <set>

#include "ckpt/fsutil.h"
#include "ckpt/load.h"
#include "core/files.h"

namespace strata::ckpt {

using nlohmann::json;

static int64_t st_dtype_size(const std::string& d) {
  static const std::map<std::string, int64_t> sizes = {
      {"F64", 8}, {"F32", 4}, {"F16", 2}, {"BF16", 2}, {"I64", 8}, {"I32", 4}, {"I16", 2},
      {"I8", 1},  {"U64", 8}, {"U32", 4}, {"U16", 2},  {"U8", 1},  {"BOOL", 1},
      {"F8_E4M3", 1}, {"F8_E5M2", 1}};
  auto it = sizes.find(d);
  return it == sizes.end() ? 0 : it->second;
}

// A shape as the header states it: an array of integers >= 0 (256.5 or "256" is not one)
// whose element count fits in int64.
static Shape parse_shape(const json& j, const std::string& path, const std::string& name) {
  if (!j.is_array()) fail(path, ": tensor '", name, "': shape ", j.dump(), " is not an array");
  Shape shape;
  int64_t n = 1;
  for (const json& d : j) {
    const bool whole = d.is_number_integer() &&
                       (d.is_number_unsigned() ? d.get<uint64_t>() <= uint64_t(INT64_MAX)
                                               : d.get<int64_t>() >= 0);
    if (!whole)
      fail(path, ": tensor '", name, "': shape ", j.dump(), " has ", d.dump(),
           ", not a whole number in [0, 2^63)");
    const int64_t v = d.get<int64_t>();
    if (__builtin_mul_overflow(n, v, &n))
      fail(path, ": tensor '", name, "': shape ", j.dump(),
           " has more elements than 64 bits count");
    shape.push_back(v);
  }
  return shape;
}

SafetensorsFile read_safetensors(const std::string& path) {
  require_regular_file(path, "safetensors file");  // a FIFO would block, a directory mislead
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) fail(path, ": cannot open");
  SafetensorsFile f;
  f.path = path;
  f.file_bytes = int64_t(in.tellg());
  if (f.file_bytes < 8) fail(path, ": too short for a safetensors file (", f.file_bytes, " bytes)");
  in.seekg(0);
  uint64_t h = 0;
  in.read(reinterpret_cast<char*>(&h), 8);
  // The format caps the header at 100 MB; anything larger means this is not safetensors.
  if (h > uint64_t(f.file_bytes - 8) || h > 100000000)
    fail(path, ": header length ", h, " does not fit in the file (", f.file_bytes, " bytes)");
  f.header_bytes = int64_t(h);
  std::string header(size_t(h), '\0');
  in.read(header.data(), std::streamsize(h));
  json j = json::parse(header, nullptr, false);
  if (j.is_discarded() || !j.is_object()) fail(path, ": header is not a JSON object");
  const int64_t data_bytes = f.file_bytes - f.data_start();
  for (const auto& [name, t] : j.items()) {
    if (name == "__metadata__") {
      f.metadata = t;
      continue;
    }
    SafetensorsTensor st;
    st.name = name;
    try {
      st.dtype = t.at("dtype").get<std::string>();
      st.shape = parse_shape(t.at("shape"), path, name);
      st.begin = t.at("data_offsets").at(0).get<int64_t>();
      st.end = t.at("data_offsets").at(1).get<int64_t>();
    } catch (const json::exception& e) {
      fail(path, ": tensor '", name, "': malformed entry (", e.what(), ")");
    }
    const int64_t es = st_dtype_size(st.dtype);
    if (es == 0) fail(path, ": tensor '", name, "': unknown dtype '", st.dtype, "'");
    for (int64_t d : st.shape)
      if (d < 0) fail(path, ": tensor '", name, "': negative dimension in ", shape_str(st.shape));
    if (st.begin < 0 || st.end < st.begin || st.end > data_bytes)
      fail(path, ": tensor '", name, "': data_offsets [", st.begin, ",", st.end,
           "] outside the data section (", data_bytes, " bytes)");
    int64_t bytes = 0;
    if (__builtin_mul_overflow(numel(st.shape), es, &bytes))
      fail(path, ": tensor '", name, "': ", st.dtype, " ", shape_str(st.shape),
           " needs more bytes than 64 bits count");
    if (st.end - st.begin != bytes)
      fail(path, ": tensor '", name, "': ", st.dtype, " ", shape_str(st.shape), " needs ",
           numel(st.shape) * es, " bytes, data_offsets give ", st.end - st.begin);
    f.tensors.push_back(std::move(st));
  }
  std::sort(f.tensors.begin(), f.tensors.end(),
            [](const SafetensorsTensor& a, const SafetensorsTensor& b) { return a.begin < b.begin; });
  // The format requires the tensors to tile the data section exactly.
  int64_t at = 0;
  for (const SafetensorsTensor& t : f.tensors) {
    if (t.begin != at)
      fail(path, ": tensor '", t.name, "' starts at ", t.begin, ", expected ", at,
           t.begin < at ? " (overlap)" : " (hole)");
    at = t.end;
  }
  if (at != data_bytes) fail(path, ": tensors cover ", at, " of ", data_bytes, " data bytes (truncated or trailing data)");
  return f;
}

DType export_dtype(const StateInfo& st, const std::string& dtype, const std::string& dir) {
  DType out = st.dtype;
  if (dtype == "F32" || dtype == "f32") out = DType::f32;
  else if (dtype == "BF16" || dtype == "bf16") out = DType::bf16;
  else if (!dtype.empty())
    fail_setting(setting("dtype"), " ", dtype, ": expected F32 or BF16");
  STRATA_CHECK(out == DType::f32 || out == DType::bf16, dir, ": state '", st.name, "' is ",
               dtype_name(st.dtype), "; export writes F32 or BF16");
  return out;
}

std::string safetensors_header(const std::vector<SafetensorsEntry>& tensors, const json& metadata) {
  json header = json::object();
  header["__metadata__"] = metadata;
  int64_t at = 0;
  for (const SafetensorsEntry& t : tensors) {
    header[t.name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {at, at + t.bytes}}};
    at += t.bytes;
  }
  std::string hs = header.dump();
  hs.append((8 - hs.size() % 8) % 8, ' ');
  const uint64_t len = hs.size();
  return std::string(reinterpret_cast<const char*>(&len), 8) + hs;
}

ExportResult export_safetensors(const std::string& dir, const std::string& out_path,
                                const std::string& dtype) {
  CheckpointReader reader(dir);
  const Manifest& m = reader.manifest();
  const StateInfo* st = &model_state(m, dir);
  const DType out_type = export_dtype(*st, dtype, dir);
  STRATA_CHECK(!m.tensors.empty(), dir, ": the checkpoint has no tensor table to export");

  // The checkpoint's table names each tensor once (a tied weight under its first name).
  std::vector<const TensorInfo*> views;
  for (const TensorInfo& t : m.tensors) views.push_back(&t);
  const int64_t es = int64_t(dtype_size(out_type));
  std::vector<SafetensorsEntry> entries;
  for (const TensorInfo* t : views)
    entries.push_back({t->name, out_type == DType::f32 ? "F32" : "BF16", t->shape, numel(t->shape) * es});
  const std::string hs = safetensors_header(
      entries, {{"format", "pt"}, {"source", "strata"}, {"step", std::to_string(m.step)}, {"state", st->name}});

  const std::string tmp = out_path + ".tmp";
  require_replaceable_file(out_path, "--safetensors");
  require_replaceable_file(tmp, "--safetensors temporary file");
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail("cannot create ", tmp, ": ", errno_text(errno));
  int64_t written = 0;
  try {
    write_all(fd, hs.data(), hs.size(), tmp, &written, nullptr);
    std::vector<char> buf;
    for (const TensorInfo* t : views) {
      buf.resize(size_t(numel(t->shape) * es));
      reader.read_tensor(st->name, *t, out_type, buf.data());
      write_all(fd, buf.data(), buf.size(), tmp, &written, nullptr);
    }
    if (::fsync(fd) != 0) fail("fsync ", tmp, ": ", errno_text(errno));
  } catch (...) {
    ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  ::close(fd);
  try {
    rename_path(tmp, out_path);
  } catch (...) {
    ::unlink(tmp.c_str());
    throw;
  }
  return {dir, st->name, int(views.size()), written};
}

static float f16_to_f32(uint16_t h) {
  const int sign = h >> 15, exp = (h >> 10) & 31, mant = h & 1023;
  float v;
  if (exp == 0) v = std::ldexp(float(mant), -24);
  else if (exp == 31) v = mant ? NAN : INFINITY;
  else v = std::ldexp(float(mant | 1024), exp - 25);
  return sign ? -v : v;
}

std::vector<float> read_tensor_f32(const SafetensorsFile& f, const SafetensorsTensor& s) {
  STRATA_CHECK(s.dtype == "F32" || s.dtype == "BF16" || s.dtype == "F16", f.path, ": tensor '", s.name, "' is ",
               s.dtype, "; import accepts F32, BF16 or F16");
  std::ifstream in(f.path, std::ios::binary);
  std::vector<char> raw(size_t(s.end - s.begin));
  in.seekg(f.data_start() + s.begin);
  in.read(raw.data(), std::streamsize(raw.size()));
  if (!in) fail(f.path, ": cannot read tensor '", s.name, "'");
  const int64_t n = numel(s.shape);
  std::vector<float> out(static_cast<size_t>(n));
  if (s.dtype == "F32") {
    std::memcpy(out.data(), raw.data(), raw.size());
  } else {
    const uint16_t* src = reinterpret_cast<const uint16_t*>(raw.data());
    for (int64_t i = 0; i < n; ++i) out[size_t(i)] = s.dtype == "BF16" ? bf16_to_f32(src[i]) : f16_to_f32(src[i]);
  }
  return out;
}

int import_safetensors(const std::string& path, const std::vector<TensorInfo>& table,
                       float* params, int64_t numel_total) {
  SafetensorsFile f = read_safetensors(path);
  std::map<std::string, const SafetensorsTensor*> by_name;
  for (const SafetensorsTensor& t : f.tensors) by_name[t.name] = &t;
  std::set<std::string> known;
  for (const TensorInfo& t : table) known.insert(t.name);
  for (const SafetensorsTensor& t : f.tensors)
    if (!known.count(t.name))
      fail(path, ": tensor '", t.name, "' is not a parameter of this model (a different model?)");

  std::set<std::pair<int64_t, int64_t>> seen;
  int loaded = 0;
  for (const TensorInfo& t : table) {
    const int64_t n = numel(t.shape);
    STRATA_CHECK(t.offset >= 0 && t.offset + n <= numel_total, "import: tensor '", t.name,
                 "' lies outside the ", numel_total, "-element parameter buffer");
    auto it = by_name.find(t.name);
    if (it == by_name.end()) {
      // A view of elements already loaded under another name (a tied weight) may be absent.
      if (seen.count({t.offset, n})) continue;
      fail(path, ": tensor '", t.name, "' ", shape_str(t.shape), " missing");
    }
    const SafetensorsTensor& s = *it->second;
    if (s.shape != t.shape)
      fail(path, ": tensor '", t.name, "' is ", shape_str(s.shape), ", the model expects ", shape_str(t.shape));
    const std::vector<float> v = read_tensor_f32(f, s);
    std::memcpy(params + t.offset, v.data(), v.size() * sizeof(float));
    seen.insert({t.offset, n});
    ++loaded;
  }
  return loaded;
}

}  // namespace strata::ckpt
