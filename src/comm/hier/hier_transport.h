// A world that spans several hosts (mpi backend). init_from_env builds it when the ranks'
// host names (comm/hier/topology.h) show more than one host with the same number R > 1 of
// ranks on each; otherwise the world is the plain MPI one.
//
// Groups it keeps besides its MPI world communicator:
//   host    the R ranks of this host, shm backend (one segment per host, named after the job)
//   across  the ranks with this rank's local index on every host (H ranks), mpi backend
// All-reduce, reduce-scatter and all-gather pick an algorithm by HierAlgo
// (Options::hier_algo, STRATA_HIER) and size (Options::hier_min_bytes,
// STRATA_HIER_MIN_BYTES): hierarchical (*_hierarchical.cc) or flat (the MPI collective on the
// whole world). Every other op, split and point-to-point go to the MPI world as before.
#pragma once
#include <atomic>
#include <memory>
#include <string>

#include "comm/hier/topology.h"
#include "comm/process_group.h"
#include "comm/transport.h"

namespace strata::comm {

// One line about a world's hosts and the algorithms it ran so far (hierarchical/flat), e.g.
// "2 hosts x 2 ranks (h0: 0 1; h1: 2 3); all-reduce 12/3, reduce-scatter 4/0, all-gather 4/0
// (automatic, hierarchical from 65536 bytes)", or "one level (no host hierarchy)".
std::string multihost_summary(ProcessGroup& world);

// Default Options::hier_min_bytes: smaller all-reduces stay flat (bench/multihost).
inline constexpr size_t kHierMinBytes = 64 << 10;

namespace detail {

struct HierGroups {
  GroupPtr host;    // this host's ranks (shm); host rank = local rank
  GroupPtr across;  // one rank per host, same local index (mpi); across rank = host index
  int world_size = 0;
  std::vector<std::vector<int>> rank_at;  // [host][local rank] -> world rank
};

// Hierarchical forms of the world's ops (descriptors as the world's transport gets them),
// one file each: allreduce_hierarchical.cc, reduce_scatter_hierarchical.cc,
// allgather_hierarchical.cc.
void allreduce_hierarchical(HierGroups& g, const OpDesc& op);
void reduce_scatter_hierarchical(HierGroups& g, const OpDesc& op);  // also uneven counts
void allgather_hierarchical(HierGroups& g, const OpDesc& op);       // also uneven counts
// Rings over g's point-to-point messages, in place (ring_allreduce.cc); op is not avg.
// off: H+1 element offsets of the blocks; reduce-scatter leaves block g.rank() reduced,
// all-gather expects it there.
void ring_all_reduce(ProcessGroup& g, void* data, size_t count, DType dtype, ReduceOp op);
void ring_reduce_scatter(ProcessGroup& g, void* data, const std::vector<size_t>& off, DType dtype,
                         ReduceOp op);
void ring_all_gather(ProcessGroup& g, void* data, const std::vector<size_t>& off, DType dtype);

class HierTransport final : public Transport {
 public:
  HierTransport(std::unique_ptr<Transport> mpi_world, HierGroups groups, HostLayout layout,
                const Options& opt);

  int rank() const override { return mpi_->rank(); }
  int size() const override { return mpi_->size(); }
  Backend backend() const override { return Backend::mpi; }
  void run_collective(OpDesc& op) override;
  std::unique_ptr<Transport> split(OpDesc& op, const std::vector<int>& world_ranks,
                                   std::vector<int>& world_ranks_out) override {
    return mpi_->split(op, world_ranks, world_ranks_out);
  }
  bool p2p_progress(OpDesc& op, P2PState& st) override { return mpi_->p2p_progress(op, st); }
  void p2p_arm() override { mpi_->p2p_arm(); }
  void p2p_wait(int64_t max_ns) override { mpi_->p2p_wait(max_ns); }
  void p2p_wake() override { mpi_->p2p_wake(); }
  void p2p_check_peer(const OpDesc& op) override { mpi_->p2p_check_peer(op); }
  void raise_abort(int reason_code, const std::string& message) override;
  std::string health(std::string& reason) override { return mpi_->health(reason); }
  void detach() override { mpi_->detach(); }

  std::string summary() const;

 private:
  bool use_hierarchical(const OpDesc& op) const;

  std::unique_ptr<Transport> mpi_;
  HierGroups groups_;
  HostLayout layout_;
  HierAlgo algo_;
  size_t min_bytes_;
  // [all-reduce, reduce-scatter, all-gather]: ops run hierarchically / flat
  std::atomic<uint64_t> n_hier_[3] = {}, n_flat_[3] = {};
};

// The mpi world of this process: a HierTransport when the hosts allow it, else the plain
// MPI world. Collective over every rank of the job.
std::unique_ptr<Transport> make_mpi_world_for_hosts(const Options& opt);

}  // namespace detail
}  // namespace strata::comm
