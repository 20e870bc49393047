// All-reduce, flat (one phase) — for small messages.
//
// Terms: P ranks, n bytes per rank, α = one publish/observe round between ranks (a cache
// line moving between cores, or a futex wake when oversubscribed), β = seconds per byte
// copied through cache.
// Each rank copies its input into its small staging area (one of two, by the parity of the
// sequence number, so no rank overwrites data a slower peer may still read) and publishes
// its op descriptor in the same step; after every rank published, each rank reduces the P
// inputs in rank order straight into its output.
// Cost: α + n·β (copy in) + P·n·β (reduction reads). The latency-optimal path: a single
// synchronisation, no second round trip; the P·n read term makes it lose above ~64 KiB.
// Up to 16 bytes travel inside the descriptor's cache line: one line per rank moves.
#include <cstring>
#include <vector>

#include "comm/reduce_kernels.h"
#include "comm/shm/shm_transport.h"

namespace strata::comm::shm {

// Input of rank p: the descriptor's inline bytes for tiny messages, else its staging.
static const void* input_of(OpCtx& c, int p, bool tiny) {
  return tiny ? static_cast<const void*>(c.desc(p).data) : c.seg.small(p, c.op.seq);
}

void allreduce_flat(OpCtx& c) {
  const detail::OpDesc& op = c.op;
  size_t bytes = op.count * dtype_size(op.dtype);
  bool tiny = bytes <= kInlineBytes;
  if (tiny) {
    c.open(0, true, op.send, bytes);
  } else {
    std::memcpy(c.seg.small(c.rank, op.seq), op.send, bytes);
    c.open();
  }
  if (!bytes) return;
  thread_local std::vector<const void*> in;
  in.resize(size_t(c.size));
  for (int p = 0; p < c.size; ++p) in[size_t(p)] = p == c.rank ? op.send : input_of(c, p, tiny);
  reduce_inputs(op.recv, nullptr, in.data(), c.size, op.count, op.dtype, op.redop, c.size);
}

// Reduce to a root, flat: as above, but only the root reduces.
void reduce_flat(OpCtx& c) {
  const detail::OpDesc& op = c.op;
  size_t bytes = op.count * dtype_size(op.dtype);
  bool tiny = bytes <= kInlineBytes;
  if (tiny) {
    c.open(0, true, op.send, bytes);
  } else {
    if (c.rank != op.root) std::memcpy(c.seg.small(c.rank, op.seq), op.send, bytes);
    c.open();
  }
  if (!bytes || c.rank != op.root) return;
  thread_local std::vector<const void*> in;
  in.resize(size_t(c.size));
  for (int p = 0; p < c.size; ++p) in[size_t(p)] = p == c.rank ? op.send : input_of(c, p, tiny);
  reduce_inputs(op.recv, nullptr, in.data(), c.size, op.count, op.dtype, op.redop, c.size);
}

}  // namespace strata::comm::shm
