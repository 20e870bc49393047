// The shm backend: ranks of one host exchange data through a shared segment (segment.h).
//
// Ordering and threading contract: as ProcessGroup. run_collective runs one op at a time;
// the p2p_* functions run on the point-to-point engine's thread concurrently with it (they
// touch only the channels and the doorbell).
//
// Waiting: every wait spins briefly (longer when the group has no more ranks than CPUs),
// then sleeps on a futex in slices of at most 10 ms, checking the op's deadline, the abort
// record and the liveness of the awaited peer (kill(pid, 0) + zombie check) every ~100 ms.
#pragma once
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "comm/shm/segment.h"
#include "comm/transport.h"

namespace strata::comm::shm {

class ShmTransport;

// Phase bookkeeping of one collective. Phase 1 is "open": this rank published its op
// descriptor (and, for one-phase algorithms, its staging data) and every rank did the same;
// descriptors are compared then. Later phases are numbered on by arrive().
class OpCtx {
 public:
  OpCtx(ShmTransport& t, const detail::OpDesc& op);
  ~OpCtx();
  // Publishes the descriptor, arrives at phase 1, waits for everyone, checks descriptors.
  // `extra` joins the comparison (a hash of uneven counts), unless compare_extra is false.
  // `inline_data` (<= kInlineBytes) travels in the descriptor's cache line.
  void open(uint64_t extra = 0, bool compare_extra = true, const void* inline_data = nullptr,
            size_t inline_bytes = 0);
  void arrive();                           // this rank finished its next phase
  uint64_t phase() const { return phase_; }  // phases arrived so far
  void wait_all(uint64_t phase);           // every peer arrived at `phase`
  void wait_rank(int r, uint64_t phase);
  // Reads peer r's descriptor of this op (valid after open).
  const OpDescShm& desc(int r) const;
  // True when every rank can read every peer's memory (direct single-copy algorithms).
  bool all_can_read() const;
  // Copies `bytes` at address `src` of peer's process; throws naming the peer on failure.
  void read(int peer, void* dst, uint64_t src, size_t bytes);

  ShmTransport& t;
  const detail::OpDesc& op;
  Segment& seg;
  int rank, size;

 private:
  uint64_t base_;
  uint64_t phase_ = 0;
};

// Collectives of groups of 2+ ranks run by the one-phase flat algorithm, and by any other
// (pipelined, direct, all-to-all, barrier), in this process since it started: what tests
// read to tell a forced algorithm from the automatic choice.
struct AlgoRuns {
  uint64_t flat = 0, other = 0;
};
AlgoRuns algo_runs();

class ShmTransport final : public detail::Transport {
 public:
  ShmTransport(Segment seg, std::string job, std::string group, int rank, const Options& opt);
  ~ShmTransport() override;

  // Creates (rank 0) or attaches to the segment of a group; the group is usable once
  // wait_attached() returned on every member.
  static std::unique_ptr<ShmTransport> open(const std::string& job, const std::string& group,
                                            const std::string& group_id, int rank, int size,
                                            const Options& opt, int64_t deadline_ns);
  // Waits until every member attached, then (rank 0) unlinks the segment's name.
  void wait_attached(int64_t deadline_ns);

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  Backend backend() const override { return Backend::shm; }
  void run_collective(detail::OpDesc& op) override;
  std::unique_ptr<Transport> split(detail::OpDesc& op, const std::vector<int>& world_ranks,
                                   std::vector<int>& world_ranks_out) override;
  bool p2p_progress(detail::OpDesc& op, detail::P2PState& st) override;
  void p2p_arm() override;
  void p2p_wait(int64_t max_ns) override;
  void p2p_wake() override;
  void p2p_check_peer(const detail::OpDesc& op) override;
  void raise_abort(int reason_code, const std::string& message) override;
  std::string health(std::string& reason) override;
  void detach() override;

  Segment& segment() { return seg_; }
  bool can_read_peers() const { return can_read_peers_; }
  bool read_peer(int peer, void* dst, uint64_t src, size_t bytes);
  const std::string& group() const { return group_; }
  const Options& options() const { return opt_; }

  // Blocks until ctrl(peer).arrive >= target (or fails naming the peer and `op`).
  void wait_counter(int peer, uint64_t target, const detail::OpDesc& op);
  // Phase 1 of `op` on `peer`: spins on the peer's descriptor line (which carries the data
  // of tiny ops), then falls back to wait_counter.
  void wait_published(int peer, uint64_t target, const detail::OpDesc& op);
  // Throws if the group was aborted or `peer` died / left. `waiting` words the message.
  void check_peer(int peer, const detail::OpDesc& op, const char* waiting);
  void check_abort(const detail::OpDesc& op);
  std::string describe_peer(int peer) const;  // "rank 1 is inside allreduce #4", ...
  std::string op_label(const detail::OpDesc& op) const;  // "group world allreduce #5"

 private:
  bool use_flat(const detail::OpDesc& op) const;  // by opt_.algo and the flat staging's size
  void notify_peer_bell(int peer);
  Segment seg_;
  std::string job_, group_;
  int rank_, size_;
  Options opt_;
  template <typename Ready>
  bool spin_until(Ready ready, int64_t t0, int& budget_ns);
  int spin_ns_;        // largest spin budget before sleeping
  int coll_spin_ns_;   // adaptive budgets (collective thread, point-to-point thread)
  int p2p_spin_ns_;
  int min_spin_ns_;     // floor of the adaptive budgets (STRATA_SHM_SPIN_MIN_US)
  int yield_after_ns_;  // spinning with `pause` before yielding (STRATA_SHM_YIELD_AFTER_US)
  bool same_process_;  // every member is a thread of this process (no liveness checks)
  uint32_t bell_armed_ = 0;
  bool can_read_peers_ = false;
};

// Algorithms (one file each; each opens with its terms and cost).
void allreduce_flat(OpCtx& c);
void allreduce_pipelined(OpCtx& c, bool to_root_only);
void reduce_scatter_flat(OpCtx& c);
void reduce_scatter_pipelined(OpCtx& c);
void allgather_flat(OpCtx& c);
void allgather_pipelined(OpCtx& c);
void allgather_direct(OpCtx& c);
void allgather_large(OpCtx& c);  // open, then direct or pipelined
void broadcast_flat(OpCtx& c);
void broadcast_pipelined(OpCtx& c);
void broadcast_direct(OpCtx& c);
void broadcast_large(OpCtx& c);  // open, then direct or pipelined
void reduce_flat(OpCtx& c);
void alltoall_run(OpCtx& c);
void barrier_run(OpCtx& c);

// Element range [begin, end) of part p when n elements are cut into `parts` pieces whose
// boundaries fall on 64-byte multiples (the last pieces may be shorter or empty).
struct Range {
  size_t begin, end;
  size_t size() const { return end - begin; }
};
Range part_range(size_t n, int parts, int p, size_t elem_size);

// The v-ops' helpers. counts_hash: FNV-1a of the per-rank counts, which every rank of the op
// must pass alike (the op's descriptor carries it). offsets_of: their prefix sums, counts.size()
// + 1 of them.
inline uint64_t counts_hash(const std::vector<size_t>& v) {
  uint64_t h = 1469598103934665603ull;
  for (size_t x : v) h = (h ^ uint64_t(x)) * 1099511628211ull;
  return h;
}

inline std::vector<size_t> offsets_of(const std::vector<size_t>& counts) {
  std::vector<size_t> off(counts.size() + 1, 0);
  for (size_t i = 0; i < counts.size(); ++i) off[i + 1] = off[i] + counts[i];
  return off;
}

}  // namespace strata::comm::shm
