// Hierarchical all-reduce over H hosts of R ranks (NCCL's and Horovod's two-level scheme):
//   1. host reduce-scatter (shm): rank l of a host gets block l (n/R elements, the first
//      n % R blocks one more) reduced over its host;
//   2. across all-reduce (mpi point-to-point, a ring: ring_allreduce.cc): the H ranks
//      holding block l reduce it over the hosts;
//   3. host all-gather (shm): every rank gets all R blocks.
// Terms: n bytes, P = H*R ranks, β_s shm and β_n network seconds per byte, α latencies.
// Cost ≈ 2(R-1)/R·n·β_s + 2(H-1)/H·(n/R)·β_n + 2α_s + α_n(H): each host link carries n/R
// per rank instead of the flat ring's 2(P-1)/P·n, so the network part shrinks by about R
// when the hosts' uplinks are the bottleneck.
// avg is a sum on every level and one division by P at the end (before the all-gather);
// bf16 is rounded after each level (twice in all), so sums that are not exact in bf16 may
// differ from the flat all-reduce in the last bit.
#include <cstring>

#include "comm/hier/hier_transport.h"
#include "comm/reduce_kernels.h"

namespace strata::comm::detail {

void allreduce_hierarchical(HierGroups& g, const OpDesc& op) {
  ProcessGroup& host = *g.host;
  ProcessGroup& across = *g.across;
  const int R = host.size(), me = host.rank();
  const size_t n = op.count, es = dtype_size(op.dtype);
  std::vector<size_t> counts(static_cast<size_t>(R));
  size_t off = 0;
  for (int r = 0; r < R; ++r) {
    counts[size_t(r)] = n / size_t(R) + (size_t(r) < n % size_t(R) ? 1 : 0);
    if (r < me) off += counts[size_t(r)];
  }
  char* out = static_cast<char*>(op.recv);  // [n]
  if (op.send != op.recv) std::memcpy(out, op.send, n * es);
  char* mine = out + off * es;  // [counts[me]], this rank's block
  const ReduceOp level_op = op.redop == ReduceOp::avg ? ReduceOp::sum : op.redop;
  host.reduce_scatter_v(out, mine, counts, op.dtype, level_op);
  ring_all_reduce(across, mine, counts[size_t(me)], op.dtype, level_op);
  if (op.redop == ReduceOp::avg) divide_in_place(mine, counts[size_t(me)], op.dtype, g.world_size);
  host.all_gather_v(mine, out, counts, op.dtype);
}

}  // namespace strata::comm::detail
