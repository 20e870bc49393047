// Broadcast from a root.
//
// Terms: P ranks, n bytes, C = slot bytes, a "round" = the next C bytes.
// Flat (n fits the small staging): the root copies the data into its staging and publishes;
// the others copy it out.   Cost: α + 2n·β.
// Pipelined: per round, the root copies the round into its slot and publishes; every other
// rank waits for the root only, copies out, publishes. The root reuses a slot D rounds
// later, after every peer published that round.   Cost: 2α per round, 2n·β (copy in, out).
// Direct (threads, or processes with STRATA_SHM_CMA=1 that may read each other's memory):
// the root publishes its buffer's address; every other rank copies straight from it; the
// root waits until all have.
//   Cost: 2α + n·β per receiving rank.
#include <cstring>
#include <vector>

#include "comm/shm/shm_transport.h"

namespace strata::comm::shm {

void broadcast_flat(OpCtx& c) {
  const detail::OpDesc& op = c.op;
  size_t bytes = op.count * dtype_size(op.dtype);
  if (c.rank == op.root && bytes) std::memcpy(c.seg.small(c.rank, op.seq), op.recv, bytes);
  c.open();
  if (c.rank != op.root && bytes) std::memcpy(op.recv, c.seg.small(op.root, op.seq), bytes);
}

void broadcast_large(OpCtx& c) {
  uint64_t addr = reinterpret_cast<uint64_t>(c.op.recv);
  c.open(0, true, &addr, sizeof addr);
  if (c.all_can_read() && c.t.options().algo != ShmAlgo::pipelined) broadcast_direct(c);
  else broadcast_pipelined(c);
}

void broadcast_direct(OpCtx& c) {
  const detail::OpDesc& op = c.op;
  if (c.rank != op.root) {
    uint64_t src;
    std::memcpy(&src, c.desc(op.root).data, sizeof src);
    c.read(op.root, op.recv, src, op.count * dtype_size(op.dtype));
  }
  c.arrive();
  if (c.rank == op.root) c.wait_all(2);  // the buffer stays untouched until all have read it
}

void broadcast_pipelined(OpCtx& c) {
  const detail::OpDesc& op = c.op;
  const Layout& L = c.seg.layout();
  size_t bytes = op.count * dtype_size(op.dtype);
  auto data = static_cast<char*>(op.recv);
  std::vector<uint64_t> freed(L.depth, 0);
  size_t rounds = (bytes + L.chunk_bytes - 1) / L.chunk_bytes;
  for (size_t k = 0; k < rounds; ++k) {
    size_t lo = k * L.chunk_bytes, m = std::min<size_t>(L.chunk_bytes, bytes - lo);
    if (c.rank == op.root) {
      if (k >= L.depth) c.wait_all(freed[k % L.depth]);
      std::memcpy(c.seg.slot(c.rank, k), data + lo, m);
    }
    c.arrive();
    uint64_t copied = c.phase();
    if (c.rank != op.root) {
      c.wait_rank(op.root, copied);
      std::memcpy(data + lo, c.seg.slot(op.root, k), m);
    }
    c.arrive();
    freed[k % L.depth] = c.phase();
  }
}

}  // namespace strata::comm::shm
