// Ring all-reduce over point-to-point messages: the step between hosts of the hierarchical
// all-reduce. Terms: H ranks (one per host), n bytes in H chunks.
//   reduce-scatter: H-1 steps; in step s rank i sends chunk (i-s) to rank i+1 and adds chunk
//     (i-s-1) from rank i-1 into its own copy; rank i ends with chunk (i+1) reduced;
//   all-gather: H-1 steps passing the reduced chunks on around the ring.
// Cost ≈ 2(H-1)·α + 2(H-1)/H·n·β, every link busy in both directions at once. (OpenMPI's
// non-blocking all-reduce of 2 ranks reduces to one rank and broadcasts back, which uses
// each direction of the link one after the other: twice the time on a shaped link.)
#include <vector>

#include "comm/hier/hier_transport.h"
#include "comm/reduce_kernels.h"

namespace strata::comm::detail {

void ring_all_reduce(ProcessGroup& g, void* data, size_t count, DType dtype, ReduceOp op) {
  const int H = g.size(), me = g.rank();
  if (H == 1 || count == 0) return;
  const size_t es = dtype_size(dtype);
  std::vector<size_t> off(size_t(H) + 1, 0);  // chunk k: [off[k], off[k+1]) elements
  for (int k = 0; k < H; ++k) off[size_t(k) + 1] = off[size_t(k)] + count / size_t(H) + (size_t(k) < count % size_t(H));
  auto chunk = [&](int k) { return static_cast<char*>(data) + off[size_t(k)] * es; };
  auto len = [&](int k) { return off[size_t(k) + 1] - off[size_t(k)]; };
  const int next = (me + 1) % H, prev = (me + H - 1) % H;
  std::vector<char> tmp((count / size_t(H) + 1) * es);  // [one chunk]
  for (int s = 0; s < H - 1; ++s) {
    int send_k = (me - s + H) % H, recv_k = (me - s - 1 + 2 * H) % H;
    WorkPtr ws = g.send_async(chunk(send_k), len(send_k), dtype, next, s);
    WorkPtr wr = g.recv_async(tmp.data(), len(recv_k), dtype, prev, s);
    wr->wait();
    const void* in[2] = {chunk(recv_k), tmp.data()};
    reduce_inputs(chunk(recv_k), nullptr, in, 2, len(recv_k), dtype, op, 1);
    ws->wait();
  }
  for (int s = 0; s < H - 1; ++s) {
    int send_k = (me + 1 - s + H) % H, recv_k = (me - s + H) % H;
    WorkPtr ws = g.send_async(chunk(send_k), len(send_k), dtype, next, H + s);
    WorkPtr wr = g.recv_async(chunk(recv_k), len(recv_k), dtype, prev, H + s);
    wr->wait();
    ws->wait();
  }
}

}  // namespace strata::comm::detail
