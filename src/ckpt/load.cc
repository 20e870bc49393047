#include "ckpt/load.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "ckpt/fsutil.h"
#include "core/timer.h"

namespace fs = std::filesystem;

namespace strata::ckpt {

CheckpointReader::CheckpointReader(std::string dir)
    : dir_(std::move(dir)), manifest_(read_manifest(dir_)) {}

ShardReader& CheckpointReader::shard(size_t index) {
  auto it = open_.find(index);
  if (it != open_.end()) return *it->second;
  const ShardInfo& s = manifest_.shards.at(index);
  auto r = std::make_unique<ShardReader>(dir_ + "/" + s.file, s, int(manifest_.shards.size()),
                                         manifest_.step);
  return *open_.emplace(index, std::move(r)).first->second;
}

static void convert(const void* src, DType from, void* dst, DType to, int64_t n) {
  if (from == to) {
    std::memcpy(dst, src, size_t(n) * dtype_size(from));
  } else if (from == DType::bf16 && to == DType::f32) {
    const uint16_t* s = static_cast<const uint16_t*>(src);
    float* d = static_cast<float*>(dst);
    for (int64_t i = 0; i < n; ++i) d[i] = bf16_to_f32(s[i]);
  } else if (from == DType::f32 && to == DType::bf16) {
    const float* s = static_cast<const float*>(src);
    uint16_t* d = static_cast<uint16_t*>(dst);
    for (int64_t i = 0; i < n; ++i) d[i] = f32_to_bf16(s[i]);
  } else {
    fail("cannot convert ", dtype_name(from), " to ", dtype_name(to));
  }
}

void check_layout_fits(const Manifest& m, const TensorLayout& layout, const std::string& dir) {
  for (const TensorPiece& p : layout) {
    const int t = m.find_tensor(p.name);
    if (t < 0)
      throw ModelMismatch(cat("checkpoint ", dir, " was written for a different model: tensor '", p.name,
                              "' ", shape_str(p.global_shape), " of this layout is not in it"));
    if (m.tensors[size_t(t)].shape != p.global_shape)
      throw ModelMismatch(cat("checkpoint ", dir, " was written for a different model: tensor '", p.name,
                              "' is ", shape_str(m.tensors[size_t(t)].shape), " in the checkpoint, ",
                              shape_str(p.global_shape), " in this layout"));
  }
}

// Zero-fills the part of target `t` past the layout's elements (ZeRO padding: nothing is saved
// there) and calls fn(piece, global, count, dst_pos) for every run of global positions of a
// piece inside the rest: `count` elements of tensor piece.name from row-major position
// `global` go to element dst_pos of t.data. A load from saved chunks and one from whole
// tensors in memory place elements the same way through it.
template <typename Fn>
static void for_each_target_run(const StateTarget& t, const TensorLayout& layout, Fn&& fn) {
  STRATA_CHECK(t.want.begin >= 0 && t.want.end >= t.want.begin && (t.data || t.want.empty()),
               "load: bad target range [", t.want.begin, ",", t.want.end, ") for '", t.name, "'");
  const size_t dst_es = dtype_size(t.dtype);
  char* dst = static_cast<char*>(t.data);
  const Range inside = intersect(t.want, {0, layout_numel(layout)});
  const int64_t pad_from = std::max(inside.end, t.want.begin);
  if (t.want.end > pad_from)
    std::memset(dst + (pad_from - t.want.begin) * int64_t(dst_es), 0,
                size_t(t.want.end - pad_from) * dst_es);
  if (inside.empty()) return;
  for (const TensorPiece& p : layout) {
    const Range local = intersect(inside, {p.local_offset, p.local_offset + p.numel()});
    if (local.empty()) continue;
    const Range flat{local.begin - p.local_offset, local.end - p.local_offset};
    for_each_run(p.global_shape, p.offsets, p.extents, flat,
                 [&](int64_t box_pos, int64_t global, int64_t n) {
                   fn(p, global, n, p.local_offset + box_pos - t.want.begin);
                 });
  }
}

namespace {

// The state a fallback names: "group*.<rest>" the lowest group's that was saved.
const StateInfo* find_fallback(const Manifest& m, const std::string& name) {
  const std::string any = "group*.";
  if (name.rfind(any, 0) != 0) return m.find_state(name);
  const std::string rest = name.substr(any.size());
  const StateInfo* best = nullptr;
  long lowest = 0;
  for (const StateInfo& s : m.states) {
    const size_t dot = s.name.find('.');
    if (s.name.rfind("group", 0) != 0 || dot == std::string::npos || dot == 5 || s.name.substr(dot + 1) != rest) continue;
    const std::string digits = s.name.substr(5, dot - 5);
    if (digits.find_first_not_of("0123456789") != std::string::npos) continue;
    const long k = std::stol(digits);
    if (!best || k < lowest) best = &s, lowest = k;
  }
  return best;
}

}  // namespace

void CheckpointReader::read(const StateTarget& t, const TensorLayout& layout) {
  const StateInfo* st = manifest_.find_state(t.name);
  for (size_t i = 0; !st && i < t.fallbacks.size(); ++i) st = find_fallback(manifest_, t.fallbacks[i]);
  if (!st) {
    std::string saved;
    for (const StateInfo& s : manifest_.states) saved += (saved.empty() ? "" : ", ") + s.name;
    fail(dir_, ": state '", t.name, "' was not saved (saved: ", saved, ")");
  }
  const bool convertible = (st->dtype == DType::f32 && t.dtype == DType::bf16) ||
                           (st->dtype == DType::bf16 && t.dtype == DType::f32);
  STRATA_CHECK(st->dtype == t.dtype || convertible, dir_, ": state '", st->name, "' is ",
               dtype_name(st->dtype), ", cannot load as ", dtype_name(t.dtype));
  check_layout_fits(manifest_, layout, dir_);
  static const TensorRuns none;
  std::vector<CopyOp> ops;
  for_each_target_run(t, layout, [&](const TensorPiece& p, int64_t global, int64_t n,
                                     int64_t dst_pos) {
    const int tensor = manifest_.find_tensor(p.name);
    auto it = manifest_.runs.find({st->name, tensor});
    const TensorRuns& saved = it == manifest_.runs.end() ? none : it->second;
    const int64_t missing = map_run(saved, global, n, dst_pos, &ops);
    if (missing >= 0)
      throw CorruptCheckpoint(cat(dir_, ": no saved chunk of '", st->name, "' holds ", p.name,
                                  box_str(p.offsets, p.extents), " (first missing element ",
                                  coord_str(p.global_shape, missing), ")"));
  });
  copy(std::move(ops), *st, t);
}

void fill_from_global(const StateTarget& t, const TensorLayout& layout,
                      const std::function<const float*(const TensorPiece&)>& global) {
  STRATA_CHECK(t.dtype == DType::f32 || t.dtype == DType::bf16, "load: state '", t.name, "' is ",
               dtype_name(t.dtype), "; whole tensors fill f32 or bf16 states");
  const TensorPiece* current = nullptr;
  const float* src = nullptr;
  const int64_t es = int64_t(dtype_size(t.dtype));
  for_each_target_run(t, layout, [&](const TensorPiece& p, int64_t at, int64_t n, int64_t dst_pos) {
    if (current != &p) current = &p, src = global(p);
    convert(src + at, DType::f32, static_cast<char*>(t.data) + dst_pos * es, t.dtype, n);
  });
}

void CheckpointReader::read_tensor(const std::string& state, const TensorInfo& tensor, DType dtype, void* out) {
  const int64_t n = numel(tensor.shape);
  const TensorLayout whole = {
      {tensor.name, tensor.shape, std::vector<int64_t>(tensor.shape.size(), 0), tensor.shape, 0, true}};
  read({state, dtype, {0, n}, out, {}}, whole);
}

const StateInfo& model_state(const Manifest& m, const std::string& dir) {
  const StateInfo* st = m.find_state("master");
  if (!st) st = m.find_state("params");
  // A run of replica groups (DiLoCo, docs/diloco.md) keeps each group's own weights
  // (group<g>.params) and the global ones of the last outer step: the model it defines.
  if (!st) st = m.find_state("outer.params");
  if (!st) fail(dir, ": no 'master', 'params' or 'outer.params' state (the model's weights) in it");
  return *st;
}

// Executes the copies chunk by chunk in file order, so each block is read and hashed once.
void CheckpointReader::copy(std::vector<CopyOp> ops, const StateInfo& st, const StateTarget& t) {
  auto file_order = [](const CopyOp& a, const CopyOp& b) {
    return a.chunk != b.chunk ? a.chunk < b.chunk : a.chunk_pos < b.chunk_pos;
  };
  if (!std::is_sorted(ops.begin(), ops.end(), file_order)) std::sort(ops.begin(), ops.end(), file_order);
  const int64_t src_es = int64_t(dtype_size(st.dtype)), dst_es = int64_t(dtype_size(t.dtype));
  char* dst = static_cast<char*>(t.data);
  for (const CopyOp& op : ops) {
    const Chunk& c = manifest_.chunks[size_t(op.chunk)];
    const PieceInfo& piece = manifest_.shards[size_t(c.shard)].pieces[size_t(c.piece)];
    const int64_t b0 = (c.piece_elem + op.chunk_pos) * src_es, b1 = b0 + op.count * src_es;
    char* out = dst + op.dst_pos * dst_es;
    if (st.dtype == t.dtype) {
      shard(size_t(c.shard)).read(piece, manifest_.block_bytes, b0, b1, out);
    } else {
      convert_.resize(size_t(b1 - b0));
      shard(size_t(c.shard)).read(piece, manifest_.block_bytes, b0, b1, convert_.data());
      convert(convert_.data(), st.dtype, out, t.dtype, op.count);
    }
    bytes_read_ += b1 - b0;
  }
}

int64_t CheckpointReader::verify(bool checksums) {
  int64_t bytes = 0;
  for (size_t s = 0; s < manifest_.shards.size(); ++s) {
    ShardReader& r = shard(s);
    if (checksums) bytes += r.verify_all(manifest_.block_bytes);
  }
  return bytes;
}

static void emit(const LoadOptions& opts, const std::string& line) {
  if (opts.log) {
    opts.log(line);
  } else {
    std::fprintf(stderr, "strata: ckpt: %s\n", line.c_str());
  }
}

LoadResult load_checkpoint(const std::string& dir, const std::vector<StateTarget>& targets,
                           const LoadOptions& opts) {
  Stopwatch clock;
  CheckpointReader reader(dir);
  check_same_model(reader.manifest(), opts.expected_tensors, dir);
  if (opts.check) opts.check(reader.manifest().train, dir);
  const TensorLayout layout =
      !opts.layout.empty() ? opts.layout
                           : contiguous_layout(opts.expected_tensors.empty() ? reader.manifest().tensors
                                                                            : opts.expected_tensors);
  for (const StateTarget& t : targets) reader.read(t, layout);
  LoadResult r;
  r.dir = dir;
  r.train = reader.manifest().train;
  r.manifest = reader.manifest();
  r.bytes_read = reader.bytes_read();
  r.seconds = clock.seconds();
  return r;
}

std::vector<std::string> candidate_dirs(const std::string& root, std::vector<std::string>* notes) {
  const std::vector<int64_t> steps = list_steps(root);
  std::optional<std::string> latest;
  try {
    latest = read_latest(root);
  } catch (const std::exception& e) {
    if (notes) notes->push_back(e.what());
  }
  std::error_code ec;
  if (latest && !fs::is_directory(root + "/" + *latest, ec) && notes)
    notes->push_back(cat(root, "/", *latest, ": missing (named by ", root, "/latest)"));
  else if (!latest && !steps.empty() && notes)
    notes->push_back(cat(root, "/latest: missing; trying every checkpoint, newest first"));
  // Every committed directory is complete by construction (it is renamed into place after its
  // manifest), so one newer than `latest` (a crash between the rename and the pointer's
  // update, or a pointer moved back by hand) is as good a candidate as the one it names.
  std::vector<std::string> out;
  for (auto it = steps.rbegin(); it != steps.rend(); ++it) out.push_back(root + "/" + step_dir_name(*it));
  return out;
}

std::string newer_than_latest(const std::string& dir) {
  const std::string root = fs::path(dir).parent_path().string();
  const auto step = parse_step_dir(fs::path(dir).filename().string());
  std::optional<std::string> latest;
  try {
    latest = read_latest(root);
  } catch (const std::exception&) {
    return "";  // a malformed pointer has its own note
  }
  if (!step || !latest || *parse_step_dir(*latest) >= *step) return "";
  return cat(root, "/latest names ", *latest, ", but ", fs::path(dir).filename().string(),
             " is newer and verifies: using it");
}

std::optional<std::string> newest_good(const std::string& root,
                                       const std::function<void(const std::string&)>& log) {
  std::vector<std::string> notes;
  const std::vector<std::string> dirs = candidate_dirs(root, &notes);
  for (const std::string& n : notes) log(n);
  for (const std::string& dir : dirs) {
    try {
      CheckpointReader(dir).verify(true);
    } catch (const CorruptCheckpoint& e) {
      log(cat(e.what(), "; trying an older checkpoint"));
      continue;
    }
    const std::string newer = newer_than_latest(dir);
    if (!newer.empty()) log(newer);
    return dir;
  }
  return std::nullopt;
}

std::optional<LoadResult> load_latest(const std::string& run_dir,
                                      const std::vector<StateTarget>& targets,
                                      const LoadOptions& opts) {
  const std::string root = ckpt_root(run_dir);
  std::vector<std::string> notes;
  const std::vector<std::string> dirs = candidate_dirs(root, &notes);
  for (const std::string& n : notes) emit(opts, n);
  if (dirs.empty()) return std::nullopt;
  std::vector<std::string> skipped;
  for (const std::string& dir : dirs) {
    std::optional<LoadResult> r;
    std::string problem;
    try {
      std::error_code ec;
      if (!fs::is_directory(dir, ec) && !ec) throw CorruptCheckpoint(cat(dir, ": missing"));
      r = load_checkpoint(dir, targets, opts);
    } catch (const CorruptCheckpoint& e) {
      problem = e.what();
    }
    const bool ok = opts.all_ok ? opts.all_ok(r.has_value()) : r.has_value();
    if (ok) {
      r->skipped = skipped;
      const std::string newer = newer_than_latest(dir);
      if (!newer.empty()) emit(opts, newer);
      return r;
    }
    if (problem.empty()) problem = cat(dir, ": damaged on another rank");
    emit(opts, cat(problem, "; falling back to an older checkpoint"));
    skipped.push_back(problem);
  }
  fail("no usable checkpoint in ", root, " (", skipped.size(), " damaged; first: ",
       skipped.empty() ? notes.front() : skipped.front(), ")");
}

CkptLocation locate(const std::string& given) {
  std::string path = given;
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  for (const std::string& p : {path, path + "/ckpt"}) {  // a symbolic link loop: one line naming it
    const std::string unreachable = unresolvable(p);
    STRATA_CHECK(unreachable.empty(), unreachable);
  }
  STRATA_CHECK(fs::exists(path), path, ": no such file or directory");
  STRATA_CHECK(fs::is_directory(path), path, ": not a directory");
  std::error_code ec;
  if (fs::exists(path + "/manifest.json", ec) || parse_step_dir(fs::path(path).filename().string())) {
    std::string root = fs::path(path).parent_path().string();
    return {root.empty() ? "." : root, path};
  }
  if (fs::is_directory(path + "/ckpt", ec)) return {path + "/ckpt", ""};
  if (fs::exists(path + "/latest", ec) || !list_steps(path).empty()) return {path, ""};
  fail(path, ": no checkpoints here (expected a run directory, its ckpt/ directory, or a step-* directory)");
}

}  // namespace strata::ckpt
