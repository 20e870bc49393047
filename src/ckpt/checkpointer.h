// Sharded, asynchronous, atomic checkpoints.
//
// Every rank owns one Checkpointer. A save is
//
//   stall (training thread):  wait for the previous save, copy this rank's pieces into a
//                             host buffer, start the writer thread
//   writer thread, every rank: write <tmp>/shard-RRRRR-of-WWWWW.bin.tmp, fsync, rename;
//                             write its index (.json, same steps); barrier #1
//   writer thread, rank 0:    gather the indices into manifest.json (fsync), rename
//                             .tmp-step-X -> step-X, fsync ckpt/, replace `latest` atomically,
//                             apply retention; barrier #2
// so `latest` moves only after every shard is durable, and a crash at any instant leaves the
// previous checkpoint or the new one. A directory named step-* is complete by construction.
//
// Which ranks write what. Every state is a flat buffer in the rank's own index space
// [0, Ψ_local), which its TensorLayout maps onto the global tensors (core/tensor_layout.h).
// A rank writes its write range of each state, cut at the pieces of its layout, keeping only
// primary pieces: one chunk (tensor, box, flat range within the box) per piece it crosses.
// A rank holding a sharded state (ZeRO) writes its shard. A state that every rank holds whole
// (stage 0, or the parameters under stages 1-2) is split as if it were sharded: rank r writes
// [r·S, (r+1)·S), S = ceil(Ψ/N), so all ranks write in parallel and the files look the same
// at every stage. A rank signals "replicated" by passing a held range that is the whole state
// [0, Ψ), or names its write range explicitly (the engines do). At commit, rank 0 checks that
// the chunks of all ranks hold every tensor of every state exactly once.
//
// Threading contract. save_async/wait/the destructor are called from one (training) thread.
// The barrier callback is called from the writer thread, twice per save, on every rank in the
// same order; it must not share a non-thread-safe communicator with the training thread
// (use a separate one, or a barrier of threads/processes as the tests do).
#pragma once
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "ckpt/fsutil.h"
#include "ckpt/manifest.h"
#include "ckpt/shard_file.h"
#include "core/memory.h"

namespace strata::ckpt {

// One flat state as this rank holds it in memory.
struct StateSlice {
  std::string name;       // "params", "exp_avg", "exp_avg_sq", "master"
  DType dtype = DType::f32;
  int64_t numel = 0;      // Ψ_local: elements of the rank's layout
  Range held;             // elements held; may extend into ZeRO padding past Ψ
  const void* data = nullptr;  // element held.begin
  // The part of `held` this rank writes, when the caller decides (e.g. the data-parallel
  // engine's StateShard write range); unset: this rank's shard of a replicated state, else
  // all it holds. Across ranks the write ranges must tile [0, Ψ).
  std::optional<Range> write;
  bool partial = false;   // StateInfo::partial
};

struct SaveRequest {
  int64_t step = 0;
  TrainState train;                  // train.step is set to `step`
  std::vector<TensorInfo> tensors;   // every global tensor of the model (name, shape), in order
  TensorLayout layout;               // this rank's flat space; empty: contiguous_layout(tensors)
  std::vector<StateSlice> states;
};

struct SaveStats {
  int64_t step = -1;
  std::string dir;          // the committed directory
  int64_t bytes = 0;        // this rank's shard file
  int64_t total_bytes = 0;  // every shard (rank 0 only)
  double wait_prev_s = 0;   // training thread waited for the previous save
  double copy_s = 0;        // training thread copied the shard to host memory
  double stall_s = 0;       // wait_prev_s + copy_s: what training paid
  double write_s = 0;       // writer thread: shard and index written and fsynced
  double commit_s = 0;      // writer thread: barriers, manifest, renames, retention
  bool ok = false;
  std::string error;
  nlohmann::json to_json() const;
};

struct CheckpointerOptions {
  std::string run_dir;      // checkpoints go to <run_dir>/ckpt/
  int rank = 0;
  int world = 1;
  std::function<void()> barrier;  // required when world > 1 (see the threading contract)
  int keep_last = 0;        // keep the newest K committed checkpoints; 0 keeps all
  int64_t keep_every = 0;   // also keep every checkpoint whose step is a multiple of this
  int64_t block_bytes = int64_t(4) << 20;  // checksum granularity
  FaultInjection faults;
  std::function<void(const std::string&)> log;  // one line per event; default: stderr
};

class Checkpointer {
 public:
  explicit Checkpointer(CheckpointerOptions opts);
  ~Checkpointer();  // waits for the save in flight; its error is logged, not thrown
  Checkpointer(const Checkpointer&) = delete;
  Checkpointer& operator=(const Checkpointer&) = delete;

  // Sizes the host buffer for saves like `req` now (at startup), so the first save does not
  // pay for allocating and first-touching it inside a training step. Optional.
  void prepare(const SaveRequest& req);
  // Waits for the previous save (its failure is logged and kept in history()), copies this
  // rank's pieces and returns; the writer thread does the rest. Throws for a malformed request.
  void save_async(const SaveRequest& req);
  // Blocks until the save in flight is committed (or failed) and returns its statistics;
  // throws its error. Without a save in flight returns the last statistics.
  SaveStats wait();
  SaveStats save(const SaveRequest& req) {
    save_async(req);
    return wait();
  }
  // Without blocking: when the save in flight has finished, joins its writer and records it
  // in history() (a failure is logged, as save_async does) and returns true, so the caller can
  // report a save as soon as it is done rather than when the next one starts.
  bool poll();
  bool busy() const { return writer_.joinable(); }
  // Finished saves, oldest first.
  const std::vector<SaveStats>& history() const { return history_; }
  // {"saves": n, "failed": n, "stall_s": {mean, max}, "write_s": {...}, "per_save": [...]}
  nlohmann::json summary_json() const;
  const CheckpointerOptions& options() const { return opts_; }

 private:
  void finish_previous(bool rethrow);
  int64_t host_bytes(const SaveRequest& req) const;
  void write_and_commit(const std::string& tmp_dir, int64_t step);
  void commit(const std::string& tmp_dir, int64_t step);
  void log(const std::string& line) const;

  CheckpointerOptions opts_;
  std::string root_;
  Buffer host_;                 // this rank's pieces, 64-byte aligned, reused between saves
  std::vector<PieceSource> pending_pieces_;  // pointing into host_
  std::vector<StateInfo> pending_states_;
  std::vector<TensorInfo> pending_tensors_;
  TrainState pending_train_;
  SaveStats current_;
  std::thread writer_;
  std::atomic<bool> writer_done_{false};  // set by the writer thread as its last act
  std::vector<SaveStats> history_;
};

// Retention: of the committed steps, which to delete after committing `latest`. Keeps
// `latest`, the newest keep_last at or below it, every multiple of keep_every, and anything
// newer than `latest` (a save that crashed before moving the pointer). keep_last <= 0 keeps all.
std::vector<int64_t> steps_to_delete(const std::vector<int64_t>& steps, int64_t latest,
                                     int keep_last, int64_t keep_every);

}  // namespace strata::ckpt
