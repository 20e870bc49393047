// Vocabulary shared by every communication backend: reduction operators, operation kinds,
// backends, and the options a process group is created with.
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"

namespace strata::comm {

// avg = sum / group size, computed in the accumulation type (f64 for f64, f32 for f32 and
// bf16, integer division truncating toward zero for integer types). Integer sums wrap.
enum class ReduceOp : uint8_t { sum, avg, max, min };

enum class OpType : uint8_t {
  allreduce,
  reduce_scatter,  // equal and uneven counts
  allgather,
  allgatherv,
  broadcast,
  reduce,
  alltoall,
  alltoallv,
  barrier,
  send,
  recv,
  split,  // the collective exchange inside ProcessGroup::split
};

enum class Backend : uint8_t { shm, mpi, tcp };

const char* reduce_op_name(ReduceOp op);  // "sum", "avg", "max", "min"
const char* op_name(OpType op);           // "allreduce", "reducescatter", "allgather", ...
const char* backend_name(Backend b);      // "shm", "mpi", "tcp"
ReduceOp parse_reduce_op(std::string_view s);  // throws Error naming the bad value
Backend parse_backend(std::string_view s);     // throws Error naming the bad value

// Algorithm choice for the shm backend; `automatic` picks by message size.
enum class ShmAlgo : uint8_t { automatic, flat, pipelined };

// Algorithm choice for collectives of a world that spans several hosts (comm/hier/):
// `automatic` runs all-reduce hierarchically (shm within each host, MPI between hosts)
// when the world has several hosts with the same number R > 1 of ranks each and the
// message has at least `hier_min_bytes`; else the flat MPI collective.
enum class HierAlgo : uint8_t { automatic, flat, hierarchical };

struct Options {
  Backend backend = Backend::shm;
  // Seconds any blocking step of an operation may wait for peers before the operation fails
  // with TimeoutError. <= 0: the STRATA_TIMEOUT environment variable (default 300).
  double timeout_s = 0;
  // Unique name of the job; segments are named after it. Empty: from the environment
  // (STRATA_JOB_ID, or the launcher's / MPI's / SLURM's / torchrun's job identifiers).
  std::string job_id;

  // shm tuning; 0 keeps the default. Tests shrink these to reach rare paths cheaply.
  size_t small_max_bytes = 0;  // messages up to this size take the one-phase flat path
  size_t chunk_bytes = 0;      // per-rank staging chunk of the pipelined paths
  int pipeline_depth = 0;      // staging slots in flight per rank (>= 2)
  size_t p2p_slot_bytes = 0;   // payload bytes per slot of a point-to-point channel
  int p2p_slots = 0;           // slots per directed channel
  ShmAlgo algo = ShmAlgo::automatic;

  // Several hosts (mpi backend): STRATA_HIER / STRATA_HIER_MIN_BYTES override these.
  HierAlgo hier_algo = HierAlgo::automatic;
  size_t hier_min_bytes = 0;  // 0: the default (comm/hier/hier_transport.h)

  // Ranks of the group whose death is not the group's failure (shm): a point-to-point op
  // with one of them fails alone with PeerDeadError when it dies, and the watchdog does not
  // abort the group for it. A federated server treats a dead client as a dropout
  // (fed/server.h); every other job keeps the default, where any death aborts the group.
  // Groups split from this one do not inherit it (their ranks are numbered anew).
  std::vector<int> may_die;
  bool peer_may_die(int rank) const {
    return std::find(may_die.begin(), may_die.end(), rank) != may_die.end();
  }
};

const char* hier_algo_name(HierAlgo a);      // "automatic", "flat", "hierarchical"
HierAlgo parse_hier_algo(std::string_view s);  // throws Error naming the bad value

// The element type for typed convenience overloads.
template <typename T> constexpr DType dtype_of();
template <> constexpr DType dtype_of<float>() { return DType::f32; }
template <> constexpr DType dtype_of<double>() { return DType::f64; }
template <> constexpr DType dtype_of<int32_t>() { return DType::i32; }
template <> constexpr DType dtype_of<int64_t>() { return DType::i64; }
template <> constexpr DType dtype_of<uint8_t>() { return DType::u8; }

}  // namespace strata::comm
