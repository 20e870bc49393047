// Ring collectives over point-to-point messages: the steps between hosts of the
// hierarchical all-reduce and reduce-scatter. Terms: H ranks (one per host), n bytes in H
// blocks (block k: off[k] .. off[k+1] elements).
//   reduce-scatter: H-1 steps; in step s rank i sends block (i-s-1) to rank i+1 and adds
//     block (i-s-2) from rank i-1 into its own copy; rank i ends with block i reduced;
//   all-gather: H-1 steps passing the blocks on around the ring.
// Cost ≈ (H-1)·α + (H-1)/H·n·β each, every link busy in both directions at once. (OpenMPI's
// non-blocking all-reduce of fewer than 4 ranks is libnbc's binomial reduce-then-broadcast,
// which uses the two directions of a link one after the other: twice the time on a shaped
// link; its non-blocking reduce-scatter ran at a third of the link: docs/comm.md.)
#include <algorithm>
#include <vector>

#include "comm/hier/hier_transport.h"
#include "comm/reduce_kernels.h"

namespace strata::comm::detail {

namespace {

struct Ring {
  ProcessGroup& g;
  char* data;
  const std::vector<size_t>& off;
  DType dtype;
  int H = g.size(), me = g.rank();
  size_t es = dtype_size(dtype);
  char* block(int k) const { return data + off[size_t((k % H + H) % H)] * es; }
  size_t len(int k) const {
    size_t i = size_t((k % H + H) % H);
    return off[i + 1] - off[i];
  }
  // Sends block send_k to the next rank while receiving block recv_k of the previous one
  // into `into` (a scratch buffer, or the block itself).
  void exchange(int send_k, int recv_k, void* into, int tag) const {
    WorkPtr ws = g.send_async(block(send_k), len(send_k), dtype, (me + 1) % H, tag);
    WorkPtr wr = g.recv_async(into, len(recv_k), dtype, (me + H - 1) % H, tag);
    wr->wait();
    ws->wait();
  }
};

}  // namespace

void ring_reduce_scatter(ProcessGroup& g, void* data, const std::vector<size_t>& off, DType dtype,
                         ReduceOp op) {
  Ring r{g, static_cast<char*>(data), off, dtype};
  size_t most = 0;
  for (int k = 0; k < r.H; ++k) most = std::max(most, r.len(k));
  std::vector<char> tmp(most * r.es);  // [largest block]
  for (int s = 0; s < r.H - 1; ++s) {
    int recv_k = r.me - s - 2;
    r.exchange(r.me - s - 1, recv_k, tmp.data(), s);
    const void* in[2] = {r.block(recv_k), tmp.data()};
    reduce_inputs(r.block(recv_k), nullptr, in, 2, r.len(recv_k), dtype, op, 1);
  }
}

void ring_all_gather(ProcessGroup& g, void* data, const std::vector<size_t>& off, DType dtype) {
  Ring r{g, static_cast<char*>(data), off, dtype};
  for (int s = 0; s < r.H - 1; ++s) r.exchange(r.me - s, r.me - s - 1, r.block(r.me - s - 1), r.H + s);
}

void ring_all_reduce(ProcessGroup& g, void* data, size_t count, DType dtype, ReduceOp op) {
  const size_t H = size_t(g.size());
  if (H == 1 || count == 0) return;
  std::vector<size_t> off(H + 1, 0);
  for (size_t k = 0; k < H; ++k) off[k + 1] = off[k] + count / H + (k < count % H ? 1 : 0);
  ring_reduce_scatter(g, data, off, dtype, op);
  ring_all_gather(g, data, off, dtype);
}

}  // namespace strata::comm::detail
