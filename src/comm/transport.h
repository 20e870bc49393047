// The backend interface (gloo's transport/pair.h idea): a Transport moves bytes for one
// group; GroupRuntime (runtime.h) owns the queues, threads, sequence numbers and recording
// around it. Every backend implements the same set of operations.
//
// Contract: run_collective is called for one op at a time, in sequence order, on any one
// thread; p2p_* are called from one thread at a time (the point-to-point engine), possibly
// concurrently with run_collective. Failures throw Error / TimeoutError naming the group,
// seq, op and peer.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "comm/types.h"
#include "core/dtype.h"
#include "core/error.h"

namespace strata::comm::detail {

// Failure classes the runtime turns into flight-recorder dump reasons (TimeoutError, from
// core/error.h, is "timeout"; any other Error is "error").
class PeerDeadError : public Error {  // a peer process died or exited mid-operation
 public:
  using Error::Error;
};
// A wait that ran out of time on one peer. `peer` is its rank in the group; the runtime,
// which knows the group's world ranks, names the world rank in what it reports, so that a
// launcher reading a rank's timeout line learns which process stopped answering.
class PeerTimeoutError : public TimeoutError {
 public:
  PeerTimeoutError(const std::string& what, int peer) : TimeoutError(what), peer_(peer) {}
  int peer() const { return peer_; }

 private:
  int peer_;
};
class PeerAbortError : public Error {  // a peer reported a failure of this group
 public:
  // reason: the reporting rank's dump reason ("timeout", "peer-dead", "error").
  PeerAbortError(const std::string& what, std::string reason = "error")
      : Error(what), reason_(std::move(reason)) {}
  const std::string& reason() const { return reason_; }

 private:
  std::string reason_;
};

inline const char* abort_reason_name(int code) {
  return code == 1 ? "timeout" : code == 2 ? "peer-dead" : "error";
}
inline int abort_reason_code(const std::string& reason) {
  return reason == "timeout" ? 1 : reason == "peer-dead" ? 2 : 3;
}

// One operation as the backends see it. Counts are elements.
struct OpDesc {
  OpType op = OpType::barrier;
  DType dtype = DType::f32;
  ReduceOp redop = ReduceOp::sum;
  const void* send = nullptr;
  void* recv = nullptr;
  size_t count = 0;           // see ProcessGroup (per-op meaning)
  std::vector<size_t> counts;   // allgatherv, reduce_scatter_v: per rank; alltoallv: send counts
  std::vector<size_t> counts2;  // alltoallv: recv counts
  int root = -1;
  int peer = -1;
  int tag = 0;
  uint64_t seq = 0;
  bool p2p = false;
  int64_t deadline_ns = 0;  // now_ns() value after which waits fail
  // split: inputs and the created transport.
  int color = 0, key = 0;
  std::string split_name;
};

// Progress state of one point-to-point operation.
struct P2PState {
  size_t done_bytes = 0;
  bool started = false;
  bool finished = false;
  void* backend = nullptr;  // backend-specific handle (e.g. MPI_Request storage)
};

class Transport {
 public:
  virtual ~Transport() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual Backend backend() const = 0;

  // Runs one collective to completion on the calling thread.
  virtual void run_collective(OpDesc& op) = 0;

  // Collective over this group (called through run_collective's ordering): returns the
  // transport of the new group this rank joins, or null for color < 0. world_ranks_out gets
  // the members' world ranks in new-group order.
  virtual std::unique_ptr<Transport> split(OpDesc& op, const std::vector<int>& world_ranks,
                                           std::vector<int>& world_ranks_out) = 0;

  // Point-to-point: advance without blocking; returns true when the op finished.
  virtual bool p2p_progress(OpDesc& op, P2PState& st) = 0;
  // Called before each pass over the pending ops; p2p_wait then returns at once if a
  // channel of this rank changed since.
  virtual void p2p_arm() = 0;
  // Sleeps until a point-to-point channel of this rank may have changed, or max_ns passed.
  virtual void p2p_wait(int64_t max_ns) = 0;
  // Wakes a thread sleeping in p2p_wait of this rank (new work arrived).
  virtual void p2p_wake() = 0;
  // Checks the peer of a pending p2p op (dead, exited, aborted); throws with the reason.
  virtual void p2p_check_peer(const OpDesc& op) = 0;

  // Tells peers this group failed (they fail their waits and dump), best effort.
  virtual void raise_abort(int reason_code, const std::string& message) = 0;
  // For the watchdog: "" when healthy, else a one-line problem (dead peer, abort raised by a
  // peer); reason gets "peer-dead" or the aborting rank's reason. Never blocks.
  virtual std::string health(std::string& reason) = 0;
  // Marks this rank as cleanly gone (peers stop treating its exit as a death).
  virtual void detach() = 0;
};

}  // namespace strata::comm::detail
