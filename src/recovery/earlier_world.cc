#include "recovery/earlier_world.h"

#include <sys/stat.h>
#include <xxhash.h>

#include <algorithm>
#include <cstring>
#include <fstream>

#include "ckpt/ranges.h"
#include "core/dtype.h"
#include "core/error.h"

namespace strata::recovery {

using nlohmann::json;

namespace {

// The same file on every new rank that maps it, and only that one: the host's boot id (one
// per machine, shared by its network namespaces) with the /dev/shm object's device and inode
// (a private /dev/shm is a tmpfs of its own). Never 0.
int64_t file_identity(const std::string& name) {
  static const std::string boot = [] {
    std::ifstream in("/proc/sys/kernel/random/boot_id");
    std::string id;
    std::getline(in, id);
    return id;
  }();
  struct stat st {};
  if (stat(("/dev/shm" + name).c_str(), &st) != 0) return 0;
  const std::string key = cat(boot, ":", uint64_t(st.st_dev), ":", uint64_t(st.st_ino));
  return int64_t(XXH64(key.data(), key.size(), 0) | 1);
}

// [begin, end) pieces of `want` not yet covered, less `taken`; what `taken` covered is added
// to `got`.
void take(std::vector<ckpt::Range>& want, ckpt::Range taken, std::vector<ckpt::Range>& got) {
  std::vector<ckpt::Range> rest;
  for (const ckpt::Range& u : want) {
    const ckpt::Range both = ckpt::intersect(u, taken);
    if (both.empty()) {
      rest.push_back(u);
      continue;
    }
    got.push_back(both);
    if (u.begin < both.begin) rest.push_back({u.begin, both.begin});
    if (both.end < u.end) rest.push_back({both.end, u.end});
  }
  want = std::move(rest);
}

// A world id as a word (0: none).
uint64_t world_hash(const std::string& world) { return world.empty() ? 0 : XXH64(world.data(), world.size(), 0) | 1; }

}  // namespace

EarlierWorld::EarlierWorld(const std::string& run_dir, const std::string& job, const std::string& world,
                           int old_world, comm::ProcessGroup* group,
                           const std::function<void(const std::string&)>& log,
                           const std::function<bool(int)>& on_this_host, std::function<bool(int)> needed_ranks)
    : old_world_(old_world), group_(group), log_(log), needed_(std::move(needed_ranks)) {
  if (group_) rank_ = group_->rank(), world_ = group_->size();
  const std::string run = mem_run_key(run_dir);
  const uint64_t failed = agree_on_world(world);
  // The world a complete copy's state record names; "?" when unreadable (passed over).
  auto written_by = [&](const ckpt::MemSegment& seg, int slot) {
    try {
      return mem_state_record(seg, slot).value("world", std::string());
    } catch (const std::exception&) {
      return std::string("?");
    }
  };
  std::vector<int64_t> mine(size_t(old_world) * kCols, -1);
  std::vector<std::vector<std::string>> lines(static_cast<size_t>(old_world));  // slots passed over
  for (int q = 0; q < old_world; ++q) {
    const std::string name = ckpt::MemSegment::name_for(run, q);
    int64_t* row = &mine[size_t(q) * kCols];
    row[0] = 0;
    std::unique_ptr<ckpt::MemSegment> seg;
    try {
      if ((!on_this_host || on_this_host(q)) && needed(q)) seg = ckpt::MemSegment::open_existing(name);
    } catch (const Error& e) {  // not a segment: as if absent here (the others may hold one)
      lines[size_t(q)].push_back(cat(e.what(), "; not used"));
    }
    if (!seg) {
      segments_.push_back(nullptr);
      continue;
    }
    row[0] = file_identity(name);
    for (int slot = 0; slot < seg->slots(); ++slot) {
      const ckpt::MemSlotView v = seg->inspect(slot, false);  // headers only; verify() hashes
      const std::string what = cat("rank ", q, "'s in-memory copy of step ", v.meta.step,
                                   " (slot ", slot, " of /dev/shm", name, ")");
      if (v.state == ckpt::MemSlotState::incomplete)
        lines[size_t(q)].push_back(cat(what, " is incomplete: its writer stopped before the checksum; not used"));
      else if (v.state == ckpt::MemSlotState::corrupt)
        lines[size_t(q)].push_back(cat(what, " failed its checksum (", v.problem, "); not used"));
      else if (v.state == ckpt::MemSlotState::complete && (v.meta.run != run || v.meta.job != job))
        lines[size_t(q)].push_back(cat(what, " belongs to another run or job; ignored"));
      else if (v.state != ckpt::MemSlotState::complete)
        continue;
      else if (const std::string by = failed ? written_by(*seg, slot) : std::string(); world_hash(by) != failed)
        lines[size_t(q)].push_back(cat(what, " was written by another world of this job (", by.empty() ? "unnamed" : by,
                                       "), not the ", old_world, "-rank world that failed; ignored"));
      else
        row[1 + slot] = v.meta.step;
    }
    segments_.push_back(std::move(seg));
  }
  table_ = gather(mine);
  for (int q = 0; q < old_world; ++q) {
    // One line per file: from the lowest new rank that maps it.
    bool first = true;
    for (int r = 0; r < rank_; ++r) first &= ident(r, q) != ident(rank_, q) || ident(r, q) == 0;
    if (first)
      for (const std::string& line : lines[size_t(q)]) log_(line);
  }
  for (int q = 0; q < old_world; ++q) {
    if (!needed(q)) continue;
    bool somewhere = false;
    for (int r = 0; r < world_; ++r) somewhere |= ident(r, q) != 0;
    STRATA_CHECK(somewhere, "rank ", q, " of the ", old_world, "-rank world that failed left no in-memory "
                 "copies on this world's hosts (/dev/shm", ckpt::MemSegment::name_for(run, q),
                 " is on none of them)");
  }
}

EarlierWorld::~EarlierWorld() = default;

std::vector<int64_t> EarlierWorld::gather(const std::vector<int64_t>& mine) const {
  if (!group_) return mine;
  std::vector<int64_t> all(mine.size() * size_t(world_));
  group_->all_gather(mine.data(), all.data(), mine.size(), DType::i64);
  return all;
}

uint64_t EarlierWorld::agree_on_world(const std::string& world) const {
  const std::vector<int64_t> all = gather({int64_t(world_hash(world))});
  uint64_t out = 0;
  for (int r = 0; r < world_; ++r) {
    const uint64_t h = uint64_t(all[size_t(r)]);
    STRATA_CHECK(h == 0 || out == 0 || h == out, "live recovery: the ranks name different worlds as the one "
                 "that failed (rank ", r, " of this world names another than a lower rank does)");
    if (h != 0) out = h;
  }
  return out;
}

int EarlierWorld::slot_of(int r, int q, int64_t step) const {
  const int64_t* row = &table_[(size_t(r) * size_t(old_world_) + size_t(q)) * kCols];
  for (int slot = 0; slot < ckpt::kMaxMemSlots; ++slot)
    if (row[1 + slot] == step) return slot;
  return -1;
}

int EarlierWorld::holder(int q, int64_t step) const {
  std::vector<int> candidates;
  for (int r = 0; r < world_; ++r)
    if (slot_of(r, q, step) >= 0) candidates.push_back(r);
  return candidates.empty() ? -1 : candidates[size_t(q) % candidates.size()];
}

std::vector<int64_t> EarlierWorld::common_steps() const {
  std::vector<int64_t> out;
  for (size_t i = 0; i < table_.size(); i += kCols)
    for (int slot = 0; slot < ckpt::kMaxMemSlots; ++slot) {
      const int64_t step = table_[i + 1 + size_t(slot)];
      bool everywhere = step >= 0;
      for (int q = 0; q < old_world_ && everywhere; ++q) everywhere = !needed(q) || holder(q, step) >= 0;
      if (everywhere) out.push_back(step);
    }
  std::sort(out.rbegin(), out.rend());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

bool EarlierWorld::verify(int64_t step) {
  std::vector<bool> good(size_t(old_world_), false);
  for (;;) {
    std::vector<int64_t> failed(size_t(old_world_), 0);
    for (int q = 0; q < old_world_; ++q) {
      if (!needed(q)) continue;
      const int h = holder(q, step);
      if (h < 0) return false;  // the same on every rank: the table is
      if (h != rank_ || good[size_t(q)]) continue;
      const int slot = slot_of(h, q, step);
      const ckpt::MemSlotView v = segments_[size_t(q)]->inspect(slot);
      if (v.state == ckpt::MemSlotState::complete) continue;
      log_(cat("rank ", q, "'s in-memory copy of step ", step, " (slot ", slot, " of /dev/shm",
               segments_[size_t(q)]->name(), ") failed its checksum (", v.problem, "); not used"));
      failed[size_t(q)] = 1;
    }
    if (group_) group_->all_reduce(failed.data(), failed.size());
    bool again = false;
    for (int q = 0; q < old_world_; ++q) {
      if (!needed(q)) continue;
      const int h = holder(q, step);
      if (failed[size_t(q)] == 0) {
        good[size_t(q)] = true;
        continue;
      }
      // That file is bad for every new rank that maps it.
      const int64_t bad = ident(h, q);
      const int slot = slot_of(h, q, step);
      for (int r = 0; r < world_; ++r)
        if (ident(r, q) == bad) step_at(r, q, slot) = -1;
      again = true;
    }
    if (!again) return true;
  }
}

std::vector<json> EarlierWorld::share_records(int64_t step) const {
  // Each holder's records, concatenated; their lengths first (-1: the holder could not read it).
  std::vector<int64_t> lens(static_cast<size_t>(old_world_), 0);
  std::string records, problem;
  for (int q = 0; q < old_world_; ++q) {
    if (holder(q, step) != rank_) continue;
    try {
      const std::string rec = mem_state_record(*segments_[size_t(q)], slot_of(rank_, q, step)).dump();
      lens[size_t(q)] = int64_t(rec.size());
      records += rec;
    } catch (const Error& e) {
      lens[size_t(q)] = -1;
      if (problem.empty()) problem = e.what();
    }
  }
  const std::vector<int64_t> all_lens = gather(lens);
  std::vector<size_t> counts(size_t(world_), 0);
  for (int r = 0; r < world_; ++r)
    for (int q = 0; q < old_world_; ++q) {
      const int64_t len = all_lens[size_t(r * old_world_ + q)];
      if (len < 0) {
        STRATA_CHECK(r != rank_, problem);
        fail("live recovery: rank ", q, "'s in-memory copy of step ", step, " has a malformed state "
             "record (rank ", r, " of this world, which holds it, says why)");
      }
      counts[size_t(r)] += size_t(len);
    }
  std::string all_records = records;
  if (group_) {
    size_t total = 0;
    for (size_t c : counts) total += c;
    all_records.assign(total, '\0');
    group_->all_gather_v(records.data(), all_records.data(), counts, DType::u8);
  }
  std::vector<json> out(static_cast<size_t>(old_world_));
  size_t at = 0;
  for (int r = 0; r < world_; ++r)
    for (int q = 0; q < old_world_; ++q) {
      const size_t len = size_t(all_lens[size_t(r * old_world_ + q)]);
      if (len == 0) continue;
      out[size_t(q)] = json::parse(all_records.substr(at, len));
      at += len;
    }
  return out;
}

// Each target element from a copy on this rank's host if one holds it (the holder's file, or
// another copy of that old rank, checksummed here on first use), else from the lowest old
// rank that does, received from its holder.
EarlierWorld::Plan EarlierWorld::plan(int64_t step, int64_t psi, const std::vector<parallel::StateShard>& shards,
                                      const std::vector<std::vector<MemShardRecord>>& recs,
                                      const std::function<bool(int)>& same_states) const {
  Plan p;
  std::vector<Piece>& pieces = p.pieces;
  std::vector<int64_t>& need = p.need;
  need.assign(2 * size_t(old_world_) + 1, 0);
  std::vector<int>& readable = p.readable;
  readable.assign(size_t(old_world_), -1);  // -1: not yet known
  auto here = [&](int q) {
    int& known = readable[size_t(q)];
    if (known >= 0) return known == 1;
    const int slot = slot_of(rank_, q, step);
    known = slot >= 0 && ident(rank_, q) == ident(holder(q, step), q) ? 1 : 0;
    if (known == 0 && slot >= 0) {  // a copy the holder did not check: this rank does
      const ckpt::MemSlotView v = segments_[size_t(q)]->inspect(slot);
      known = v.state == ckpt::MemSlotState::complete ? 1 : 0;
      if (known == 0)
        log_(cat("rank ", q, "'s in-memory copy of step ", step, " (slot ", slot, " of /dev/shm",
                 segments_[size_t(q)]->name(), ") failed its checksum (", v.problem, "); its holder's is used"));
    }
    return known == 1;
  };
  std::string& problem = p.problem;
  for (size_t t = 0; t < shards.size() && problem.empty(); ++t) {
    const parallel::StateShard& to = shards[t];
    std::vector<ckpt::Range> want;
    if (std::min(to.end, psi) > to.begin) want.push_back({to.begin, std::min(to.end, psi)});
    for (int pass = 0; pass < 2; ++pass)
      for (int q = 0; q < old_world_; ++q)
        for (const MemShardRecord& s : recs[size_t(q)]) {
          if (s.name != to.name || want.empty() || !problem.empty() || (same_states && !same_states(q)))
            continue;
          if (s.dtype != to.dtype)
            problem = cat("live recovery: state ", s.name, " was copied as ", dtype_name(s.dtype),
                          ", this rank holds it as ", dtype_name(to.dtype));
          bool overlaps = false;
          for (const ckpt::Range& w : want) overlaps |= !ckpt::intersect(w, {s.begin, s.end}).empty();
          if (!overlaps || !problem.empty() || here(q) != (pass == 0)) continue;
          std::vector<ckpt::Range> got;
          take(want, {s.begin, s.end}, got);
          for (const ckpt::Range& g : got) {
            pieces.push_back({q, t, &s, g});
            if (pass == 0) continue;
            const int64_t lo = int64_t(s.offset) + (g.begin - s.begin) * int64_t(dtype_size(s.dtype));
            const int64_t hi = lo + g.size() * int64_t(dtype_size(s.dtype));
            int64_t* span = &need[2 * size_t(q)];
            span[0] = span[1] == 0 ? lo : std::min(span[0], lo);
            span[1] = std::max(span[1], hi);
          }
        }
    if (!want.empty() && problem.empty())
      problem = cat("live recovery: elements [", want.front().begin, ", ", want.front().end, ") of ", to.name,
                    " are held by none of the ", old_world_, " rank(s) of the world before",
                    same_states ? " that hold this rank's tensor slice and stage" : "");
  }
  need.back() = problem.empty() ? 0 : 1;
  return p;
}

MemCopy EarlierWorld::load(int64_t step, int64_t psi, const std::vector<parallel::StateShard>& shards,
                           const std::function<bool(int)>& same_states) {
  std::vector<int64_t> holders(static_cast<size_t>(old_world_));
  int first = -1;  // the lowest needed old rank
  for (int q = 0; q < old_world_; ++q) {
    holders[size_t(q)] = needed(q) ? holder(q, step) : -1;
    if (!needed(q)) continue;
    STRATA_CHECK(holders[size_t(q)] >= 0, "live recovery: rank ", q, " left no copy of step ", step);
    if (first < 0) first = q;
  }
  STRATA_CHECK(first >= 0, "live recovery: none of the ", old_world_, " rank(s) of the world before is needed");
  const std::vector<json> records = share_records(step);
  std::vector<std::vector<MemShardRecord>> recs(static_cast<size_t>(old_world_));
  for (int q = 0; q < old_world_; ++q)
    if (needed(q)) recs[size_t(q)] = mem_shard_records(records[size_t(q)], cat("rank ", q, "'s copy of step ", step));
  // The same in every copy: the data position is the job's.
  const MemCopy m = mem_copy_state(records[size_t(first)]);

  const Plan todo = plan(step, psi, shards, recs, same_states);
  const std::vector<int64_t>& need = todo.need;
  const std::vector<int64_t> needs = gather(need);  // per new rank, per old rank
  const size_t cols = 2 * size_t(old_world_) + 1;
  for (int r = 0; r < world_; ++r)
    if (needs[size_t(r) * cols + cols - 1] != 0) {
      STRATA_CHECK(r != rank_, todo.problem);
      fail("live recovery: rank ", r, " of this world cannot load the copies of the ", old_world_,
           "-rank world (see its line)");
    }

  // Each old rank's copy, read where it lies or its needed bytes received from its holder,
  // then its pieces. `src` holds the payload's bytes from offset `base` on.
  received_ = 0;
  for (int q = 0; q < old_world_; ++q) {
    const int h = int(holders[size_t(q)]);
    if (h < 0) continue;  // not needed
    std::vector<comm::WorkPtr> sent;
    if (h == rank_) {
      const unsigned char* mine = segments_[size_t(q)]->payload(slot_of(rank_, q, step));
      for (int r = 0; r < world_; ++r) {
        const int64_t* span = &needs[size_t(r) * cols + 2 * size_t(q)];
        if (span[1] > 0) sent.push_back(group_->send_async(mine + span[0], size_t(span[1] - span[0]), DType::u8, r, 4));
      }
    }
    std::vector<unsigned char> buf;
    const unsigned char* src = nullptr;
    uint64_t base = 0;
    if (need[2 * size_t(q) + 1] > 0) {
      base = uint64_t(need[2 * size_t(q)]);
      buf.resize(size_t(need[2 * size_t(q) + 1]) - base);
      group_->recv_async(buf.data(), buf.size(), DType::u8, h, 4)->wait();
      received_ += buf.size();
      src = buf.data();
    } else if (todo.readable[size_t(q)] == 1) {
      src = segments_[size_t(q)]->payload(slot_of(rank_, q, step));
    }
    for (const Piece& p : todo.pieces) {
      if (p.q != q) continue;
      const parallel::StateShard& to = shards[p.t];
      const size_t e = dtype_size(to.dtype);
      std::memcpy(static_cast<unsigned char*>(to.data) + size_t(p.range.begin - to.begin) * e,
                  src + (p.from->offset - base) + size_t(p.range.begin - p.from->begin) * e, size_t(p.range.size()) * e);
    }
    for (const comm::WorkPtr& w : sent) w->wait();
  }
  // Past psi lies ZeRO padding of this world: zeros.
  for (const parallel::StateShard& to : shards)
    if (psi < to.end) {
      const int64_t from = std::max(to.begin, psi);
      const size_t e = dtype_size(to.dtype);
      std::memset(static_cast<unsigned char*>(to.data) + size_t(from - to.begin) * e, 0, size_t(to.end - from) * e);
    }
  return m;
}

void drop_segments_no_rank_keeps(const std::string& run_dir, int replica_from, comm::ProcessGroup& group) {
  struct Keep {
    int64_t shm;  // which /dev/shm the rank sees
    int32_t own, replica;
  };
  const Keep mine{file_identity(""), group.rank(), replica_from};
  std::vector<Keep> all(size_t(group.size()));
  group.all_gather(&mine, all.data(), sizeof mine, DType::u8);
  for (int r = 0; r < group.rank(); ++r)
    if (all[size_t(r)].shm == mine.shm) return;  // a lower rank sees this /dev/shm
  std::vector<bool> keep(size_t(std::max(group.size(), mem_segment_ranks(run_dir))), false);
  for (const Keep& k : all)
    if (k.shm == mine.shm) {
      keep[size_t(k.own)] = true;
      if (k.replica >= 0) keep[size_t(k.replica)] = true;
    }
  const std::string run = mem_run_key(run_dir);
  for (size_t q = 0; q < keep.size(); ++q)
    if (!keep[q]) ckpt::MemSegment::remove(ckpt::MemSegment::name_for(run, int(q)));
}

}  // namespace strata::recovery
