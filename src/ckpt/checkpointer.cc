#include "ckpt/checkpointer.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "ckpt/load.h"
#include "core/memory.h"
#include "core/timer.h"
#include "core/trace.h"

namespace fs = std::filesystem;

namespace strata::ckpt {

using nlohmann::json;

json SaveStats::to_json() const {
  return {{"step", step},       {"dir", dir},         {"bytes", bytes},
          {"total_bytes", total_bytes}, {"wait_prev_s", wait_prev_s}, {"copy_s", copy_s},
          {"stall_s", stall_s}, {"write_s", write_s}, {"commit_s", commit_s},
          {"ok", ok},           {"error", error}};
}

std::vector<int64_t> steps_to_delete(const std::vector<int64_t>& steps, int64_t latest,
                                     int keep_last, int64_t keep_every) {
  if (keep_last <= 0) return {};
  std::vector<int64_t> older;
  for (int64_t s : steps)
    if (s <= latest) older.push_back(s);
  std::sort(older.begin(), older.end());
  std::vector<int64_t> out;
  const int64_t n = int64_t(older.size());
  for (int64_t i = 0; i < n; ++i) {
    const int64_t s = older[size_t(i)];
    const bool newest = i >= n - keep_last;
    const bool milestone = keep_every > 0 && s % keep_every == 0;
    if (!newest && !milestone && s != latest) out.push_back(s);
  }
  return out;
}

Checkpointer::Checkpointer(CheckpointerOptions opts) : opts_(std::move(opts)) {
  STRATA_CHECK(!opts_.run_dir.empty(), "checkpointer: empty run directory");
  STRATA_CHECK(opts_.world >= 1 && opts_.rank >= 0 && opts_.rank < opts_.world,
               "checkpointer: rank ", opts_.rank, " of world ", opts_.world);
  STRATA_CHECK(opts_.world == 1 || opts_.barrier, "checkpointer: world ", opts_.world,
               " needs a barrier callback");
  STRATA_CHECK(opts_.block_bytes > 0, "checkpointer: block_bytes ", opts_.block_bytes);
  STRATA_CHECK_SETTING(opts_.keep_last >= 0 && opts_.keep_every >= 0,
                       "checkpointer: ", setting("keep"), " ", opts_.keep_last, " / ",
                       setting("keep-every"), " ", opts_.keep_every, " must be >= 0");
  root_ = ckpt_root(opts_.run_dir);
  // Fail now, not at the first save, when the directory cannot exist (a file in the way,
  // a read-only disk).
  make_dirs(root_);
}

Checkpointer::~Checkpointer() {
  try {
    finish_previous(false);
  } catch (...) {
  }
}

void Checkpointer::log(const std::string& line) const {
  if (opts_.log) {
    opts_.log(line);
  } else {
    std::fprintf(stderr, "strata: ckpt: %s\n", line.c_str());
  }
}

void Checkpointer::finish_previous(bool rethrow) {
  if (!writer_.joinable()) return;
  writer_.join();
  history_.push_back(current_);
  if (!current_.ok) {
    if (rethrow) throw Error(current_.error);
    log(cat("save of step ", current_.step, " failed: ", current_.error));
  }
}

// The range of a state this rank writes: its shard, or its share of a replicated state.
static Range write_range(const StateSlice& s, int rank, int world) {
  if (s.write) return intersect(*s.write, {0, s.numel});
  const bool replicated = s.held.begin == 0 && s.held.end >= s.numel && world > 1;
  return replicated ? zero_shard(s.numel, rank, world) : intersect(s.held, {0, s.numel});
}

namespace {

// One chunk this rank writes: `local` elements of state `state`, inside piece `piece`.
struct WriteChunk {
  size_t state;
  const TensorPiece* piece;
  Range local;
};

TensorLayout layout_of(const SaveRequest& req) {
  return req.layout.empty() ? contiguous_layout(req.tensors) : req.layout;
}

// Validates the request against its layout and lists the chunks to write.
std::vector<WriteChunk> chunks_to_write(const SaveRequest& req, const TensorLayout& layout,
                                        int rank, int world) {
  STRATA_CHECK(req.step >= 0, "checkpoint: negative step ", req.step);
  const int64_t psi = layout_numel(layout);
  const std::string bad = layout_problem(layout, req.tensors, psi);
  STRATA_CHECK(bad.empty(), "checkpoint: rank ", rank, " layout: ", bad);
  std::map<std::string, std::vector<Range>> held_by_name;
  std::vector<WriteChunk> out;
  for (size_t i = 0; i < req.states.size(); ++i) {
    const StateSlice& s = req.states[i];
    // A state may come in several slices (regions of the flat space, e.g. the dense and the
    // expert parameters of an MoE model), which must not overlap.
    std::vector<Range>& held = held_by_name[s.name];
    for (const Range& h : held)
      STRATA_CHECK(intersect(h, s.held).empty(), "checkpoint: state '", s.name,
                   "' given twice for [", std::max(h.begin, s.held.begin), ",",
                   std::min(h.end, s.held.end), ")");
    held.push_back(s.held);
    STRATA_CHECK(!s.name.empty(), "checkpoint: state name empty");
    STRATA_CHECK(s.numel == psi, "checkpoint: rank ", rank, " state '", s.name, "' has ", s.numel,
                 " elements, its layout ", psi);
    STRATA_CHECK(s.held.begin >= 0 && s.held.end >= s.held.begin, "checkpoint: state '", s.name,
                 "' holds [", s.held.begin, ",", s.held.end, ") of ", s.numel);
    const Range w = write_range(s, rank, world);
    STRATA_CHECK(w.empty() || (s.data && w.begin >= s.held.begin && w.end <= s.held.end),
                 "checkpoint: state '", s.name, "' data missing for [", w.begin, ",", w.end, ")");
    for (const TensorPiece& p : layout) {
      const Range x = intersect(w, {p.local_offset, p.local_offset + p.numel()});
      if (p.primary && !x.empty()) out.push_back({i, &p, x});
    }
  }
  return out;
}

}  // namespace

int64_t Checkpointer::host_bytes(const SaveRequest& req) const {
  int64_t bytes = 0;
  const TensorLayout layout = layout_of(req);
  for (const WriteChunk& c : chunks_to_write(req, layout, opts_.rank, opts_.world))
    bytes += align64(c.local.size() * int64_t(dtype_size(req.states[c.state].dtype)));
  return bytes;
}

void Checkpointer::prepare(const SaveRequest& req) {
  finish_previous(false);
  const int64_t bytes = host_bytes(req);
  if (host_.bytes() < size_t(bytes)) host_ = Buffer(MemCategory::other, size_t(bytes));
  std::memset(host_.data(), 0, host_.bytes());  // first touch now, not inside a step
}

void Checkpointer::save_async(const SaveRequest& req) {
  Stopwatch wait_clock;
  finish_previous(false);
  const double wait_prev = wait_clock.seconds();
  Stopwatch copy_clock;

  const TensorLayout layout = layout_of(req);
  const std::vector<WriteChunk> chunks = chunks_to_write(req, layout, opts_.rank, opts_.world);
  int64_t bytes = 0;
  for (const WriteChunk& c : chunks)
    bytes += align64(c.local.size() * int64_t(dtype_size(req.states[c.state].dtype)));
  if (host_.bytes() < size_t(bytes)) host_ = Buffer(MemCategory::other, size_t(bytes));

  pending_pieces_.clear();
  pending_states_.clear();
  int64_t total = 0;
  for (const TensorInfo& t : unique_views(req.tensors)) total += numel(t.shape);
  for (const StateSlice& s : req.states) {
    bool seen = false;
    for (const StateInfo& p : pending_states_) seen = seen || p.name == s.name;
    if (!seen) pending_states_.push_back({s.name, s.dtype, total, s.partial});
  }
  char* dst = host_.as<char>();
  for (const WriteChunk& c : chunks) {
    const StateSlice& s = req.states[c.state];
    const TensorPiece& p = *c.piece;
    const size_t es = dtype_size(s.dtype);
    const int64_t n = c.local.size() * int64_t(es);
    std::memcpy(dst, static_cast<const char*>(s.data) + (c.local.begin - s.held.begin) * int64_t(es),
                size_t(n));
    PieceInfo info;
    info.state = s.name;
    info.tensor = p.name;
    info.offsets = p.offsets;
    info.extents = p.extents;
    info.flat = {c.local.begin - p.local_offset, c.local.end - p.local_offset};
    info.bytes = n;
    pending_pieces_.push_back({std::move(info), dst});
    dst += align64(n);
  }
  pending_tensors_ = unique_views(req.tensors);
  pending_train_ = req.train;
  pending_train_.step = req.step;

  current_ = SaveStats{};
  current_.step = req.step;
  current_.wait_prev_s = wait_prev;
  current_.copy_s = copy_clock.seconds();
  current_.stall_s = current_.wait_prev_s + current_.copy_s;
  const std::string tmp_dir = root_ + "/.tmp-" + step_dir_name(req.step);
  writer_done_.store(false);
  writer_ = std::thread([this, tmp_dir, step = req.step] {
    tracer().name_thread("ckpt write");
    write_and_commit(tmp_dir, step);
    writer_done_.store(true);
  });
}

bool Checkpointer::poll() {
  if (!writer_.joinable() || !writer_done_.load()) return false;
  finish_previous(false);
  return true;
}

SaveStats Checkpointer::wait() {
  finish_previous(true);
  return history_.empty() ? SaveStats{} : history_.back();
}

static std::string index_name(int rank, int world) {
  std::string s = shard_file_name(rank, world);
  return s.substr(0, s.size() - 4) + ".json";
}

// Writer thread. Every rank passes both barriers whatever happens, so one rank's failure
// (a full disk) cannot leave the others waiting forever.
void Checkpointer::write_and_commit(const std::string& tmp_dir, int64_t step) {
  const int rank = opts_.rank, world = opts_.world;
  const FaultInjection& faults = opts_.faults;
  Stopwatch clock;
  std::string error;
  try {
    make_dirs(tmp_dir);
    const std::string shard = tmp_dir + "/" + shard_file_name(rank, world);
    const std::string index = tmp_dir + "/" + index_name(rank, world);
    // Files left by an earlier attempt at this step must not be taken for this one's.
    ::unlink(index.c_str());
    ::unlink(shard.c_str());
    ShardInfo info = write_shard_file(shard + ".tmp", rank, world, step, pending_pieces_,
                                      opts_.block_bytes, &faults);
    rename_path(shard + ".tmp", shard);
    faults.point("shard_renamed");
    info.file = shard_file_name(rank, world);
    json j = to_json(info);
    j["world"] = world;
    j["step"] = step;
    j["block_bytes"] = opts_.block_bytes;
    atomic_write_file(index, j.dump());  // its directory fsync also makes the shard's rename durable
    faults.point("index_written");
    current_.bytes = info.file_bytes;
  } catch (const std::exception& e) {
    error = e.what();
  }
  current_.write_s = clock.seconds();
  Stopwatch commit_clock;
  // A barrier that throws (a peer timed out) means the group is broken: nothing is committed
  // and no further barrier is attempted.
  bool group_ok = true;
  auto barrier = [&] {
    if (!opts_.barrier || !group_ok) return;
    try {
      opts_.barrier();
    } catch (const std::exception& e) {
      group_ok = false;
      error = cat("checkpoint barrier failed: ", e.what());
    }
  };
  barrier();
  faults.point("barrier");
  if (rank == 0 && group_ok) {
    try {
      if (!error.empty()) fail(error);
      commit(tmp_dir, step);
    } catch (const std::exception& e) {
      error = e.what();
      std::error_code ec;
      fs::remove_all(tmp_dir, ec);  // frees the space a full disk needs; never a committed dir
    }
  }
  barrier();
  if (rank != 0 && error.empty()) {
    try {
      auto latest = read_latest(root_);
      if (!latest || *latest != step_dir_name(step))
        error = cat("checkpoint of step ", step, " was not committed by rank 0 (see its error)");
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  current_.commit_s = commit_clock.seconds();
  current_.ok = error.empty();
  current_.error = error;
  if (current_.ok) current_.dir = root_ + "/" + step_dir_name(step);
}

// Rank 0, after barrier #1: every rank's shard and index are durable in tmp_dir.
void Checkpointer::commit(const std::string& tmp_dir, int64_t step) {
  const int world = opts_.world;
  const FaultInjection& faults = opts_.faults;
  Manifest m;
  m.step = step;
  m.block_bytes = opts_.block_bytes;
  m.tensors = pending_tensors_;
  m.states = pending_states_;
  m.train = pending_train_;
  std::set<std::string> files = {"manifest.json"};
  for (int r = 0; r < world; ++r) {
    const std::string index = tmp_dir + "/" + index_name(r, world);
    std::ifstream in(index);
    if (!in) fail("rank ", r, " did not write its shard of step ", step, " (", index, " missing)");
    json j = json::parse(in, nullptr, false);
    if (j.is_discarded() || j.value("step", int64_t(-1)) != step || j.value("world", -1) != world ||
        j.value("block_bytes", int64_t(-1)) != m.block_bytes)
      fail(index, ": index of another save (step, world or block size differ)");
    m.shards.push_back(shard_from_json(j, index));
    files.insert(m.shards.back().file);
  }
  int64_t total = 0;
  for (const ShardInfo& s : m.shards) total += s.file_bytes;
  m.save = {{"stall_s", current_.stall_s}, {"write_s", current_.write_s}, {"bytes", total},
            {"world", world}};
  const json mj = to_json(m);
  // Catches ranks whose pieces do not tile the states (inconsistent requests) before commit.
  manifest_from_json(mj, tmp_dir + "/manifest.json");
  for (const auto& e : fs::directory_iterator(tmp_dir))
    if (!files.count(e.path().filename().string())) fs::remove_all(e.path());
  atomic_write_file(tmp_dir + "/manifest.json", mj.dump(1));
  faults.point("manifest_written");

  const std::string name = step_dir_name(step);
  const std::string final_dir = root_ + "/" + name;
  // A malformed pointer names nothing to protect, and is about to be replaced.
  std::optional<std::string> latest;
  try {
    latest = read_latest(root_);
  } catch (const Error& e) {
    log(cat(e.what(), "; replacing it"));
  }
  if (fs::exists(final_dir)) {
    if (latest && *latest == name)
      fail(final_dir, " already exists and is the latest checkpoint; not overwriting it");
    // A committed directory is complete by construction: one that verifies is a good
    // checkpoint (newer than `latest` when this run resumed from an older step) and is kept.
    std::string damage;
    try {
      CheckpointReader(final_dir).verify(true);
    } catch (const std::exception& e) {
      damage = e.what();
    }
    if (damage.empty())
      fail_setting(final_dir,
                   " already exists and verifies (this run resumed from an older step); not "
                   "replacing a good checkpoint: resume from it (",
                   setting("resume"), " auto) or save into another ", setting("run-dir"));
    log(cat("replacing damaged ", final_dir, " (", damage, ")"));
    remove_dir_safely(final_dir);
  }
  rename_path(tmp_dir, final_dir);
  fsync_dir(root_);
  faults.point("dir_renamed");
  atomic_write_file(root_ + "/latest", name + "\n");
  faults.point("latest_written");
  current_.total_bytes = total;

  // Housekeeping after the commit: nothing here can lose the new checkpoint.
  for (int64_t s : steps_to_delete(list_steps(root_), step, opts_.keep_last, opts_.keep_every)) {
    remove_dir_safely(root_ + "/" + step_dir_name(s));
    faults.point("retention_deleted");
  }
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(root_, ec)) {
    const std::string f = e.path().filename().string();
    // Older saves abandoned by a crash, and deletions a crash interrupted. Newer .tmp
    // directories are left alone: nobody can be writing them, but nothing needs them gone.
    if (f.rfind(".trash-", 0) == 0) {
      fs::remove_all(e.path(), ec);
    } else if (f.rfind(".tmp-", 0) == 0) {
      auto s = parse_step_dir(f.substr(5));
      if (s && *s < step) fs::remove_all(e.path(), ec);
    }
  }
}

json Checkpointer::summary_json() const {
  json per = json::array();
  double stall_sum = 0, stall_max = 0, write_sum = 0, write_max = 0;
  int failed = 0;
  for (const SaveStats& s : history_) {
    per.push_back(s.to_json());
    stall_sum += s.stall_s;
    stall_max = std::max(stall_max, s.stall_s);
    write_sum += s.write_s + s.commit_s;
    write_max = std::max(write_max, s.write_s + s.commit_s);
    failed += !s.ok;
  }
  const double n = std::max<double>(1, double(history_.size()));
  return {{"saves", history_.size()},
          {"failed", failed},
          {"stall_s", {{"mean", stall_sum / n}, {"max", stall_max}}},
          {"write_s", {{"mean", write_sum / n}, {"max", write_max}}},
          {"per_save", per}};
}

}  // namespace strata::ckpt
