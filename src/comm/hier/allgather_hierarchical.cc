// Hierarchical all-gather over H hosts of R ranks; world rank w = (host h, local l)
// contributes counts[w] elements, every rank receives all blocks in world order.
//   1. across all-gather (mpi): the ranks of local index l gather their H blocks, in
//      (host) order, into this local index's region of a scratch buffer in (l, h) order;
//   2. host all-gather (shm): the R regions are exchanged within the host;
//   3. the scratch buffer is permuted into world order in the output.
// Cost ≈ (H-1)/H·(n/R)·β_n + (R-1)/R·n·β_s + n·β_mem per rank: the network carries 1/R of
// what a flat all-gather sends across hosts.
#include <cstring>
#include <vector>

#include "comm/hier/hier_transport.h"

namespace strata::comm::detail {

void allgather_hierarchical(HierGroups& g, const OpDesc& op) {
  const int H = int(g.rank_at.size()), R = g.host->size(), me_l = g.host->rank();
  const size_t es = dtype_size(op.dtype);
  std::vector<size_t> world_off(op.counts.size() + 1, 0);  // block w of the output
  for (size_t w = 0; w < op.counts.size(); ++w) world_off[w + 1] = world_off[w] + op.counts[w];
  std::vector<size_t> per_local(size_t(R), 0), per_host(static_cast<size_t>(H)), local_at(size_t(R), 0);
  size_t at = 0;
  for (int l = 0; l < R; ++l) {
    local_at[size_t(l)] = at;
    for (int h = 0; h < H; ++h) {
      size_t c = op.counts[size_t(g.rank_at[size_t(h)][size_t(l)])];
      per_local[size_t(l)] += c;
      if (l == me_l) per_host[size_t(h)] = c;
    }
    at += per_local[size_t(l)];
  }
  std::vector<char> scratch(world_off.back() * es);  // [(l, h) blocks]
  char* mine = scratch.data() + local_at[size_t(me_l)] * es;
  g.across->all_gather_v(op.send, mine, per_host, op.dtype);
  g.host->all_gather_v(mine, scratch.data(), per_local, op.dtype);
  char* out = static_cast<char*>(op.recv);
  at = 0;
  for (int l = 0; l < R; ++l)
    for (int h = 0; h < H; ++h) {
      size_t w = size_t(g.rank_at[size_t(h)][size_t(l)]);
      std::memcpy(out + world_off[w] * es, scratch.data() + at * es, op.counts[w] * es);
      at += op.counts[w];
    }
}

}  // namespace strata::comm::detail
