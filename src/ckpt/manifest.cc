#include "ckpt/manifest.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "ckpt/fsutil.h"
#include "core/files.h"

namespace strata::ckpt {

using nlohmann::json;

std::string hex64(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016" PRIx64, v);
  return buf;
}

// A json error as a person reads it: without the "[json.exception.type_error.302] " prefix,
// and for a parse error only the byte offset (its text quotes the bytes read, which may not be
// UTF-8 and would break the next JSON the message is written into).
static std::string json_problem(const json::exception& e) {
  if (const auto* p = dynamic_cast<const json::parse_error*>(&e))
    return cat("not valid JSON at byte ", p->byte);
  const std::string w = e.what();
  const size_t close = w.find("] ");
  return w.rfind("[json.exception.", 0) == 0 && close != std::string::npos ? w.substr(close + 2) : w;
}

static uint64_t parse_hex64(const std::string& s, const std::string& where) {
  if (s.size() != 16 || s.find_first_not_of("0123456789abcdef") != std::string::npos)
    throw CorruptCheckpoint(cat(where, ": bad checksum '", s, "' (expected 16 hex digits)"));
  return std::strtoull(s.c_str(), nullptr, 16);
}

const StateInfo* Manifest::find_state(const std::string& name) const {
  for (const StateInfo& s : states)
    if (s.name == name) return &s;
  return nullptr;
}

int Manifest::find_tensor(const std::string& name) const {
  if (tensor_index.size() == tensors.size()) {
    auto it = tensor_index.find(name);
    return it == tensor_index.end() ? -1 : it->second;
  }
  for (size_t i = 0; i < tensors.size(); ++i)
    if (tensors[i].name == name) return int(i);
  return -1;
}

std::string Manifest::chunk_name(int chunk) const {
  const Chunk& c = chunks.at(size_t(chunk));
  return cat(shards.at(size_t(c.shard)).file, " ", c.state, " ", tensors.at(size_t(c.tensor)).name,
             box_str(c.offsets, c.extents), " elements ", c.flat.begin, "..", c.flat.end);
}

int64_t Manifest::total_bytes() const {
  int64_t b = 0;
  for (const ShardInfo& s : shards) b += s.file_bytes;
  return b;
}

json to_json(const TrainState& t) {
  json rng = json::object();
  for (const auto& [name, r] : t.rng)
    rng[name] = {{"seed", r.seed}, {"stream", r.stream}, {"counter", r.counter}};
  return {{"step", t.step},
          {"schedule_step", t.schedule_step},
          {"tokens_seen", t.tokens_seen},
          {"loader", {{"epoch", t.loader_epoch}, {"consumed", t.loader_consumed}}},
          {"rng", rng},
          {"config", t.config},
          {"world", t.world},
          {"tp", t.tp},
          {"dp", t.dp},
          {"pp", t.pp},
          {"schedule", t.schedule},
          {"virtual_stages", t.virtual_stages},
          {"cp", t.cp},
          {"ep", t.ep},
          {"zero_stage", t.zero_stage},
          {"precision", t.precision},
          {"run_precision", t.run_precision},
          {"extra", t.extra}};
}

TrainState train_state_from_json(const json& j) {
  TrainState t;
  t.step = j.at("step").get<int64_t>();
  t.schedule_step = j.at("schedule_step").get<int64_t>();
  t.tokens_seen = j.at("tokens_seen").get<int64_t>();
  t.loader_epoch = j.at("loader").at("epoch").get<int64_t>();
  t.loader_consumed = j.at("loader").at("consumed").get<int64_t>();
  for (const auto& [name, r] : j.at("rng").items())
    t.rng[name] = {r.at("seed").get<uint64_t>(), r.at("stream").get<uint64_t>(),
                   r.at("counter").get<uint64_t>()};
  t.config = j.at("config");
  t.world = j.at("world").get<int>();
  t.tp = j.value("tp", 1);  // version 1 knew only data parallelism
  t.dp = j.value("dp", 0);
  t.pp = j.value("pp", 1);
  t.schedule = j.value("schedule", std::string("1f1b"));  // before pipelines recorded it
  t.virtual_stages = j.value("virtual_stages", 1);
  t.cp = j.value("cp", 1);
  t.ep = j.value("ep", 1);
  t.zero_stage = j.at("zero_stage").get<int>();
  t.precision = j.at("precision").get<std::string>();
  t.run_precision = j.value("run_precision", t.precision);
  t.extra = j.value("extra", json::object());
  return t;
}

json to_json(const ShardInfo& s) {
  json pieces = json::array();
  for (const PieceInfo& p : s.pieces) {
    json hashes = json::array();
    for (uint64_t h : p.block_hashes) hashes.push_back(hex64(h));
    json e = {{"state", p.state}};
    if (p.tensor.empty()) {
      e["range"] = {p.range.begin, p.range.end};
    } else {
      e["tensor"] = p.tensor;
      e["offsets"] = p.offsets;
      e["extents"] = p.extents;
      e["flat"] = {p.flat.begin, p.flat.end};
    }
    e["offset"] = p.offset;
    e["bytes"] = p.bytes;
    e["xxh64"] = hashes;
    pieces.push_back(std::move(e));
  }
  return {{"rank", s.rank}, {"file", s.file}, {"file_bytes", s.file_bytes}, {"pieces", pieces}};
}

ShardInfo shard_from_json(const json& s, const std::string& where) {
  try {
    ShardInfo sh{s.at("rank").get<int>(), s.at("file").get<std::string>(),
                 s.at("file_bytes").get<int64_t>(), {}};
    if (sh.file.empty() || sh.file.find('/') != std::string::npos || sh.file[0] == '.')
      throw CorruptCheckpoint(cat(where, ": bad shard file name '", sh.file, "'"));
    for (const json& p : s.at("pieces")) {
      PieceInfo pi;
      pi.state = p.at("state").get<std::string>();
      if (p.contains("tensor")) {
        pi.tensor = p.at("tensor").get<std::string>();
        pi.offsets = p.at("offsets").get<std::vector<int64_t>>();
        pi.extents = p.at("extents").get<Shape>();
        pi.flat = {p.at("flat").at(0).get<int64_t>(), p.at("flat").at(1).get<int64_t>()};
        if (pi.tensor.empty()) throw CorruptCheckpoint(cat(where, ": chunk with an empty tensor name"));
      } else {
        pi.range = {p.at("range").at(0).get<int64_t>(), p.at("range").at(1).get<int64_t>()};
      }
      pi.offset = p.at("offset").get<int64_t>();
      pi.bytes = p.at("bytes").get<int64_t>();
      for (const json& h : p.at("xxh64"))
        pi.block_hashes.push_back(parse_hex64(h.get<std::string>(), where));
      sh.pieces.push_back(std::move(pi));
    }
    return sh;
  } catch (const json::exception& e) {
    throw CorruptCheckpoint(cat(where, ": malformed shard entry (", json_problem(e), ")"));
  }
}

json to_json(const Manifest& m) {
  json tensors = json::array(), states = json::array(), shards = json::array();
  for (const TensorInfo& t : m.tensors)
    tensors.push_back({{"name", t.name}, {"shape", t.shape}, {"offset", t.offset}});
  for (const StateInfo& s : m.states) {
    states.push_back({{"name", s.name}, {"dtype", dtype_name(s.dtype)}, {"numel", s.numel}});
    if (s.partial) states.back()["partial"] = true;
  }
  for (const ShardInfo& s : m.shards) shards.push_back(to_json(s));
  return {{"format", "strata-checkpoint"},
          {"version", m.version},
          {"step", m.step},
          {"block_bytes", m.block_bytes},
          {"checksum", "xxh64 per block"},
          {"tensors", tensors},
          {"states", states},
          {"shards", shards},
          {"train", to_json(m.train)},
          {"save", m.save}};
}

static void check_piece(const Manifest& m, const ShardInfo& s, const PieceInfo& p,
                        const std::string& where) {
  const StateInfo* st = m.find_state(p.state);
  if (!st) throw CorruptCheckpoint(cat(where, ": shard ", s.file, " has unknown state '", p.state, "'"));
  const std::string what = cat(where, ": shard ", s.file, " piece ", p.state, " ", p.tensor);
  if (p.tensor.empty()) {
    if (p.range.begin < 0 || p.range.end > st->numel || p.range.end < p.range.begin)
      throw CorruptCheckpoint(cat(what, "[", p.range.begin, ",", p.range.end, ") outside [0,", st->numel, ")"));
  } else {
    const int t = m.find_tensor(p.tensor);
    if (t < 0) throw CorruptCheckpoint(cat(what, ": tensor not in the table"));
    const Shape& shape = m.tensors[size_t(t)].shape;
    const std::string box = box_problem(shape, p.offsets, p.extents);
    if (!box.empty()) throw CorruptCheckpoint(cat(what, ": ", box));
    if (p.flat.begin < 0 || p.flat.end < p.flat.begin || p.flat.end > numel(p.extents))
      throw CorruptCheckpoint(cat(what, box_str(p.offsets, p.extents), ": elements ", p.flat.begin,
                                  "..", p.flat.end, " outside the box's ", numel(p.extents)));
  }
  const int64_t bytes = p.elements() * int64_t(dtype_size(st->dtype));
  if (p.bytes != bytes || p.offset < 0 || p.offset + p.bytes > s.file_bytes)
    throw CorruptCheckpoint(cat(what, " has ", p.bytes, " bytes at ", p.offset, " (expected ", bytes,
                                " inside ", s.file_bytes, ")"));
  const int64_t blocks = (p.bytes + m.block_bytes - 1) / m.block_bytes;
  if (int64_t(p.block_hashes.size()) != blocks)
    throw CorruptCheckpoint(cat(what, " has ", p.block_hashes.size(), " checksums for ", blocks, " blocks"));
}

// Resolves every piece into chunks: a version-2 piece is one chunk; a version-1 range is cut
// at the tensors it crosses (the tp=1 layout of the table).
static void resolve_chunks(Manifest& m) {
  for (size_t s = 0; s < m.shards.size(); ++s)
    for (size_t p = 0; p < m.shards[s].pieces.size(); ++p) {
      const PieceInfo& pi = m.shards[s].pieces[p];
      if (!pi.tensor.empty()) {
        m.chunks.push_back({pi.state, m.find_tensor(pi.tensor), pi.offsets, pi.extents, pi.flat,
                            int(s), int(p), 0});
        continue;
      }
      for (size_t t = 0; t < m.tensors.size(); ++t) {
        const TensorInfo& ti = m.tensors[t];
        const Range x = intersect(pi.range, {ti.offset, ti.offset + numel(ti.shape)});
        if (x.empty()) continue;
        m.chunks.push_back({pi.state, int(t), std::vector<int64_t>(ti.shape.size(), 0), ti.shape,
                            {x.begin - ti.offset, x.end - ti.offset}, int(s), int(p),
                            x.begin - pi.range.begin});
      }
    }
  for (size_t c = 0; c < m.chunks.size(); ++c) {
    const Chunk& ch = m.chunks[c];
    m.runs[{ch.state, ch.tensor}].add(m.tensors[size_t(ch.tensor)].shape, ch.offsets, ch.extents,
                                      ch.flat, int(c));
  }
  for (auto& [key, runs] : m.runs) runs.sort();
}

// Every tensor of every state (of a partial state: every tensor it has any of) is held
// exactly once by the chunks.
static void check_tensor_coverage(const Manifest& m, const std::string& where) {
  static const TensorRuns none;
  for (const StateInfo& st : m.states)
    for (size_t t = 0; t < m.tensors.size(); ++t) {
      auto it = m.runs.find({st.name, int(t)});
      const TensorRuns& runs = it == m.runs.end() ? none : it->second;
      if (st.partial && runs.runs.empty()) continue;  // a tensor the state does not have
      const std::string problem = runs.tiling_problem(
          m.tensors[t].shape, [&](int c) { return m.chunk_name(c); });
      if (!problem.empty())
        throw CorruptCheckpoint(cat(where, ": state '", st.name, "' tensor '", m.tensors[t].name, "' ",
                                    shape_str(m.tensors[t].shape), ": ", problem));
    }
}

Manifest manifest_from_json(const json& j, const std::string& where) {
  Manifest m;
  try {
    if (j.value("format", "") != "strata-checkpoint")
      throw CorruptCheckpoint(cat(where, ": not a strata checkpoint manifest"));
    m.version = j.at("version").get<int>();
    if (m.version != kManifestVersion && m.version != 1)
      throw CorruptCheckpoint(cat(where, ": manifest version ", m.version, ", this build reads 1 and ",
                                  kManifestVersion));
    m.step = j.at("step").get<int64_t>();
    m.block_bytes = j.at("block_bytes").get<int64_t>();
    if (m.block_bytes <= 0) throw CorruptCheckpoint(cat(where, ": block_bytes ", m.block_bytes));
    std::vector<TensorInfo> table;
    for (const json& t : j.at("tensors"))
      table.push_back({t.at("name").get<std::string>(), t.at("shape").get<Shape>(),
                       t.value("offset", int64_t(0))});
    // Version 1 tables may name a tied weight twice; version 2 records each tensor once.
    m.tensors = m.version == 1 ? unique_views(table) : table;
    for (size_t i = 0; i < m.tensors.size(); ++i)
      if (!m.tensor_index.emplace(m.tensors[i].name, int(i)).second)
        throw CorruptCheckpoint(cat(where, ": tensor '", m.tensors[i].name, "' listed twice"));
    for (const json& s : j.at("states"))
      m.states.push_back({s.at("name").get<std::string>(),
                          parse_dtype(s.at("dtype").get<std::string>()), s.at("numel").get<int64_t>(),
                          s.value("partial", false)});
    for (const json& s : j.at("shards")) m.shards.push_back(shard_from_json(s, where));
    m.train = train_state_from_json(j.at("train"));
    m.save = j.value("save", json::object());
  } catch (const json::exception& e) {
    throw CorruptCheckpoint(cat(where, ": malformed manifest (", json_problem(e), ")"));
  } catch (const CorruptCheckpoint&) {
    throw;
  } catch (const Error& e) {  // parse_dtype
    throw CorruptCheckpoint(cat(where, ": ", e.what()));
  }
  if (m.train.step != m.step)
    throw CorruptCheckpoint(cat(where, ": step ", m.step, " but training state says ", m.train.step));
  for (const ShardInfo& s : m.shards)
    for (const PieceInfo& p : s.pieces) {
      if (p.tensor.empty() != (m.version == 1))
        throw CorruptCheckpoint(cat(where, ": shard ", s.file, ": a version ", m.version, " manifest with a ",
                                    p.tensor.empty() ? "range" : "chunk", " piece"));
      check_piece(m, s, p, where);
    }
  // Gaps and overlaps, of either version, show as tensors not held exactly once.
  resolve_chunks(m);
  check_tensor_coverage(m, where);
  return m;
}

Manifest read_manifest(const std::string& dir) {
  const std::string path = dir + "/manifest.json";
  const std::string unreachable = unresolvable(dir);  // a symbolic link loop
  if (!unreachable.empty()) throw CorruptCheckpoint(unreachable);
  const std::string kind = file_kind(path);
  if (kind == "missing") throw CorruptCheckpoint(cat(path, ": missing manifest"));
  // Checked before opening: a FIFO here would block the open forever.
  if (kind != "a regular file") throw CorruptCheckpoint(cat(path, ": is ", kind, ", not a manifest file"));
  std::ifstream in(path);
  if (!in) throw CorruptCheckpoint(cat(path, ": cannot open the manifest"));
  json j;
  try {
    in >> j;
  } catch (const json::exception& e) {
    throw CorruptCheckpoint(cat(path, ": unreadable manifest (", json_problem(e), ")"));
  }
  return manifest_from_json(j, path);
}

void check_same_model(const Manifest& m, const std::vector<TensorInfo>& expected_table,
                      const std::string& dir) {
  if (expected_table.empty()) return;
  const std::vector<TensorInfo> expected = unique_views(expected_table);
  const std::string what = cat("checkpoint ", dir, " was written for a different model: ");
  for (size_t i = 0; i < expected.size() || i < m.tensors.size(); ++i) {
    if (i >= expected.size())
      throw ModelMismatch(cat(what, "tensor '", m.tensors[i].name, "' is in the checkpoint, not in this model"));
    if (i >= m.tensors.size())
      throw ModelMismatch(cat(what, "tensor '", expected[i].name, "' ", shape_str(expected[i].shape),
                              " is not in the checkpoint"));
    const TensorInfo& a = m.tensors[i];
    const TensorInfo& b = expected[i];
    if (a.name != b.name || a.shape != b.shape)
      throw ModelMismatch(cat(what, "tensor ", i, " is '", a.name, "' ", shape_str(a.shape),
                              " in the checkpoint, '", b.name, "' ", shape_str(b.shape), " in this model"));
  }
}

}  // namespace strata::ckpt
