// In-memory checkpoint copies of one rank: a POSIX shared-memory object on the rank's host
// that outlives the rank's process (its supervised restart, or `--resume auto` after a crash,
// maps it again), with two or three slots so that the copy being written never destroys the
// last complete one. Two suffice for one rank alone; a third keeps the step before the newest
// while the next is written (live recovery: a rank killed in its commit of step s leaves s-1,
// which its peers then still hold while they write s+1) and lets a replica sender hold a slot
// for as long as its paced send takes (recovery/mem_checkpoints.h).
//
// Layout (every part 4 KiB aligned):
//   SegmentHeader   magic "STRAMEM1", version, slot count, slot capacity
//   slot 0          SlotHeader (job, run, layout fingerprint and text, step, byte count,
//                   payload xxh64, header xxh64), then `capacity` payload bytes
//   slot 1, [2]     the same
// The slot count is the creator's; every reader takes it from the header (a 2-slot segment of
// an older binary reads as before: the layout did not change, only the count may).
// Commit protocol: a writer clears the slot's header hash before it touches the payload,
// hashes the payload once written, fills the header and stores the header hash last. So a
// copy killed half-way reads as incomplete, and a byte flipped later fails the payload
// checksum. Not thread-safe: one writer at a time per slot (recovery/mem_checkpoints.h).
#pragma once
#include <cstdint>
#include <memory>
#include <string>

namespace strata::ckpt {

inline constexpr uint64_t kMemMagic = 0x314d454d41525453ull;  // "STRAMEM1"
inline constexpr uint32_t kMemVersion = 1;
inline constexpr int kMaxMemSlots = 3;  // slot tables are sized by it; absent slots: -1

// What a slot says it holds, written by commit and read back by inspect.
struct MemSlotMeta {
  std::string job;     // the supervised job that wrote it (STRATA_RUN_ID), "" when unsupervised
  std::string run;     // the run directory it belongs to (canonical path)
  uint64_t layout = 0;        // fingerprint of the layout and state shards
  std::string layout_text;    // the same, readable: "world 2 dp 2 tp 1 ... zero 1 fp32"
  int64_t step = -1;
  uint64_t bytes = 0;         // payload bytes covered by the checksum
};

enum class MemSlotState { empty, incomplete, corrupt, complete };

struct MemSlotView {
  MemSlotState state = MemSlotState::empty;
  MemSlotMeta meta;       // valid for corrupt and complete; incomplete: step only
  std::string problem;    // for corrupt: what failed ("payload checksum 0x... != 0x...")
};

class MemSegment {
 public:
  // "/strata-mem-<16 hex of the run key>-rank<R>": one object per rank and run.
  static std::string name_for(const std::string& run_key, int rank);
  // Bytes of a segment of `slots` slots holding `capacity` payload bytes each.
  static uint64_t segment_bytes(uint64_t capacity, int slots);
  // Maps an existing segment of 2 or 3 slots; null when there is none. Throws one line for an
  // object of that name that is not a segment of this format (the text says why).
  static std::unique_ptr<MemSegment> open_existing(const std::string& name);
  // Creates (replacing any object of that name) a segment with `slots` (2 or 3) empty slots
  // of `capacity` bytes, its memory reserved up front, so a full /dev/shm is one line here
  // rather than a SIGBUS in a later copy.
  static std::unique_ptr<MemSegment> create(const std::string& name, uint64_t capacity, int slots = 2);
  static void remove(const std::string& name);

  ~MemSegment();
  MemSegment(const MemSegment&) = delete;
  MemSegment& operator=(const MemSegment&) = delete;

  const std::string& name() const { return name_; }
  uint64_t capacity() const { return capacity_; }
  int slots() const { return slots_; }

  // Reads a slot's header and, when it is committed, checks the payload's checksum (one
  // pass over it; check_payload = false: the header's own checksum only, no pass).
  MemSlotView inspect(int slot, bool check_payload = true) const;
  const unsigned char* payload(int slot) const;
  // Marks the slot incomplete (as of `step`) and returns its payload for the writer.
  unsigned char* begin_write(int slot, int64_t step);
  // Hashes meta.bytes payload bytes and commits the slot under `meta` (hash stored last).
  void commit(int slot, const MemSlotMeta& meta);
  // Marks the slot empty (a copy of a step this run will not continue from).
  void clear(int slot);
  // Flips one payload byte of a committed slot (the corrupt-mem-ckpt fault).
  void flip_byte(int slot, uint64_t at);
  // The payload checksum a committed slot's header records (0 when not committed).
  uint64_t payload_hash(int slot) const;
  // Writable payload of a slot marked incomplete by begin_write (a replica being received).
  unsigned char* mutable_payload(int slot);
  // A copy received from a peer host (--mem-ckpt-replicas, recovery/mem_checkpoints.h): commits
  // the slot as commit() does, then checks the payload checksum it computed against the
  // sender's (`sent_hash`, of the sender's own commit). On a mismatch the slot is cleared and
  // false returned: the bytes were damaged in transit or in this slot.
  bool commit_received(int slot, const MemSlotMeta& meta, uint64_t sent_hash);

 private:
  MemSegment(std::string name, unsigned char* base, uint64_t bytes, uint64_t capacity, int slots);
  unsigned char* slot_base(int slot) const;

  std::string name_;
  unsigned char* base_;
  uint64_t bytes_, capacity_;
  int slots_;
};

}  // namespace strata::ckpt
