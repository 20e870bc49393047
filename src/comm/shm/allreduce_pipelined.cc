// All-reduce (and reduce to a root), pipelined reduce-scatter + all-gather in shared memory
// — for large messages.
//
// Terms: P ranks, n bytes per rank, C = chunk bytes of one staging slot, D = slots per rank
// (pipeline depth), a "round" = the next C bytes of the buffer, cut into P slices on 64-byte
// boundaries; slice p of every round is "owned" by rank p.
// Per round, each rank:
//   A) copies the P-1 slices it does not own from its input into its slot   (publish)
//   B) reduces its own slice: its input + that slice from every peer's slot, in rank order,
//      into its output, then copies that slice into its slot               (publish)
//   C) copies the P-1 reduced slices owned by the others from their slots   (publish)
// A slot is reused D rounds later, once every peer published C of that round (and so has
// read it). Rounds overlap across ranks: a fast rank can run D rounds ahead.
// Cost: 3α per round, 3⌈n/C⌉α in all, plus per rank (P-1)/P·n (copy in) + n (reduce reads)
// + n/P (copy of the reduced slice) + (P-1)/P·n (copy out) bytes of β. With C ≤ L2 the
// staging traffic stays in cache, so main memory sees about one read of the input and one
// write of the output per rank.
// Reduce to a root: the same, with step C done by the root only.
#include <cstring>
#include <vector>

#include "comm/reduce_kernels.h"
#include "comm/shm/shm_transport.h"

namespace strata::comm::shm {

void allreduce_pipelined(OpCtx& c, bool to_root_only) {
  const detail::OpDesc& op = c.op;
  const Layout& L = c.seg.layout();
  size_t es = dtype_size(op.dtype);
  size_t per_round = L.chunk_bytes / es;
  size_t n = op.count;
  auto send = static_cast<const char*>(op.send);
  auto recv = static_cast<char*>(op.recv);
  bool gathers = !to_root_only || c.rank == op.root;
  c.open();
  thread_local std::vector<const void*> in;
  in.resize(size_t(c.size));
  std::vector<uint64_t> freed(L.depth, 0);  // phase after which peers are done with a slot
  size_t rounds = (n + per_round - 1) / per_round;
  for (size_t k = 0; k < rounds; ++k) {
    size_t off = k * per_round, m = std::min(per_round, n - off);
    if (k >= L.depth) c.wait_all(freed[k % L.depth]);
    char* mine = c.seg.slot(c.rank, k);
    for (int p = 0; p < c.size; ++p) {  // A
      if (p == c.rank) continue;
      Range r = part_range(m, c.size, p, es);
      if (r.size()) std::memcpy(mine + r.begin * es, send + (off + r.begin) * es, r.size() * es);
    }
    c.arrive();
    c.wait_all(c.phase());
    Range own = part_range(m, c.size, c.rank, es);  // B
    if (own.size()) {
      for (int p = 0; p < c.size; ++p)
        in[size_t(p)] = p == c.rank ? send + (off + own.begin) * es
                                    : c.seg.slot(p, k) + own.begin * es;
      // Reduce into the private output, then copy the slice into the shared slot with one
      // memcpy: storing the reduction into the slot block by block (lines the peers read D
      // rounds ago) measured 2x slower in step B than this extra copy (docs/comm.md).
      char* slice = mine + own.begin * es;
      char* out = (recv && gathers) ? recv + (off + own.begin) * es : nullptr;
      reduce_inputs(out ? out : slice, nullptr, in.data(), c.size, own.size(), op.dtype, op.redop,
                    c.size);
      if (out) std::memcpy(slice, out, own.size() * es);
    }
    c.arrive();
    uint64_t reduced = c.phase();
    if (gathers) {  // C
      for (int i = 1; i < c.size; ++i) {
        int p = (c.rank + i) % c.size;
        Range r = part_range(m, c.size, p, es);
        if (!r.size()) continue;
        c.wait_rank(p, reduced);
        std::memcpy(recv + (off + r.begin) * es, c.seg.slot(p, k) + r.begin * es, r.size() * es);
      }
    }
    c.arrive();
    freed[k % L.depth] = c.phase();
  }
}

}  // namespace strata::comm::shm
