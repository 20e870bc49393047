// In-memory checkpoints of a training run (`--mem-ckpt-every K`): after every K steps each
// rank copies what a disk checkpoint holds for it (its state shards: parameters, optimizer
// moments, and the training state: step, data position, tokens seen; the seed is the whole
// random state) into a shared-memory segment on its host that outlives the process
// (ckpt/mem_slots.h), so a failure costs at most K steps instead of a disk interval.
//
//   slots    3, under every recovery (a supervised restart, --recovery shrink|live) and with
//            replicas. The copy goes into the oldest slot that neither holds the newest committed copy nor is
//            held by the replica thread (mem_slot_to_write). With 3 slots a rank keeps the
//            step before its newest while it writes the next: a rank killed in its commit of
//            step s still holds s-1, and its peers, already writing s+1, hold s-1 and s, at
//            every ZeRO stage (no wait for the commit is needed for that). While the replica
//            thread holds two slots (below) the third is rewritten copy after copy.
//   copy     after the step, the training thread records the training state into that slot;
//            a writer thread copies the state shards into it while the next step's forward
//            and backward run (they only read the states), then hashes and commits the slot.
//            The next optimizer update first waits for the copy to have read the states
//            (before_update), the next copy for the commit, so at most one slot is ever in
//            writing and the copy is always of the step it names.
//   restart  a supervised restart (STRATA_RESTART > 0, also --elastic) or --resume auto
//            reads every slot: copies that are incomplete, fail their checksum, or belong to
//            another run, job or layout are passed over with one line each; the run resumes
//            from memory when every rank holds a complete copy of a common step newer than
//            the disk checkpoint (train/checkpointing.h decides, collectively).
//   rollback `--spike-action rollback` restores the newest complete copy.
//   cleanup  the segment is removed when the run ends well, and when an unsupervised
//            process fails; a supervised rank leaves it for its restart, and the launcher
//            (`strata train --nproc/--hosts`, `strata launch`) removes it when the job ends:
//            the job owns it (launcher/run_segments.h).
//   replicas `--mem-ckpt-replicas 1` across hosts: a replica thread of its own, on a process
//            group of its own, sends copies to the same local rank on the next host while it
//            receives the previous host's into a 2-slot segment named as that rank's own (so a
//            restart on this host finds every old rank's copy under one naming). Rounds: the
//            whole group agrees (one all-reduce) on the newest step any rank holds, M; each
//            rank holds its first copy after M from the writer, pins it, sends it (paced,
//            --mem-ckpt-replica-mbps, MB/s per rank; recovery/mem_replicas.h) and keeps it held
//            once its peer has it complete, until the next one is. Copies committed meanwhile
//            are skipped (a replica is as fresh as the link allows) and the writer never
//            waits: the third slot is always its own. Every rank sends the same steps, and
//            keeps the step its peer holds, so when a host is lost the survivors' own copies
//            and the lost ranks' replicas share a step, which an --elastic restart or a live
//            re-formation reads through EarlierWorld (recovery/earlier_world.h). The receiver
//            keeps a copy only when its checksum equals the sender's. finish() or a stop ends
//            the rounds on every rank at the next agreement (a round in flight goes on
//            unpaced; a stop gives up after kReplicaGraceS on a peer that does not answer).
// Cost: per copy, one memcpy of the shards (16 bytes per parameter held at fp32 with AdamW)
// and one xxh64 pass, both on the writer thread; the step waits only when the copy outlasts
// its forward and backward. Memory: 2 or 3 slots, and 2 replica slots with replicas.
#pragma once
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "ckpt/mem_slots.h"
#include "comm/process_group.h"
#include "data/dataset.h"
#include "diag/fault_inject.h"
#include "nlohmann/json.hpp"
#include "core/timer.h"
#include "parallel/engine.h"
#include "recovery/mem_replicas.h"

namespace strata::recovery {

// What a copy restores besides the state shards.
struct MemCopy {
  int64_t step = 0;
  data::LoaderState loader;
  int64_t tokens_seen = 0;
  nlohmann::json extra = nlohmann::json::object();  // the run's other state (the trainer's)
};

struct MemCheckpointOptions {
  int64_t every = 0;        // --mem-ckpt-every
  std::string run_dir;      // names the segments (its canonical path)
  int rank = 0;
  int local_world = 1;      // ranks on this host (their segments share /dev/shm)
  std::string job;          // the supervised job (STRATA_RUN_ID); "" when unsupervised
  // The world that writes the copies (its STRATA_JOB_ID, new with each live re-formation): in
  // each copy's state record, so a later world reads only the copies of the world that failed
  // (EarlierWorld), never a copy an earlier world left on a host of the same name and step.
  std::string world;
  // Copies of an earlier attempt may be used: a supervised restart, or --resume auto.
  bool reuse = false;
  bool supervised = false;  // failures leave the segment for the restart and the launcher
  std::string layout_text;  // this run's layout, as checkpoints describe it
  diag::FaultSpec fault;    // kill-during-mem-ckpt/-commit, corrupt-mem-ckpt (first attempt only)
  std::function<void(const std::string&)> log;
  // --mem-ckpt-replicas 1 (Topology's replica fields): the replica thread sends the newest
  // copy to `replica_to` and receives `replica_from`'s into a segment on this host named as
  // that rank's own; null: no replicas. replica_mbps: --mem-ckpt-replica-mbps (0: unpaced).
  comm::ProcessGroup* replica_group = nullptr;
  int replica_to = -1, replica_from = -1;
  double replica_mbps = 0;
  // Bytes before the shards for the state record (at least 16 KiB): room for the run's own
  // state (`extra`, such as the MoE blocks' balancing bias), sized by the caller.
  uint64_t state_reserve = 16 << 10;
};

// The slot a copy goes into: never one `held` (bit s: slot s) by the replica thread; the
// oldest (an empty one first) that does not hold the newest committed step (`steps`: per
// slot, -1 when empty or in writing), else the newest's own slot (every other slot held);
// -1 when every slot is held.
int mem_slot_to_write(const int64_t* steps, int slots, unsigned held);

// The run's segments in this host's /dev/shm: one past the highest rank named (a rank's own
// segment or a replica of a peer's); 0 when there is none.
int mem_segment_ranks(const std::string& run_dir);

// A copy's payload as EarlierWorld reads it (recovery/earlier_world.h): the run key that names
// the segments, the state record at the start of a slot and the training state it holds, and
// where each state shard's elements lie in the payload.
std::string mem_run_key(const std::string& run_dir);
nlohmann::json mem_state_record(const ckpt::MemSegment& seg, int slot);
MemCopy mem_copy_state(const nlohmann::json& record);
struct MemShardRecord {
  std::string name;
  DType dtype = DType::f32;
  int64_t begin = 0, end = 0;  // the flat range of the state the copy holds
  uint64_t offset = 0;         // of element `begin` in the payload
};
// The record's "shards" (one line when it has none), in payload order.
std::vector<MemShardRecord> mem_shard_records(const nlohmann::json& record, const std::string& where);

class MemCheckpoints {
 public:
  // Sizes the slots for the engine's shards, checks /dev/shm's free space for this host's
  // ranks (one line when it cannot hold them), and maps (reuse) or creates the segment.
  MemCheckpoints(MemCheckpointOptions o, parallel::StepEngine& engine);
  ~MemCheckpoints();
  MemCheckpoints(const MemCheckpoints&) = delete;
  MemCheckpoints& operator=(const MemCheckpoints&) = delete;

  // Replicas of replica_from's copies: the newest kept while the next one arrives.
  static constexpr int kReplicaSlots = 2;
  int slots() const { return slots_; }
  uint64_t bytes() const;  // every slot's payload: the memory cost of this rank
  uint64_t replica_bytes() const;  // both replica slots' payload (0 without replicas)
  const std::string& segment_name() const;
  // Complete copies usable by this run, newest step first; every slot passed over is logged
  // in one line. same_job: only copies of this supervised job (a restart).
  std::vector<int64_t> usable_steps(bool same_job);
  int passed_over() const { return passed_over_; }  // slots the last usable_steps passed over
  // Copies the copy of `step` into the engine's state shards (the caller then calls
  // state_loaded) and clears the other slot, whose copy this run will not continue from.
  MemCopy load(int64_t step);
  // After a resume from disk or a fresh start: no earlier copy stays a candidate.
  void clear();
  // After `done` steps: copies when due. Fault hooks of the first attempt fire here.
  // extra: the run's other state, kept with the copy (MemCopy::extra).
  void after_step(int64_t done, const data::LoaderState& loader, int64_t tokens_seen,
                  const nlohmann::json& extra = nlohmann::json::object());
  // Copies the states as they stand after `done` steps, due or not (a re-formed world's
  // first copy: the step it loaded).
  void copy(int64_t done, const data::LoaderState& loader, int64_t tokens_seen,
            const nlohmann::json& extra = nlohmann::json::object());
  // Before the optimizer writes the states: waits until the copy in flight has read them.
  void before_update();
  // The newest complete copy restored into the engine (after the copy in flight is
  // committed); step -1 when there is none yet.
  MemCopy restore_newest();
  // Waits for the copy in flight and ends the replica rounds (an end mark each way). The run
  // ended well: the segment goes with this object.
  void finish();
  nlohmann::json summary_json() const;

 private:
  struct Layout;
  void wait_commit();
  void writer_loop();
  void copy_shards(unsigned char* payload, int64_t step);
  // The replica thread: rounds of sending an agreed copy and receiving replica_from's, until
  // finish() or a stop ends them on every rank, or one fails.
  void replica_loop();
  void replica_failed(std::unique_lock<std::mutex>& lock, const std::string& error);
  // With mu_ held: the committed slot of the lowest step after `after` (-1: none), and the
  // slots the writer may not write (kept, pinned, awaited), as a mask.
  int first_after(int64_t after) const;
  unsigned held_slots() const;
  // Where replica_from's copy described by `in` is received (its older replica slot).
  unsigned char* replica_slot_for(const ReplicaHeader& in);
  void keep_replica(const ReplicaHeader& in);
  int newest_slot() const;  // -1 when no slot holds a committed copy of this run
  int newest_committed() const;  // the same among committed slots (mu_ held)
  int64_t newest_step() const;   // its step, -1 when none (mu_ held)
  MemCopy read_copy(int slot) const;

  MemCheckpointOptions o_;
  parallel::StepEngine& engine_;
  std::vector<parallel::StateShard> shards_;
  uint64_t fingerprint_ = 0;
  uint64_t payload_bytes_ = 0;  // json reserve + shards, per slot
  uint64_t reserve_ = 0;        // the state record's bytes before the shards
  std::unique_ptr<ckpt::MemSegment> segment_;
  std::unique_ptr<ckpt::MemSegment> earlier_;  // this name's segment of another layout, until clear()
  // Three: a rank killed in its commit leaves a step every rank still holds ("slots" above).
  int slots_ = 3;
  int64_t slot_step_[ckpt::kMaxMemSlots] = {-1, -1, -1};  // committed (or committing) copy per slot
  // Under mu_: the step each slot holds committed (-1: empty or in writing), for the replica
  // thread; the slot it sends from (-1: none), the slot of the step its peer holds complete
  // (kept until the next replica is), and the step after which the next copy is awaited (its
  // first commit after it is held for the next round; -2: none).
  int64_t committed_[ckpt::kMaxMemSlots] = {-1, -1, -1};
  int pinned_ = -1, kept_ = -1;
  int64_t awaited_ = -2;
  bool finished_ = false;
  int passed_over_ = 0;

  // The writer thread: one pending commit at a time.
  std::thread writer_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  int pending_slot_ = -1;
  int64_t pending_step_ = -1;
  unsigned char* pending_payload_ = nullptr;
  bool copied_ = true;  // the pending copy has read the states
  bool stop_ = false;
  std::string commit_error_;

  int64_t copies_ = 0;
  // What the training thread waited (after_step and before_update), and the writer's copy
  // and commit.
  double stall_s_ = 0, copy_s_ = 0, commit_s_ = 0, max_copy_s_ = 0;

  // --mem-ckpt-replicas: the segment holding replica_from's copies, the thread that sends and
  // receives them (finishing_: finish() asked for the end marks; abandoned_: it gave up waiting
  // on a peer while stopping, and its operations may still use the segments), its link and
  // its figures (under mu_ once the thread runs).
  std::unique_ptr<ckpt::MemSegment> replica_;
  uint64_t replica_payload_bytes_ = 0;
  std::unique_ptr<ReplicaLink> link_;
  int replica_writing_ = -1;  // the replica slot being received (replica thread only)
  std::thread replicator_;
  bool finishing_ = false, abandoned_ = false;
  Stopwatch stop_watch_;  // since stop_ (under mu_)
  Stopwatch since_copy_;  // since the last copy (the training thread's)
  static constexpr double kReplicaGraceS = 5;
  std::string replica_error_;
  int64_t replicas_sent_ = 0, replicas_kept_ = 0, replicas_bad_ = 0, replica_ages_ = 0;
  int64_t age_sum_ = 0, age_max_ = 0;
  double replica_s_ = 0, max_replica_s_ = 0, gap_wait_s_ = 0;
  int64_t gap_waits_out_ = 0;
};

}  // namespace strata::recovery
