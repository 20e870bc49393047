#include "recovery/mem_checkpoints.h"

#include <signal.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <xxhash.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>

#include "core/dtype.h"
#include "core/error.h"
#include "core/memory.h"
#include "core/timer.h"
#include "core/trace.h"
#include "launcher/run_segments.h"

namespace strata::recovery {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// A slot's payload: the training state as JSON (length-prefixed) in the first `reserve`
// bytes (MemCheckpointOptions::state_reserve, 64-aligned, recorded in the state as "reserve";
// a record without it is an older copy's, which reserved kJsonReserve), then each state
// shard's held elements, each at a 64-byte boundary.
constexpr uint64_t kJsonReserve = 16 << 10;

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
  reserve_ = align64(std::max<uint64_t>(o_.state_reserve, kJsonReserve));
  if (reserve_ != kJsonReserve) layout += cat("|reserve:", reserve_);
  uint64_t offset = reserve_;
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
    // A segment of another slot count (another --recovery) is read the same way.
    if (segment_ && (segment_->capacity() != payload_bytes_ || segment_->slots() != slots_))
      earlier_ = std::move(segment_);
  }
  if (!segment_) {
    const uint64_t replica =
        replica_payload_bytes_ > 0 ? ckpt::MemSegment::segment_bytes(replica_payload_bytes_, kReplicaSlots) : 0;
    const uint64_t need = (ckpt::MemSegment::segment_bytes(payload_bytes_, slots_) + replica) * uint64_t(o_.local_world);
    struct statvfs v {};
    if (statvfs("/dev/shm", &v) == 0) {
      const uint64_t free = uint64_t(v.f_bavail) * v.f_frsize + existing_bytes(segment_prefix(o_.run_dir));
      const std::string replicas =
          replica > 0 ? cat(" and ", kReplicaSlots, " replica slots of ", mib_text(replica_payload_bytes_),
                            " (--mem-ckpt-replicas 1)") : "";
      STRATA_CHECK_SETTING(
          need <= free, setting("mem-ckpt-every"), " ", o_.every, ": in-memory checkpoints need ",
          mib_text(need), " in /dev/shm (", slots_, " slots of ", mib_text(payload_bytes_),
          replicas, " per rank x ", o_.local_world, " rank(s) on this host), but it has ",
          mib_text(free), " free; use fewer ranks per host",
          replica > 0 ? cat(", ", setting("mem-ckpt-replicas"), " 0") : std::string(), " or ",
          setting("mem-ckpt-every"), " 0");
    }
    segment_ = ckpt::MemSegment::create(name, payload_bytes_, slots_);
  }
  if (o_.replica_group) {
    // Named as replica_from's own segment (that rank runs on another host: no collision here),
    // so a restart on this host finds every old rank's copy under one naming.
    const std::string rname = ckpt::MemSegment::name_for(run_key(o_.run_dir), o_.replica_from);
    launcher::own_for_run(rname);
    replica_ = ckpt::MemSegment::create(rname, replica_payload_bytes_, kReplicaSlots);
  }
  // Under a launcher the job owns the segment: the launcher removes it when the job ends
  // (launcher/run_segments.h), whatever becomes of this rank.
  launcher::own_for_run(name);
  writer_ = std::thread([this] { writer_loop(); });
  if (o_.replica_group) {
    // Ending (finish, or a stop without it: a failure, a world change) sends the rest at once;
    // a stop without finish waits on a peer that does not answer for kReplicaGraceS at most.
    auto ending = [this] {
      std::lock_guard<std::mutex> lock(mu_);
      return stop_ || finishing_;
    };
    auto give_up = [this] {
      std::lock_guard<std::mutex> lock(mu_);
      return stop_ && !finishing_ && stop_watch_.seconds() > kReplicaGraceS;
    };
    // The training's own collectives and sends in flight: a chunk waits for a gap.
    link_ = std::make_unique<ReplicaLink>(*o_.replica_group, o_.replica_to, o_.replica_from, o_.replica_mbps,
                                          ending, give_up, comm::wait_foreground_idle);
    replicator_ = std::thread([this] { replica_loop(); });
  }
}

MemCheckpoints::~MemCheckpoints() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    stop_watch_ = Stopwatch();
  }
  cv_.notify_all();
  if (writer_.joinable()) writer_.join();
  if (replicator_.joinable()) replicator_.join();
  if (abandoned_) {
    // The replica group may still read or write these mappings (the process is failing): the
    // names go, the memory stays mapped until the process ends.
    if (!o_.supervised) {
      ckpt::MemSegment::remove(segment_->name());
      ckpt::MemSegment::remove(replica_->name());
    }
    segment_.release();
    replica_.release();
    link_.release();
    return;
  }
  // A supervised rank that failed leaves its copies to the restart (the launcher removes
  // them when the job ends); otherwise nothing may outlive the run.
  if (segment_ && (finished_ || !o_.supervised)) {
    ckpt::MemSegment::remove(segment_->name());
    launcher::disown_for_run(segment_->name());
  }
  if (replica_ && (finished_ || !o_.supervised)) {
    ckpt::MemSegment::remove(replica_->name());
    launcher::disown_for_run(replica_->name());
  }
}

uint64_t MemCheckpoints::replica_bytes() const {
  return replica_ ? uint64_t(kReplicaSlots) * replica_payload_bytes_ : 0;
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

uint64_t MemCheckpoints::bytes() const { return uint64_t(slots_) * payload_bytes_; }

const std::string& MemCheckpoints::segment_name() const { return segment_->name(); }

std::vector<int64_t> MemCheckpoints::usable_steps(bool same_job) {
  std::vector<int64_t> steps;
  const std::string run = run_key(o_.run_dir);
  passed_over_ = 0;
  const ckpt::MemSegment& seg = earlier_ ? *earlier_ : *segment_;
  for (int slot = 0; slot < seg.slots(); ++slot) {
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
    } else if (earlier_ && earlier_->capacity() == payload_bytes_ && v.meta.layout == fingerprint_) {
      o_.log(cat(what, " lies in a segment of ", seg.slots(), " slots, this run uses ", slots_,
                 " (another --recovery or --mem-ckpt-replicas); ignored"));
    } else if (earlier_ || v.meta.layout != fingerprint_) {
      o_.log(cat(what, " was written at ", v.meta.layout_text, ", this run is ", o_.layout_text,
                 "; ignored"));
    } else {
      slot_step_[slot] = v.meta.step;
      {
        std::lock_guard<std::mutex> lock(mu_);
        committed_[slot] = v.meta.step;
      }
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
  STRATA_CHECK(len > 0 && len <= seg.capacity() - sizeof len, "in-memory copy in slot ", slot,
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
  if (j.contains("extra")) m.extra = j["extra"];
  return m;
}

std::vector<MemShardRecord> mem_shard_records(const json& j, const std::string& where) {
  STRATA_CHECK(j.contains("shards"), "live recovery: ", where, " records no shard ranges");
  std::vector<MemShardRecord> out;
  uint64_t offset = j.value("reserve", kJsonReserve);
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
  uint64_t offset = reserve_;
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
  for (int s = 0; s < slots_; ++s)
    if (slot_step_[s] == step) slot = s;
  STRATA_CHECK(slot >= 0, "no in-memory copy of step ", step, " in /dev/shm", segment_->name());
  const MemCopy m = read_copy(slot);
  STRATA_CHECK(m.step == step, "in-memory copy in slot ", slot, " records step ", m.step,
               ", its header step ", step);
  std::lock_guard<std::mutex> lock(mu_);
  for (int s = 0; s < slots_; ++s)
    if (s != slot) {
      segment_->clear(s);
      slot_step_[s] = committed_[s] = -1;
    }
  return m;
}

void MemCheckpoints::clear() {
  wait_commit();
  earlier_.reset();
  std::lock_guard<std::mutex> lock(mu_);
  for (int s = 0; s < slots_; ++s) {
    segment_->clear(s);
    slot_step_[s] = committed_[s] = -1;
  }
}

namespace {

int newest_of(const int64_t* steps, int slots) {
  int best = -1;
  for (int s = 0; s < slots; ++s)
    if (steps[s] >= 0 && (best < 0 || steps[s] > steps[best])) best = s;
  return best;
}

}  // namespace

int mem_slot_to_write(const int64_t* steps, int slots, unsigned held) {
  const int newest = newest_of(steps, slots);
  int best = -1;
  for (int s = 0; s < slots; ++s)
    if (s != newest && !(held >> s & 1u) && (best < 0 || steps[s] < steps[best])) best = s;
  if (best < 0 && newest >= 0 && !(held >> newest & 1u)) best = newest;
  return best;
}

int MemCheckpoints::newest_slot() const { return newest_of(slot_step_, slots_); }

int MemCheckpoints::newest_committed() const { return newest_of(committed_, slots_); }

void MemCheckpoints::wait_commit() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [this] { return pending_slot_ < 0; });
  if (!commit_error_.empty()) fail("in-memory checkpoint: ", commit_error_);
}

void MemCheckpoints::writer_loop() {
  tracer().name_thread("mem-ckpt copy");
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
    const diag::FaultSpec& f = o_.fault;
    if (f.kind == diag::FaultKind::kill_during_mem_commit && f.fires(o_.rank, step)) {
      // The commit outlasts the next step: the peers finish it (at ZeRO 0 they need nothing
      // of this rank after its gradients) and start their next copy while this one is open.
      lock.unlock();
      std::this_thread::sleep_for(std::chrono::milliseconds(1500));
      raise(SIGKILL);
    }
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
    lock.lock();
    commit_s_ += s;
    commit_error_ = error;
    if (error.empty()) committed_[slot] = step;  // the replica thread may take it now
    pending_slot_ = -1;
    cv_.notify_all();
  }
}

int64_t MemCheckpoints::newest_step() const {
  const int slot = newest_committed();
  return slot < 0 ? -1 : committed_[slot];
}

int MemCheckpoints::first_after(int64_t after) const {
  int best = -1;
  for (int s = 0; s < slots_; ++s)
    if (committed_[s] > after && (best < 0 || committed_[s] < committed_[best])) best = s;
  return best;
}

unsigned MemCheckpoints::held_slots() const {
  unsigned held = 0;
  if (kept_ >= 0) held |= 1u << kept_;
  if (pinned_ >= 0) held |= 1u << pinned_;
  if (awaited_ >= -1) {
    const int next = first_after(awaited_);
    if (next >= 0) held |= 1u << next;
  }
  return held;
}

void MemCheckpoints::replica_loop() {
  tracer().name_thread("mem-ckpt repl");
  // Every rank sends the same steps: between rounds the whole replica group agrees (one
  // all-reduce) on the newest step any rank holds, M; each rank then sends its first copy
  // after M, a step every rank copies, kept from the writer until sent (held_slots). So the
  // step a replica holds is one every rank also keeps in its own slots (`kept_`, until the
  // next replica is complete at every peer: the next agreement), and a lost host resumes
  // there. The agreement also ends the rounds on every rank at once (any rank ending).
  int64_t last_sent = -1;
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    int64_t agreed[2] = {newest_step(), stop_ || finishing_ ? 1 : 0};
    lock.unlock();
    std::string error;
    try {
      link_->agree_max(agreed, 2);
    } catch (const std::exception& e) {
      error = e.what();
    }
    lock.lock();
    if (!error.empty() || agreed[1] > 0) {
      if (!error.empty()) replica_failed(lock, error);
      return;
    }
    // Every rank finished the last round: every peer holds the step sent complete, so the one
    // before it is free.
    if (pinned_ >= 0) kept_ = pinned_, pinned_ = -1;
    // The writer's commits are final once it is idle and the rank is ending (finish, or a stop
    // after the step's copy): then every rank sees the same copies and decides alike.
    awaited_ = agreed[0];
    cv_.wait(lock, [&] { return first_after(awaited_) >= 0 || ((stop_ || finishing_) && pending_slot_ < 0); });
    const int slot = first_after(awaited_);
    awaited_ = -2;
    if (slot < 0) continue;  // ending before the copy: the next agreement ends the rounds
    pinned_ = slot;
    ReplicaHeader out;
    out.step = committed_[slot];
    out.bytes = payload_bytes_;
    out.payload_hash = segment_->payload_hash(slot);
    out.layout = fingerprint_;
    if (last_sent >= 0) {
      const int64_t age = newest_step() - last_sent;
      age_sum_ += age;
      age_max_ = std::max(age_max_, age);
      ++replica_ages_;
    }
    lock.unlock();
    Stopwatch sw;
    ReplicaHeader in;
    try {
      in = link_->round(out, segment_->payload(slot), [this](const ReplicaHeader& h) { return replica_slot_for(h); });
      if (in.bytes > 0) keep_replica(in);
    } catch (const std::exception& e) {
      error = e.what();
    }
    const double r = sw.seconds();
    lock.lock();
    if (!error.empty()) {
      replica_failed(lock, error);
      return;
    }
    // The slot stays held (pinned, then kept): its peer holds this step, so must this rank.
    last_sent = out.step;
    ++replicas_sent_;
    gap_wait_s_ = link_->deferred_s();
    gap_waits_out_ = link_->deferred_out();
    replica_s_ += r;
    max_replica_s_ = std::max(max_replica_s_, r);
  }
}

void MemCheckpoints::replica_failed(std::unique_lock<std::mutex>& lock, const std::string& error) {
  // Replicas end here; training goes on (a dead peer host breaks its groups anyway). A rank
  // that gave up on a peer while stopping may leave operations that still use the segments.
  kept_ = pinned_ = -1;
  awaited_ = -2;
  abandoned_ = stop_ && !finishing_;
  replica_error_ = error;
  cv_.notify_all();
  if (abandoned_) return;
  lock.unlock();
  o_.log(cat("replicas to rank ", o_.replica_to, " and from rank ", o_.replica_from, " stop: ", error));
  lock.lock();
}

unsigned char* MemCheckpoints::replica_slot_for(const ReplicaHeader& in) {
  STRATA_CHECK(in.bytes <= replica_->capacity(), "replica of rank ", o_.replica_from, "'s copy of step ",
               in.step, " claims ", in.bytes, " bytes; its slots hold ", replica_->capacity());
  // The older of the two replica slots: the newest replica stays complete meanwhile.
  int64_t steps[kReplicaSlots];
  for (int s = 0; s < kReplicaSlots; ++s) steps[s] = replica_->payload_hash(s) == 0 ? -1 : replica_->inspect(s, false).meta.step;
  replica_writing_ = mem_slot_to_write(steps, kReplicaSlots, 0);
  return replica_->begin_write(replica_writing_, in.step);
}

void MemCheckpoints::keep_replica(const ReplicaHeader& in) {
  ckpt::MemSlotMeta meta;
  meta.job = o_.job;
  meta.run = run_key(o_.run_dir);
  meta.layout = in.layout;
  meta.layout_text = o_.layout_text;
  meta.step = in.step;
  meta.bytes = in.bytes;
  const bool kept = replica_->commit_received(replica_writing_, meta, in.payload_hash);
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++(kept ? replicas_kept_ : replicas_bad_);
  }
  if (!kept)
    o_.log(cat("replica of rank ", o_.replica_from, "'s in-memory copy of step ", in.step,
               " failed its checksum on arrival (slot ", replica_writing_, " of /dev/shm", replica_->name(),
               "); not kept"));
}

// On the writer thread, while the next step's forward and backward only read the states.
void MemCheckpoints::copy_shards(unsigned char* payload, int64_t step) {
  unsigned char* p = payload + reserve_;
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
  // Only the read: with a third slot under live recovery, a peer that finished this step and
  // writes its next copy still keeps the step before the one this rank may be committing.
  std::unique_lock<std::mutex> lock(mu_);
  if (pending_slot_ < 0 || copied_) return;
  Stopwatch sw;
  cv_.wait(lock, [this] { return pending_slot_ < 0 || copied_; });
  stall_s_ += sw.seconds();
}

void MemCheckpoints::after_step(int64_t done, const data::LoaderState& loader, int64_t tokens_seen,
                                const json& extra) {
  if (done % o_.every == 0) copy(done, loader, tokens_seen, extra);
}

void MemCheckpoints::copy(int64_t done, const data::LoaderState& loader, int64_t tokens_seen, const json& extra) {
  Stopwatch sw;
  // The step time since the last copy bounds how long a replica chunk waits for a gap.
  if (link_ && copies_ > 0) link_->set_step_s(since_copy_.seconds() / double(o_.every));
  since_copy_ = Stopwatch();
  wait_commit();
  // The engine's buffers, as now (their ranges are the fingerprint's; the writer is idle).
  shards_ = engine_.state_shards();
  // Not the newest copy's slot (it stays complete while this is written), nor one the
  // replica thread holds (mem_slot_to_write).
  int slot = -1;
  {
    std::lock_guard<std::mutex> lock(mu_);
    slot = mem_slot_to_write(committed_, slots_, held_slots());
    STRATA_CHECK(slot >= 0, "in-memory checkpoint: no slot of ", slots_, " is free to write step ", done);
    committed_[slot] = -1;
  }
  slot_step_[slot] = -1;
  unsigned char* p = segment_->begin_write(slot, done);  // the writer copies the shards
  json ranges = json::array();  // where each shard lies in the states (EarlierWorld reads them)
  for (const parallel::StateShard& sh : shards_)
    ranges.push_back({sh.name, dtype_name(sh.dtype), sh.begin, sh.end});
  const std::string state = json{{"step", done},
                                 {"world", o_.world},
                                 {"shards", ranges},
                                 {"tokens_seen", tokens_seen},
                                 {"loader_epoch", loader.epoch},
                                 {"loader_consumed", loader.consumed},
                                 {"loader_samples", loader.samples},
                                 {"loader_fingerprint", loader.fingerprint},
                                 {"extra", extra},
                                 {"reserve", reserve_}}
                                .dump();
  const uint64_t len = state.size();
  STRATA_CHECK(len + sizeof len <= reserve_, "in-memory checkpoint state record of ", len,
               " bytes exceeds its ", reserve_, "-byte reserve");
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
  {
    std::lock_guard<std::mutex> lock(mu_);
    finishing_ = true;
  }
  cv_.notify_all();
  // Every rank finishes at the same point of the run, so the peers' end marks come.
  if (replicator_.joinable()) replicator_.join();
  finished_ = true;
}

json MemCheckpoints::summary_json() const {
  json j = {{"every", o_.every},
            {"bytes_per_rank", bytes()},
            {"segment", "/dev/shm" + segment_->name()},
            {"copies", copies_}};
  j["slots"] = slots_;
  if (replica_) {
    std::lock_guard<std::mutex> lock(mu_);
    j["replicas"] = 1;
    j["replica_bytes_per_rank"] = replica_bytes();
    j["replica_segment"] = "/dev/shm" + replica_->name();
    j["replica_to_rank"] = o_.replica_to;
    j["replica_mbps"] = o_.replica_mbps;  // the pace; 0: unpaced
    j["replicas_sent"] = replicas_sent_;
    j["replicas_kept"] = replicas_kept_;
    j["replicas_failed_checksum"] = replicas_bad_;
    if (replicas_sent_ > 0) {
      j["replica_ms_mean"] = replica_s_ / double(replicas_sent_) * 1e3;  // a round: send and receive
      j["replica_ms_max"] = max_replica_s_ * 1e3;
      // Of a round: waiting for gaps in the training's communication (mem_replicas.h), and
      // the chunks that waited as long as they may (half a step) and went anyway.
      j["replica_gap_wait_ms_mean"] = gap_wait_s_ / double(replicas_sent_) * 1e3;
      j["replica_chunks_sent_without_gap"] = gap_waits_out_;
    }
    if (replica_ages_ > 0) {
      j["replica_age_steps_mean"] = double(age_sum_) / double(replica_ages_);
      j["replica_age_steps_max"] = age_max_;
    }
    if (!replica_error_.empty()) j["replica_error"] = replica_error_;
  }
  if (copies_ > 0) {
    j["stall_ms_mean"] = stall_s_ / double(copies_) * 1e3;
    j["copy_ms_mean"] = copy_s_ / double(copies_) * 1e3;
    j["copy_ms_max"] = max_copy_s_ * 1e3;
    j["commit_ms_mean"] = commit_s_ / double(copies_) * 1e3;
  }
  return j;
}

}  // namespace strata::recovery
