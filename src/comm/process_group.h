// ProcessGroup: a set of ranks that run collectives and point-to-point operations together.
//
// Ordering contract (every backend): all members call the collectives of one group in the
// same order with matching arguments (same op, dtype, count, root, reduce op). Each
// collective gets the group's next sequence number (0, 1, 2, ...) on every member; a member
// that calls a different op or count at the same sequence number gets an Error naming the
// ranks where the backend can see it (shm always; mpi for counts exchanged by the op).
// Point-to-point messages between two ranks of a group are delivered in send order; a recv
// takes the next message from its peer, and that message must carry the recv's tag and size.
// Send/recv have their own per-group sequence numbers (Work::seq of a p2p op).
//
// Threading contract: a group object may be used from any thread, but its operations are
// ordered by the time they are called; use one thread per group, or order the calls
// yourself. Each operation runs on the group's communication thread (collectives on one,
// point-to-point on another), so async forms overlap with computation; the sync forms are
// the async form plus wait() and run directly on the calling thread when the group is idle.
// Different groups progress independently (concurrent async ops on two groups are fine).
//
// Buffers: counts are in elements of `dtype`. In place: all_reduce with send == recv;
// reduce_scatter with recv == send + this rank's offset; all_gather with send == recv +
// this rank's offset; all_to_all with send == recv; reduce at the root with send == recv.
// Other overlaps between send and recv are rejected.
//
// Failures: every wait inside an operation gives up after the group's timeout (Options,
// STRATA_TIMEOUT) with TimeoutError; a peer process that died is reported within about a
// second as an Error naming the peer rank. After a failure the group is broken: every later
// operation fails at once with the first error. Failed and timed-out operations dump the
// process's flight recorder (comm/flight_recorder.h).
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "comm/types.h"
#include "comm/work.h"
#include "core/dtype.h"

namespace strata::comm {

namespace detail {
class GroupRuntime;  // queues, threads, sequence numbers, flight-recorder hooks
}

class ProcessGroup {
 public:
  explicit ProcessGroup(std::unique_ptr<detail::GroupRuntime> runtime);
  ~ProcessGroup();  // finishes queued operations, then releases the backend's resources
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  int rank() const;
  int size() const;
  const std::string& name() const;          // "world", or the name given to split
  const std::vector<int>& world_ranks() const;  // world rank of each member, by group rank
  Backend backend() const;
  double timeout_s() const;
  uint64_t next_seq() const;  // the sequence number the next collective will get
  const Options& options() const;

  // Marks this group's traffic as background (replicas of in-memory checkpoints): its
  // operations do not count in foreground_ops_in_flight(). Before its first operation.
  void set_background();

  // Collective over this group: members with the same color form a new group, ordered by
  // (key, rank in this group). color < 0: this rank joins no group and gets nullptr.
  // Default name: "<this name>.<color>".
  std::shared_ptr<ProcessGroup> split(int color, int key, std::string name = "");

  // ---- collectives (async forms return at once; sync forms block until done) ----
  // recv[i] = op over ranks of send[i], i < count.
  WorkPtr all_reduce_async(const void* send, void* recv, size_t count, DType dtype, ReduceOp op);
  // send: size()*recv_count elements; this rank receives block rank() reduced over ranks.
  WorkPtr reduce_scatter_async(const void* send, void* recv, size_t recv_count, DType dtype,
                               ReduceOp op);
  // Uneven: send holds sum(recv_counts) elements, block r (recv_counts[r] elements, at the
  // prefix-sum offset) goes to rank r. recv_counts must be identical on every member.
  WorkPtr reduce_scatter_v_async(const void* send, void* recv, const std::vector<size_t>& recv_counts,
                                 DType dtype, ReduceOp op);
  // recv: size()*send_count elements, block r from rank r.
  WorkPtr all_gather_async(const void* send, void* recv, size_t send_count, DType dtype);
  // Uneven: rank r contributes counts[r] elements, placed at the prefix-sum offset of recv.
  WorkPtr all_gather_v_async(const void* send, void* recv, const std::vector<size_t>& counts,
                             DType dtype);
  WorkPtr broadcast_async(void* data, size_t count, DType dtype, int root);
  // recv significant at the root only (may be null elsewhere).
  WorkPtr reduce_async(const void* send, void* recv, size_t count, DType dtype, ReduceOp op,
                       int root);
  // send: size() blocks of count elements, block j goes to rank j; recv block i from rank i.
  WorkPtr all_to_all_async(const void* send, void* recv, size_t count, DType dtype);
  // Uneven: send_counts[j] elements go to rank j (prefix-sum offsets in send), recv_counts[i]
  // come from rank i. send_counts[j] on rank i must equal recv_counts[i] on rank j.
  WorkPtr all_to_all_v_async(const void* send, const std::vector<size_t>& send_counts, void* recv,
                             const std::vector<size_t>& recv_counts, DType dtype);
  WorkPtr barrier_async();

  // ---- point-to-point ----
  WorkPtr send_async(const void* data, size_t count, DType dtype, int peer, int tag = 0);
  WorkPtr recv_async(void* data, size_t count, DType dtype, int peer, int tag = 0);

  // Sync forms.
  void all_reduce(const void* send, void* recv, size_t count, DType dtype, ReduceOp op);
  void reduce_scatter(const void* send, void* recv, size_t recv_count, DType dtype, ReduceOp op);
  void reduce_scatter_v(const void* send, void* recv, const std::vector<size_t>& recv_counts,
                        DType dtype, ReduceOp op);
  void all_gather(const void* send, void* recv, size_t send_count, DType dtype);
  void all_gather_v(const void* send, void* recv, const std::vector<size_t>& counts, DType dtype);
  void broadcast(void* data, size_t count, DType dtype, int root);
  void reduce(const void* send, void* recv, size_t count, DType dtype, ReduceOp op, int root);
  void all_to_all(const void* send, void* recv, size_t count, DType dtype);
  void all_to_all_v(const void* send, const std::vector<size_t>& send_counts, void* recv,
                    const std::vector<size_t>& recv_counts, DType dtype);
  void barrier();
  void send(const void* data, size_t count, DType dtype, int peer, int tag = 0);
  void recv(void* data, size_t count, DType dtype, int peer, int tag = 0);

  // Typed in-place conveniences (float, double, int32_t, int64_t, uint8_t).
  template <typename T>
  void all_reduce(T* data, size_t count, ReduceOp op = ReduceOp::sum) {
    all_reduce(data, data, count, dtype_of<T>(), op);
  }
  template <typename T>
  WorkPtr all_reduce_async(T* data, size_t count, ReduceOp op = ReduceOp::sum) {
    return all_reduce_async(data, data, count, dtype_of<T>(), op);
  }
  template <typename T>
  void broadcast(T* data, size_t count, int root) {
    broadcast(data, count, dtype_of<T>(), root);
  }

  detail::GroupRuntime& runtime() { return *rt_; }

 private:
  std::unique_ptr<detail::GroupRuntime> rt_;
};

using GroupPtr = std::shared_ptr<ProcessGroup>;

// ---- creating groups ----

// The world group of this process, from the environment the launcher (or mpirun, srun,
// torchrun) set: see comm/bootstrap.h. Collective over all ranks of the job.
GroupPtr init_from_env(const Options& options = {});

// One rank of an shm world with explicit coordinates (all ranks use the same job_id and
// size; rank 0 creates the segment, the others attach). Collective over the world.
GroupPtr connect_shm(const std::string& job_id, int rank, int size, const Options& options = {});

// One rank of a tcp world (comm/tcp/): finds its peers through the rendezvous store at
// store_addr ("host:port", comm/tcp/store.h) under keys namespaced by `job`, so a world
// formed again in the same processes under a new job id never sees the old one's keys.
// Collective over the world; a world of 1 needs no store. Throws TimeoutError naming the
// ranks that never published or connected within the timeout.
GroupPtr connect_tcp(const std::string& store_addr, const std::string& job, int rank, int size,
                     const Options& options = {});

// All ranks of a world as threads of this process (gloo's base_test style), shm backend:
// element r is rank r. Each rank's operations must be called from its own thread, e.g.:
//
//   comm::run_threads(4, [](comm::ProcessGroup& pg) { ... pg.all_reduce(...) ... });
std::vector<GroupPtr> make_thread_world(int world_size, const Options& options = {});

// Runs fn(group of rank r) on world_size threads (one per rank), joins them, and rethrows
// the first exception with its rank ("rank 2: ...").
void run_threads(int world_size, const std::function<void(ProcessGroup&)>& fn,
                 const Options& options = {});

// Operations scheduled and not yet finished on this process's foreground groups (every
// group but background ones): 0 when the training's collectives and sends leave the links
// and cores to background traffic, which waits for such a moment (recovery/mem_replicas.h).
int foreground_ops_in_flight();
// Sleeps until foreground_ops_in_flight() is 0, `timeout_s` at most: true when it is.
bool wait_foreground_idle(double timeout_s);

}  // namespace strata::comm
