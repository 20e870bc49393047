// In-memory checkpoints of a training run (`--mem-ckpt-every K`): after every K steps each
// rank copies what a disk checkpoint holds for it (its state shards: parameters, optimizer
// moments, and the training state: step, data position, tokens seen; the seed is the whole
// random state) into a shared-memory segment on its host that outlives the process
// (ckpt/mem_slots.h), so a failure costs at most K steps instead of a disk interval.
//
//   copy     after the step, the training thread records the training state into the slot
//            not holding the newest complete copy; a writer thread copies the state shards
//            into it while the next step's forward and backward run (they only read the
//            states), then hashes and commits the slot. The next optimizer update first waits
//            for the copy (before_update), the next copy for the commit, so at most one slot
//            is ever in writing and the copy is always of the step it names.
//   restart  a supervised restart (STRATA_RESTART > 0, also --elastic) or --resume auto
//            reads both slots: copies that are incomplete, fail their checksum, or belong to
//            another run, job or layout are passed over with one line each; the run resumes
//            from memory when every rank holds a complete copy of a common step newer than
//            the disk checkpoint (train/checkpointing.h decides, collectively).
//   rollback `--spike-action rollback` restores the newest complete copy.
//   cleanup  the segment is removed when the run ends well, and when an unsupervised
//            process fails; a supervised rank leaves it for its restart, and the launcher
//            (`strata train --nproc/--hosts`, `strata launch`) removes it when the job ends:
//            the job owns it (comm/run_segments.h).
//   replicas `--mem-ckpt-replicas 1` across hosts: after the commit the writer thread sends the
//            copy to the same local rank on the next host and receives the previous host's
//            into a segment named as that rank's own (so a restart on this host finds every old
//            rank's copy under one naming), on a process group of its own; the receiver keeps
//            it only when its checksum equals the sender's. The next copy waits for the
//            exchange. An --elastic restart of another world size reads them through
//            EarlierWorld (train/earlier_world.h).
// Cost: per copy, one memcpy of the shards (16 bytes per parameter held at fp32 with AdamW)
// and one xxh64 pass, both on the writer thread; the step waits only when the copy outlasts
// its forward and backward. Memory: two slots.
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
#include "parallel/engine.h"

namespace strata::train {

// What a copy restores besides the state shards.
struct MemCopy {
  int64_t step = 0;
  data::LoaderState loader;
  int64_t tokens_seen = 0;
};

struct MemCheckpointOptions {
  int64_t every = 0;        // --mem-ckpt-every
  std::string run_dir;      // names the segments (its canonical path)
  int rank = 0;
  int local_world = 1;      // ranks on this host (their segments share /dev/shm)
  std::string job;          // the supervised job (STRATA_RUN_ID); "" when unsupervised
  // Copies of an earlier attempt may be used: a supervised restart, or --resume auto.
  bool reuse = false;
  bool supervised = false;  // failures leave the segment for the restart and the launcher
  std::string layout_text;  // this run's layout, as checkpoints describe it
  diag::FaultSpec fault;    // kill-during-mem-ckpt / corrupt-mem-ckpt (first attempt only)
  std::function<void(const std::string&)> log;
  // --mem-ckpt-replicas 1 (Topology's replica fields): after each commit the writer thread
  // sends the copy to `replica_to` and receives `replica_from`'s into a segment on this host
  // named as that rank's own; null: no replicas.
  comm::ProcessGroup* replica_group = nullptr;
  int replica_to = -1, replica_from = -1;
};

// The run's segments in this host's /dev/shm: one past the highest rank named (a rank's own
// segment or a replica of a peer's); 0 when there is none.
int mem_segment_ranks(const std::string& run_dir);

// A copy's payload as EarlierWorld reads it (train/earlier_world.h): the run key that names
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

  uint64_t bytes() const;  // both slots' payload: the memory cost of this rank
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
  void after_step(int64_t done, const data::LoaderState& loader, int64_t tokens_seen);
  // Copies the states as they stand after `done` steps, due or not (a re-formed world's
  // first copy: the step it loaded).
  void copy(int64_t done, const data::LoaderState& loader, int64_t tokens_seen);
  // Before the optimizer writes the states: waits until the copy in flight has read them.
  void before_update();
  // The newest complete copy restored into the engine (after the copy in flight is
  // committed); step -1 when there is none yet.
  MemCopy restore_newest();
  // Waits for the copy in flight. The run ended well: the segment goes with this object.
  void finish();
  nlohmann::json summary_json() const;

 private:
  struct Layout;
  void wait_commit();
  void writer_loop();
  void copy_shards(unsigned char* payload, int64_t step);
  // On the writer thread, after a commit (or a failed one: bytes 0): this rank's copy in
  // `slot` to replica_to, replica_from's into the replica segment.
  void exchange_replicas(int slot, int64_t step, bool committed);
  int newest_slot() const;  // -1 when no slot holds a committed copy of this run
  MemCopy read_copy(int slot) const;

  MemCheckpointOptions o_;
  parallel::StepEngine& engine_;
  std::vector<parallel::StateShard> shards_;
  uint64_t fingerprint_ = 0;
  uint64_t payload_bytes_ = 0;  // json reserve + shards, per slot
  std::unique_ptr<ckpt::MemSegment> segment_;
  std::unique_ptr<ckpt::MemSegment> earlier_;  // this name's segment of another layout, until clear()
  int64_t slot_step_[ckpt::kMemSlots] = {-1, -1};  // committed (or committing) copy per slot
  bool finished_ = false;
  int passed_over_ = 0;

  // The writer thread: one pending commit at a time.
  std::thread writer_;
  std::mutex mu_;
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

  // --mem-ckpt-replicas: the segment holding replica_from's copies, and the exchange's cost.
  std::unique_ptr<ckpt::MemSegment> replica_;
  uint64_t replica_payload_bytes_ = 0;
  int64_t replicas_kept_ = 0, replicas_bad_ = 0;
  double replica_s_ = 0, max_replica_s_ = 0;
};

}  // namespace strata::train
