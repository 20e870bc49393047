#include "train/mem_checkpoints.h"

#include <signal.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <xxhash.h>

#include <algorithm>
#include <cstring>
#include <filesystem>

#include "comm/live_world.h"
#include "comm/run_segments.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/timer.h"
#include "train/metrics.h"

namespace strata::train {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// A slot's payload: the training state as JSON (length-prefixed) in the first kJsonReserve
// bytes, then each state shard's held elements, each at a 64-byte boundary.
constexpr uint64_t kJsonReserve = 16 << 10;
uint64_t align64(uint64_t x) { return (x + 63) / 64 * 64; }

uint64_t shard_bytes(const parallel::StateShard& s) {
  return uint64_t(s.end - s.begin) * dtype_size(s.dtype);
}

std::string run_key(const std::string& run_dir) {
  std::error_code ec;
  const fs::path p = fs::weakly_canonical(fs::absolute(run_dir), ec);
  return ec ? run_dir : p.string();
}

std::string segment_prefix(const std::string& run_dir) {
  // name_for is "/strata-mem-<hex>-rank<R>": its prefix up to "rank" names the run.
  const std::string n = ckpt::MemSegment::name_for(run_key(run_dir), 0);
  return n.substr(1, n.size() - 1 - std::strlen("rank0"));
}

std::string mib_text(uint64_t bytes) { return fmt("%.1f MiB", double(bytes) / (1 << 20)); }

// Bytes the run's segments already hold on this host (replaced or reused, so they count as
// free for it).
uint64_t existing_bytes(const std::string& prefix) {
  uint64_t total = 0;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator("/dev/shm", ec)) {
    const std::string n = e.path().filename().string();
    if (n.compare(0, prefix.size(), prefix) != 0) continue;
    struct stat st {};
    if (stat(e.path().c_str(), &st) == 0) total += uint64_t(st.st_size);
  }
  return total;
}

}  // namespace

MemCheckpoints::MemCheckpoints(MemCheckpointOptions o, parallel::StepEngine& engine)
    : o_(std::move(o)), engine_(engine), shards_(engine.state_shards()) {
  // The fingerprint covers the layout text and every shard's name, type and range: a copy
  // restores byte for byte only into the same shards.
  std::string layout = o_.layout_text;
  uint64_t offset = kJsonReserve;
  for (const parallel::StateShard& s : shards_) {
    layout += cat("|", s.name, ":", dtype_name(s.dtype), ":", s.begin, "-", s.end);
    offset = align64(offset) + shard_bytes(s);
  }
  payload_bytes_ = align64(offset);
  fingerprint_ = XXH64(layout.data(), layout.size(), 0);

  const std::string name = ckpt::MemSegment::name_for(run_key(o_.run_dir), o_.rank);
  // Replicas: each rank learns the slot size of the peer whose copies it keeps.
  if (o_.replica_group) {
    uint64_t theirs = 0;
    comm::WorkPtr sent = o_.replica_group->send_async(&payload_bytes_, 1, DType::i64, o_.replica_to, 1);
    o_.replica_group->recv_async(&theirs, 1, DType::i64, o_.replica_from, 1)->wait();
    sent->wait();
    replica_payload_bytes_ = theirs;
  }
  if (o_.reuse) {
    try {
      segment_ = ckpt::MemSegment::open_existing(name);
    } catch (const Error& e) {
      o_.log(cat(e.what(), "; replacing it"));
    }
    // Slots of another size hold another layout's shards: kept mapped only to name that
    // layout in usable_steps' lines, while a segment of this layout replaces it.
    if (segment_ && segment_->capacity() != payload_bytes_) earlier_ = std::move(segment_);
  }
  if (!segment_) {
    const uint64_t replica = replica_payload_bytes_ > 0 ? ckpt::MemSegment::segment_bytes(replica_payload_bytes_) : 0;
    const uint64_t need = (ckpt::MemSegment::segment_bytes(payload_bytes_) + replica) * uint64_t(o_.local_world);
    struct statvfs v {};
    if (statvfs("/dev/shm", &v) == 0) {
      const uint64_t free = uint64_t(v.f_bavail) * v.f_frsize + existing_bytes(segment_prefix(o_.run_dir));
      const std::string replicas =
          replica > 0 ? cat(" and 2 replica slots of ", mib_text(replica_payload_bytes_), " (--mem-ckpt-replicas 1)") : "";
      STRATA_CHECK(need <= free, "--mem-ckpt-every ", o_.every, ": in-memory checkpoints need ",
                   mib_text(need), " in /dev/shm (2 slots of ", mib_text(payload_bytes_), replicas,
                   " per rank x ", o_.local_world, " rank(s) on this host), but it has ",
                   mib_text(free), " free; use fewer ranks per host",
                   replica > 0 ? ", --mem-ckpt-replicas 0" : "", " or --mem-ckpt-every 0");
    }
    segment_ = ckpt::MemSegment::create(name, payload_bytes_);
  }
  if (o_.replica_group) {
    // Named as replica_from's own segment (that rank runs on another host: no collision here),
    // so a restart on this host finds every old rank's copy under one naming.
    const std::string rname = ckpt::MemSegment::name_for(run_key(o_.run_dir), o_.replica_from);
    comm::own_for_run(rname);
    replica_ = ckpt::MemSegment::create(rname, replica_payload_bytes_);
  }
  // Under a launcher the job owns the segment: the launcher removes it when the job ends
  // (comm/run_segments.h), whatever becomes of this rank.
  comm::own_for_run(name);
  writer_ = std::thread([this] { writer_loop(); });
}

MemCheckpoints::~MemCheckpoints() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (writer_.joinable()) writer_.join();
  // A supervised rank that failed leaves its copies to the restart (the launcher removes
  // them when the job ends); otherwise nothing may outlive the run.
  if (segment_ && (finished_ || !o_.supervised)) {
    ckpt::MemSegment::remove(segment_->name());
    comm::disown_for_run(segment_->name());
  }
  if (replica_ && (finished_ || !o_.supervised)) {
    ckpt::MemSegment::remove(replica_->name());
    comm::disown_for_run(replica_->name());
  }
}

uint64_t MemCheckpoints::replica_bytes() const {
  return replica_ ? uint64_t(ckpt::kMemSlots) * replica_payload_bytes_ : 0;
}

int mem_segment_ranks(const std::string& run_dir) {
  const std::string prefix = segment_prefix(run_dir) + "rank";
  int n = 0;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator("/dev/shm", ec)) {
    const std::string f = e.path().filename().string();
    if (f.compare(0, prefix.size(), prefix) != 0) continue;
    const std::string digits = f.substr(prefix.size());
    if (digits.empty() || digits.find_first_not_of("0123456789") != std::string::npos) continue;
    n = std::max(n, std::stoi(digits) + 1);
  }
  return n;
}

uint64_t MemCheckpoints::bytes() const { return uint64_t(ckpt::kMemSlots) * payload_bytes_; }

const std::string& MemCheckpoints::segment_name() const { return segment_->name(); }

std::vector<int64_t> MemCheckpoints::usable_steps(bool same_job) {
  std::vector<int64_t> steps;
  const std::string run = run_key(o_.run_dir);
  passed_over_ = 0;
  const ckpt::MemSegment& seg = earlier_ ? *earlier_ : *segment_;
  for (int slot = 0; slot < ckpt::kMemSlots; ++slot) {
    const ckpt::MemSlotView v = seg.inspect(slot);
    if (v.state != ckpt::MemSlotState::empty) ++passed_over_;  // until it proves usable
    const std::string what =
        cat("in-memory copy of step ", v.meta.step, " (slot ", slot, " of /dev/shm", seg.name(), ")");
    switch (v.state) {
      case ckpt::MemSlotState::empty:
        continue;
      case ckpt::MemSlotState::incomplete:
        o_.log(cat(what, " is incomplete: its writer stopped before the checksum; not used"));
        continue;
      case ckpt::MemSlotState::corrupt:
        o_.log(cat(what, " failed its checksum (", v.problem, "); not used"));
        continue;
      case ckpt::MemSlotState::complete:
        break;
    }
    if (v.meta.run != run) {
      o_.log(cat(what, " belongs to another run (", v.meta.run, "); ignored"));
    } else if (same_job && v.meta.job != o_.job) {
      o_.log(cat(what, " belongs to another job (", v.meta.job.empty() ? "unsupervised" : v.meta.job,
                 "; this job is ", o_.job, "); ignored"));
    } else if (earlier_ || v.meta.layout != fingerprint_) {
      o_.log(cat(what, " was written at ", v.meta.layout_text, ", this run is ", o_.layout_text,
                 "; ignored"));
    } else {
      slot_step_[slot] = v.meta.step;
      steps.push_back(v.meta.step);
      --passed_over_;
    }
  }
  std::sort(steps.rbegin(), steps.rend());
  steps.erase(std::unique(steps.begin(), steps.end()), steps.end());
  return steps;
}

std::string mem_run_key(const std::string& run_dir) { return run_key(run_dir); }

json mem_state_record(const ckpt::MemSegment& seg, int slot) {
  const unsigned char* p = seg.payload(slot);
  uint64_t len = 0;
  std::memcpy(&len, p, sizeof len);
  STRATA_CHECK(len > 0 && len <= kJsonReserve - sizeof len, "in-memory copy in slot ", slot,
               " of /dev/shm", seg.name(), " has a malformed state record");
  return json::parse(std::string(reinterpret_cast<const char*>(p) + sizeof len, len));
}

MemCopy mem_copy_state(const json& j) {
  MemCopy m;
  m.step = j.at("step").get<int64_t>();
  m.tokens_seen = j.at("tokens_seen").get<int64_t>();
  m.loader.epoch = j.at("loader_epoch").get<int64_t>();
  m.loader.consumed = j.at("loader_consumed").get<int64_t>();
  m.loader.samples = j.at("loader_samples").get<int64_t>();
  m.loader.fingerprint = j.at("loader_fingerprint").get<uint64_t>();
  return m;
}

std::vector<MemShardRecord> mem_shard_records(const json& j, const std::string& where) {
  STRATA_CHECK(j.contains("shards"), "live recovery: ", where, " records no shard ranges");
  std::vector<MemShardRecord> out;
  uint64_t offset = kJsonReserve;
  for (const json& r : j["shards"]) {
    MemShardRecord s;
    s.name = r[0].get<std::string>();
    s.dtype = parse_dtype(r[1].get<std::string>());
    s.begin = r[2].get<int64_t>();
    s.end = r[3].get<int64_t>();
    s.offset = offset = align64(offset);
    offset += uint64_t(s.end - s.begin) * dtype_size(s.dtype);
    out.push_back(s);
  }
  return out;
}

MemCopy MemCheckpoints::read_copy(int slot) const {
  const unsigned char* p = segment_->payload(slot);
  const MemCopy m = mem_copy_state(mem_state_record(*segment_, slot));
  uint64_t offset = kJsonReserve;
  for (const parallel::StateShard& s : shards_) {
    offset = align64(offset);
    std::memcpy(s.data, p + offset, shard_bytes(s));
    offset += shard_bytes(s);
  }
  return m;
}

MemCopy MemCheckpoints::load(int64_t step) {
  wait_commit();
  int slot = -1;
  for (int s = 0; s < ckpt::kMemSlots; ++s)
    if (slot_step_[s] == step) slot = s;
  STRATA_CHECK(slot >= 0, "no in-memory copy of step ", step, " in /dev/shm", segment_->name());
  const MemCopy m = read_copy(slot);
  STRATA_CHECK(m.step == step, "in-memory copy in slot ", slot, " records step ", m.step,
               ", its header step ", step);
  for (int s = 0; s < ckpt::kMemSlots; ++s)
    if (s != slot) {
      segment_->clear(s);
      slot_step_[s] = -1;
    }
  return m;
}

void MemCheckpoints::clear() {
  wait_commit();
  earlier_.reset();
  for (int s = 0; s < ckpt::kMemSlots; ++s) {
    segment_->clear(s);
    slot_step_[s] = -1;
  }
}

int MemCheckpoints::newest_slot() const {
  int best = -1;
  for (int s = 0; s < ckpt::kMemSlots; ++s)
    if (slot_step_[s] >= 0 && (best < 0 || slot_step_[s] > slot_step_[best])) best = s;
  return best;
}

void MemCheckpoints::wait_commit() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [this] { return pending_slot_ < 0; });
  if (!commit_error_.empty()) fail("in-memory checkpoint: ", commit_error_);
}

void MemCheckpoints::writer_loop() {
  const std::string run = run_key(o_.run_dir);
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [this] { return stop_ || pending_slot_ >= 0; });
    if (pending_slot_ < 0) return;  // stopping with nothing left to commit
    const int slot = pending_slot_;
    const int64_t step = pending_step_;
    unsigned char* payload = pending_payload_;
    lock.unlock();
    Stopwatch copy_sw;
    copy_shards(payload, step);
    const double copy_s = copy_sw.seconds();
    lock.lock();
    copied_ = true;
    copy_s_ += copy_s;
    max_copy_s_ = std::max(max_copy_s_, copy_s);
    cv_.notify_all();
    ckpt::MemSlotMeta meta;
    meta.job = o_.job;
    meta.run = run;
    meta.layout = fingerprint_;
    meta.layout_text = o_.layout_text;
    meta.step = step;
    meta.bytes = payload_bytes_;
    lock.unlock();
    Stopwatch sw;
    std::string error;
    try {
      segment_->commit(slot, meta);
    } catch (const std::exception& e) {
      error = e.what();
    }
    const double s = sw.seconds();
    // The copy goes to the peer host before the slot may be written again (the next copy
    // waits for pending_slot_), so a replica is always of the step its header names.
    if (o_.replica_group && error.empty()) {
      Stopwatch rsw;
      try {
        exchange_replicas(slot, step, true);
      } catch (const std::exception& e) {
        error = cat("replica exchange: ", e.what());
      }
      const double r = rsw.seconds();
      replica_s_ += r;
      max_replica_s_ = std::max(max_replica_s_, r);
    } else if (o_.replica_group) {
      try {
        exchange_replicas(slot, step, false);  // the peer still waits for this rank's header
      } catch (const std::exception&) {
      }
    }
    lock.lock();
    commit_s_ += s;
    commit_error_ = error;
    pending_slot_ = -1;
    cv_.notify_all();
  }
}

namespace {

// What precedes a copy's bytes on the replica group.
struct ReplicaHeader {
  int64_t step;
  int64_t slot;
  uint64_t bytes;  // 0: the sender has no committed copy of this step (its commit failed)
  uint64_t payload_hash;
  uint64_t layout;
};

}  // namespace

void MemCheckpoints::exchange_replicas(int slot, int64_t step, bool committed) {
  comm::ProcessGroup& g = *o_.replica_group;
  ReplicaHeader out{step, slot, committed ? payload_bytes_ : 0,
                    committed ? segment_->payload_hash(slot) : 0, fingerprint_};
  ReplicaHeader in{};
  comm::WorkPtr sent = g.send_async(&out, sizeof out, DType::u8, o_.replica_to, 2);
  g.recv_async(&in, sizeof in, DType::u8, o_.replica_from, 2)->wait();
  sent->wait();
  comm::WorkPtr payload;
  if (out.bytes > 0) payload = g.send_async(segment_->payload(slot), size_t(out.bytes), DType::u8, o_.replica_to, 3);
  if (in.bytes > 0) {
    STRATA_CHECK(in.slot >= 0 && in.slot < ckpt::kMemSlots && in.bytes <= replica_->capacity(),
                 "replica of rank ", o_.replica_from, "'s copy of step ", in.step, " claims slot ",
                 in.slot, " and ", in.bytes, " bytes; its segment has ", ckpt::kMemSlots,
                 " slots of ", replica_->capacity());
    const int rslot = int(in.slot);
    unsigned char* to = replica_->begin_write(rslot, in.step);
    g.recv_async(to, size_t(in.bytes), DType::u8, o_.replica_from, 3)->wait();
    ckpt::MemSlotMeta meta;
    meta.job = o_.job;
    meta.run = run_key(o_.run_dir);
    meta.layout = in.layout;
    meta.layout_text = o_.layout_text;
    meta.step = in.step;
    meta.bytes = in.bytes;
    if (replica_->commit_received(rslot, meta, in.payload_hash)) {
      ++replicas_kept_;
    } else {
      ++replicas_bad_;
      o_.log(cat("replica of rank ", o_.replica_from, "'s in-memory copy of step ", in.step,
                 " failed its checksum on arrival (slot ", rslot, " of /dev/shm", replica_->name(),
                 "); not kept"));
    }
  }
  if (payload) payload->wait();
}

// On the writer thread, while the next step's forward and backward only read the states.
void MemCheckpoints::copy_shards(unsigned char* payload, int64_t step) {
  unsigned char* p = payload + kJsonReserve;
  const diag::FaultSpec& f = o_.fault;
  const bool die_in_copy = f.kind == diag::FaultKind::kill_during_mem_ckpt && f.fires(o_.rank, step);
  uint64_t offset = 0;
  for (const parallel::StateShard& s : shards_) {
    offset = align64(offset);
    const uint64_t n = shard_bytes(s);
    if (die_in_copy) {  // half of the first shard written, then the rank dies
      std::memcpy(p + offset, s.data, n / 2);
      raise(SIGKILL);
    }
    std::memcpy(p + offset, s.data, n);
    offset += n;
  }
}

void MemCheckpoints::before_update() {
  if (comm::rank_live_board()) {
    // Live recovery: the copy of the last step is committed before this rank's update, so a
    // peer that finished this step (its ZeRO all-gather after every rank's update) and starts
    // the next copy over its older slot leaves a step every rank holds complete.
    Stopwatch sw;
    wait_commit();
    stall_s_ += sw.seconds();
    return;
  }
  std::unique_lock<std::mutex> lock(mu_);
  if (pending_slot_ < 0 || copied_) return;
  Stopwatch sw;
  cv_.wait(lock, [this] { return pending_slot_ < 0 || copied_; });
  stall_s_ += sw.seconds();
}

void MemCheckpoints::after_step(int64_t done, const data::LoaderState& loader, int64_t tokens_seen) {
  if (done % o_.every == 0) copy(done, loader, tokens_seen);
}

void MemCheckpoints::copy(int64_t done, const data::LoaderState& loader, int64_t tokens_seen) {
  Stopwatch sw;
  wait_commit();
  // The engine's buffers, as now (their ranges are the fingerprint's; the writer is idle).
  shards_ = engine_.state_shards();
  // The slot not holding the newest copy: that one stays complete while this is written.
  const int newest = newest_slot();
  const int slot = newest < 0 ? 0 : 1 - newest;
  slot_step_[slot] = -1;
  unsigned char* p = segment_->begin_write(slot, done);  // the writer copies the shards
  json ranges = json::array();  // where each shard lies in the states (EarlierWorld reads them)
  for (const parallel::StateShard& sh : shards_)
    ranges.push_back({sh.name, dtype_name(sh.dtype), sh.begin, sh.end});
  const std::string state = json{{"step", done},
                                 {"shards", ranges},
                                 {"tokens_seen", tokens_seen},
                                 {"loader_epoch", loader.epoch},
                                 {"loader_consumed", loader.consumed},
                                 {"loader_samples", loader.samples},
                                 {"loader_fingerprint", loader.fingerprint}}
                                .dump();
  const uint64_t len = state.size();
  STRATA_CHECK(len + sizeof len <= kJsonReserve, "in-memory checkpoint state record of ", len,
               " bytes exceeds its ", kJsonReserve, "-byte reserve");
  std::memcpy(p, &len, sizeof len);
  std::memcpy(p + sizeof len, state.data(), len);
  {
    std::lock_guard<std::mutex> lock(mu_);
    pending_slot_ = slot;
    pending_step_ = done;
    pending_payload_ = p;
    copied_ = false;
  }
  cv_.notify_all();
  slot_step_[slot] = done;
  stall_s_ += sw.seconds();
  ++copies_;
  const diag::FaultSpec& f = o_.fault;
  if (f.kind == diag::FaultKind::corrupt_mem_ckpt && f.fires(o_.rank, done)) {
    wait_commit();  // the complete copy of this step gets one byte flipped, then the rank dies
    segment_->flip_byte(slot, payload_bytes_ / 2);
    raise(SIGKILL);
  }
}

MemCopy MemCheckpoints::restore_newest() {
  wait_commit();
  const int slot = newest_slot();
  if (slot < 0) return MemCopy{-1, {}, 0};
  const ckpt::MemSlotView v = segment_->inspect(slot);
  STRATA_CHECK(v.state == ckpt::MemSlotState::complete, "in-memory copy of step ", slot_step_[slot],
               " in /dev/shm", segment_->name(), " cannot be rolled back to: ",
               v.problem.empty() ? "it is incomplete" : v.problem);
  return read_copy(slot);
}

void MemCheckpoints::finish() {
  wait_commit();
  finished_ = true;
}

json MemCheckpoints::summary_json() const {
  json j = {{"every", o_.every},
            {"bytes_per_rank", bytes()},
            {"segment", "/dev/shm" + segment_->name()},
            {"copies", copies_}};
  if (replica_) {
    j["replicas"] = 1;
    j["replica_bytes_per_rank"] = replica_bytes();
    j["replica_segment"] = "/dev/shm" + replica_->name();
    j["replica_to_rank"] = o_.replica_to;
    j["replicas_kept"] = replicas_kept_;
    j["replicas_failed_checksum"] = replicas_bad_;
    if (replicas_kept_ + replicas_bad_ > 0) {
      j["replica_ms_mean"] = replica_s_ / double(replicas_kept_ + replicas_bad_) * 1e3;
      j["replica_ms_max"] = max_replica_s_ * 1e3;
    }
  }
  if (copies_ > 0) {
    j["stall_ms_mean"] = stall_s_ / double(copies_) * 1e3;
    j["copy_ms_mean"] = copy_s_ / double(copies_) * 1e3;
    j["copy_ms_max"] = max_copy_s_ * 1e3;
    j["commit_ms_mean"] = commit_s_ / double(copies_) * 1e3;
  }
  return j;
}

}  // namespace strata::train
