// The in-memory copies an earlier world left (recovery/mem_checkpoints.h), loaded into a new
// world of another size: an --elastic restart on fewer hosts (RunCheckpoints::
// resume_other_world) and live recovery's re-formed world (resume_live).
//
// Terms. Old rank q: a rank of the world that failed; its copies lie in segments named
// ckpt::MemSegment::name_for(run, q): its own on its host, and with --mem-ckpt-replicas 1 a
// replica on the next host. New rank r: a rank of this world, which maps the old segments
// present in ITS host's /dev/shm only (hosts need not share /dev/shm). Holder of q at a step:
// the new rank whose copy of q is read (checksummed there, sent from there): among the new
// ranks that map a committed copy of q at that step, the (q mod their count)-th, so on one
// host the checksum passes are shared as before.
//
//   agree    (constructor) every new rank all-gathers, per old rank, the steps of its slots
//            (2 or 3, whichever the segment has; -1 for the absent third) and the identity of the file (boot id, device, inode): so every rank
//            computes the same common steps and holders, and knows who reads whose file.
//   verify   each holder hashes its copies of the step; a copy that fails is passed over for
//            another new rank's copy of the same old rank (the next holder), one line each.
//   load     the holders' state records (small: the shards' flat ranges) are all-gathered;
//            each new rank covers its own shards' ranges from copies on its own host first
//            (the holder's file, or another copy of that old rank, which it then checksums
//            itself), then from the others in old-rank order; each
//            old rank's holder sends each new rank that needs some of it and cannot read it
//            the span of payload bytes its pieces lie in (point to point), so at ZeRO 0 (every
//            copy covers everything) nothing moves.
// Cost: three all-gathers of O(new world x old world) words and one of the state records;
// the span of each remote copy a new rank needs, once per such rank; one hash pass per copy.
// On one host (or a shared /dev/shm): no bulk traffic at all.
// Layouts whose old and new worlds differ in the data-parallel degree only, ZeRO 0-2: the
// ranks of one tp rank and pipeline stage hold the same states in the same flat coordinates
// (ckpt/ranges.h), so a new rank takes its ranges from the old ranks of its own tp rank and
// stage (load's `same_states`).
//
// Collective contract: the constructor, verify and load are collective over `group` (every
// new rank calls them in the same order with the same step), and their results and errors are
// the same on every rank; common_steps and holder are local and agree everywhere.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ckpt/mem_slots.h"
#include "ckpt/ranges.h"
#include "comm/process_group.h"
#include "parallel/engine.h"
#include "recovery/mem_checkpoints.h"

namespace strata::recovery {

class EarlierWorld {
 public:
  // Maps the segments of the `old_world` ranks found in this host's /dev/shm and agrees over
  // `group` (the new world; null: this process alone) on where each lies. Throws the same one
  // line on every rank when an old rank left a copy on none of the new world's hosts. Slots
  // passed over are one line each, on the lowest new rank that maps them. `on_this_host`:
  // the old ranks whose segments this rank may map (empty: every one in /dev/shm); tests give
  // each thread rank a host of its own with it. `world`: the id of the world that failed
  // (MemCheckpointOptions::world), as the ranks that were in it know it ("" on a replacement,
  // and on every rank when any world's copies will do); the ranks agree on it, and a copy
  // another world wrote is passed over with one line: a host where none of the failed world's
  // ranks ran (the one its replacements start on) can still hold an earlier world's segments
  // of the same names and steps, in that world's layout.
  // `needed`: the old ranks whose copies this world loads (empty: every one); the others (a
  // replica group live recovery left out) are neither looked for nor waited on.
  EarlierWorld(const std::string& run_dir, const std::string& job, const std::string& world, int old_world,
               comm::ProcessGroup* group, const std::function<void(const std::string&)>& log,
               const std::function<bool(int)>& on_this_host = {}, std::function<bool(int)> needed = {});
  ~EarlierWorld();
  EarlierWorld(const EarlierWorld&) = delete;
  EarlierWorld& operator=(const EarlierWorld&) = delete;

  int old_world() const { return old_world_; }
  // Steps with a committed copy (header checksummed, of this run and job) of every needed old
  // rank on some new rank's host; newest first.
  std::vector<int64_t> common_steps() const;
  // The new rank whose copy of old rank q's `step` is read; -1 when no new rank maps one.
  int holder(int q, int64_t step) const;
  // Collective: checks the payload checksums of `step`'s copies at their holders, passing
  // over (one line each) a copy that fails for another new rank's copy of that old rank;
  // false when an old rank has no good copy of `step` left.
  bool verify(int64_t step);
  // Collective, after verify(step): fills `shards` (flat ranges of states of `psi` elements;
  // past psi: ZeRO padding, zeroed) with the copies of `step` and returns its training state.
  // Throws on every rank when some rank's element below psi is held by none of the old ranks.
  // `same_states`: the old ranks whose flat ranges index this rank's states (under tp or pp a
  // rank's states are its tensor slice's and stage's: only old ranks of the same tp rank and
  // stage hold them); empty: every old rank (a data-parallel world).
  MemCopy load(int64_t step, int64_t psi, const std::vector<parallel::StateShard>& shards,
               const std::function<bool(int)>& same_states = {});
  // Payload bytes this rank received from other new ranks in load.
  uint64_t received_bytes() const { return received_; }

 private:
  // The slot of q's copy of `step` in new rank r's file; -1 when it has none.
  int slot_of(int r, int q, int64_t step) const;
  int64_t ident(int r, int q) const { return table_[(size_t(r) * size_t(old_world_) + size_t(q)) * kCols]; }
  int64_t& step_at(int r, int q, int slot) {
    return table_[(size_t(r) * size_t(old_world_) + size_t(q)) * kCols + 1 + size_t(slot)];
  }
  // What this rank takes from the old ranks' copies of a step (load's first half).
  struct Piece {
    int q = 0;
    size_t t = 0;                          // the target shard
    const MemShardRecord* from = nullptr;  // the copy's shard it comes from
    ckpt::Range range;
  };
  struct Plan {
    std::vector<Piece> pieces;
    // Per old rank, the payload bytes [lo, hi) this rank needs from its holder (hi 0: none);
    // last: 1 when this rank cannot load (`problem` says why).
    std::vector<int64_t> need;
    std::vector<int> readable;  // per old rank: 1 when read on this host
    std::string problem;
  };
  Plan plan(int64_t step, int64_t psi, const std::vector<parallel::StateShard>& shards,
            const std::vector<std::vector<MemShardRecord>>& recs,
            const std::function<bool(int)>& same_states) const;
  // Every old rank's state record of `step` (its holder's), on every rank (collective).
  std::vector<nlohmann::json> share_records(int64_t step) const;
  // An all-gather of `n` int64 per rank over the group (a copy when alone).
  std::vector<int64_t> gather(const std::vector<int64_t>& mine) const;
  // The world id the ranks that know one name (hashed; 0: none does).
  uint64_t agree_on_world(const std::string& world) const;

  static constexpr size_t kCols = 1 + ckpt::kMaxMemSlots;  // per (new rank, old rank): file, steps
  int old_world_ = 0;
  comm::ProcessGroup* group_ = nullptr;
  int rank_ = 0, world_ = 1;
  std::vector<std::unique_ptr<ckpt::MemSegment>> segments_;  // per old rank; null: not on this host
  // Per (new rank, old rank): the file's identity (0: none), then each slot's usable step or -1.
  std::vector<int64_t> table_;
  std::function<void(const std::string&)> log_;
  std::function<bool(int)> needed_;
  bool needed(int q) const { return !needed_ || needed_(q); }
  uint64_t received_ = 0;
};

// After a re-formed world read the old world's copies (live recovery): its ranks need not sit
// where the old ranks of their names did, and a segment of the old world left on a host where
// no rank of this world keeps that name (its own, or the replica it receives from
// `replica_from`, -1: none) would later read as a copy of this world's rank of that name, of
// the same step. The lowest rank on each /dev/shm removes such segments. Collective over `group`.
void drop_segments_no_rank_keeps(const std::string& run_dir, int replica_from, comm::ProcessGroup& group);

}  // namespace strata::recovery
