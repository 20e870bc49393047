// Hierarchical reduce-scatter over H hosts of R ranks; world rank w = (host h, local l)
// receives block w (counts[w] elements) of the sum over all ranks.
//   1. permute the input into (local l, host h) order in a scratch buffer, so that the H
//      blocks destined to local index l are contiguous;
//   2. host reduce-scatter (shm): local rank l gets its H blocks reduced over its host;
//   3. across reduce-scatter (mpi point-to-point, a ring: ring_allreduce.cc): among the
//      ranks of local index l, host h gets its block reduced over the hosts.
// Cost ≈ n·β_mem (the permutation) + (R-1)/R·n·β_s + (H-1)/H·(n/R)·β_n per rank: the
// network carries 1/R of what a flat reduce-scatter sends across hosts.
// avg: sums on both levels, one division by the world size at the end.
#include <cstring>
#include <vector>

#include "comm/hier/hier_transport.h"
#include "comm/reduce_kernels.h"

namespace strata::comm::detail {

void reduce_scatter_hierarchical(HierGroups& g, const OpDesc& op) {
  const int H = int(g.rank_at.size()), R = g.host->size(), me_l = g.host->rank(), me_h = g.across->rank();
  const size_t es = dtype_size(op.dtype);
  std::vector<size_t> world_off(op.counts.size() + 1, 0);  // block w of the input
  for (size_t w = 0; w < op.counts.size(); ++w) world_off[w + 1] = world_off[w] + op.counts[w];
  std::vector<size_t> per_local(size_t(R), 0), per_host(static_cast<size_t>(H));  // host / across counts
  std::vector<char> scratch(world_off.back() * es);                  // [(l, h) blocks]
  const char* in = static_cast<const char*>(op.send);
  size_t at = 0, mine_at = 0;
  for (int l = 0; l < R; ++l) {
    if (l == me_l) mine_at = at;
    for (int h = 0; h < H; ++h) {
      size_t w = size_t(g.rank_at[size_t(h)][size_t(l)]);
      std::memcpy(scratch.data() + at * es, in + world_off[w] * es, op.counts[w] * es);
      at += op.counts[w];
      per_local[size_t(l)] += op.counts[w];
      if (l == me_l) per_host[size_t(h)] = op.counts[w];
    }
  }
  const ReduceOp level_op = op.redop == ReduceOp::avg ? ReduceOp::sum : op.redop;
  char* mine = scratch.data() + mine_at * es;  // [per_local[me_l]]: this local index's H blocks
  g.host->reduce_scatter_v(scratch.data(), mine, per_local, op.dtype, level_op);
  std::vector<size_t> host_off(size_t(H) + 1, 0);  // blocks of `mine`, by host
  for (int h = 0; h < H; ++h) host_off[size_t(h) + 1] = host_off[size_t(h)] + per_host[size_t(h)];
  ring_reduce_scatter(*g.across, mine, host_off, op.dtype, level_op);
  std::memcpy(op.recv, mine + host_off[size_t(me_h)] * es, per_host[size_t(me_h)] * es);
  if (op.redop == ReduceOp::avg) divide_in_place(op.recv, per_host[size_t(me_h)], op.dtype, g.world_size);
}

}  // namespace strata::comm::detail
