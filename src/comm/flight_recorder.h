// Flight recorder: the last N communication operations of this process (default 2000,
// STRATA_FLIGHT_RECORDER_SIZE), with their state and the training phase they were called
// from, dumped as JSON when something goes wrong so `strata doctor hang` can name the
// culprit. Always on; recording an op takes no allocation (fixed-size ring of entries).
//
// Dump file <dir>/flight-rank<R>.json (dir: STRATA_DUMP_DIR, else the current directory):
//   {"rank": R, "world": W, "pid": P, "host": "...", "reason": "timeout|peer-dead|signal|
//    manual|error|peer-abort", "detail": "one line", "time_ns": T,
//    "phase": {"step": S, "layer": L, "kind": "backward"},
//    "entries": [{"id": N, "group": "world", "group_ranks": [0, 1], "seq": 17, "op": "allreduce",
//                 "dtype": "float", "count": 1024, "counts": [..uneven ops only..],
//                 "peer": -1, "tag": 0, "root": -1, "redop": "sum",
//                 "state": "scheduled|started|completed|failed",
//                 "t_scheduled_ns": .., "t_started_ns": .., "t_completed_ns": ..,
//                 "phase": {"step": 3, "layer": 2, "kind": "backward"}}, ...]}   (oldest first)
// Times are CLOCK_MONOTONIC ns (now_ns), comparable across the ranks of one host; "time_ns"
// is the dump time on the same clock; 0 means the state was not reached. For send/recv,
// "seq" is the group's point-to-point sequence number and "p2p": true; collectives have
// "p2p": false. "count" is the op's element count on this rank (all_reduce: the buffer;
// reduce_scatter: the received block; all_gather: the contributed block; v-ops, and a
// reduce_scatter with uneven counts: the sum, so it is the same on every rank).
// The file is written atomically (temporary file, then rename).
#pragma once
#include <cstdint>
#include <memory>
#include <atomic>
#include <mutex>
#include <thread>
#include <string>
#include <vector>

#include "comm/op_state.h"
#include "comm/types.h"
#include "core/phase.h"
#include "nlohmann/json_fwd.hpp"

namespace strata::comm {

// Identity of a group as the recorder prints it; interned once per group.
struct GroupInfo {
  std::string name;
  std::vector<int> world_ranks;
};

struct FlightEntry {
  uint64_t id = 0;  // recorder-wide, increasing; 0 = empty slot
  const GroupInfo* group = nullptr;
  uint64_t seq = 0;
  bool p2p = false;
  OpType op = OpType::barrier;
  DType dtype = DType::f32;
  ReduceOp redop = ReduceOp::sum;
  int64_t count = 0;
  static constexpr int kMaxCounts = 16;  // per-rank counts kept for groups up to this size
  int32_t num_counts = 0;
  int64_t counts[kMaxCounts] = {};
  int32_t peer = -1;
  int32_t root = -1;
  int32_t tag = 0;
  OpState state = OpState::scheduled;
  int64_t t_scheduled_ns = 0, t_started_ns = 0, t_completed_ns = 0;
  PhaseSnapshot phase;
};

// A lock for a few dozen nanoseconds of copying: cheaper than a mutex when uncontended,
// yields when not.
class SpinLock {
 public:
  void lock() {
    while (flag_.exchange(true, std::memory_order_acquire))
      while (flag_.load(std::memory_order_relaxed)) std::this_thread::yield();
  }
  void unlock() { flag_.store(false, std::memory_order_release); }

 private:
  std::atomic<bool> flag_{false};
};

class FlightRecorder {
 public:
  explicit FlightRecorder(size_t capacity);
  // Records a scheduled op and returns its id (for the state updates).
  uint64_t record(const FlightEntry& e);
  // Stamps the state's time (t_ns, or now when 0); a no-op once the entry was overwritten.
  void update(uint64_t id, OpState state, int64_t t_ns = 0);
  std::vector<FlightEntry> snapshot() const;  // oldest first
  size_t capacity() const { return ring_.size(); }
  // Interns a group identity (kept for the process's lifetime so entries may point at it).
  const GroupInfo* intern(const std::string& name, const std::vector<int>& world_ranks);

  // Identity of this process in dumps.
  void set_identity(int rank, int world);
  int rank() const { return rank_; }

  nlohmann::json to_json(const std::string& reason, const std::string& detail) const;
  // Writes the dump file and returns its path. `dir` empty: STRATA_DUMP_DIR, else ".".
  std::string dump(const std::string& reason, const std::string& detail,
                   const std::string& dir = "") const;
  // Dumps unless a dump for a reason other than "manual" was already written by this
  // process (the first failure is the informative one). Returns the path or "".
  std::string dump_once(const std::string& reason, const std::string& detail);
  bool dumped() const;
  // Allows dump_once to write again (a restarted group in the same process; tests).
  void rearm();

 private:
  mutable SpinLock mu_;
  std::vector<FlightEntry> ring_;
  uint64_t next_id_ = 1;
  int rank_ = 0, world_ = 1;
  std::vector<std::unique_ptr<GroupInfo>> groups_;
  bool dumped_ = false;
  std::mutex dump_mu_;  // serialises dump_once callers until the file is written
};

// The process's recorder (capacity from STRATA_FLIGHT_RECORDER_SIZE).
FlightRecorder& flight_recorder();

}  // namespace strata::comm
