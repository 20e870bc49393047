// Reduce-scatter (equal or uneven block counts).
//
// Terms: P ranks, block p (c_p elements at prefix offset o_p of every input) ends up reduced
// on rank p; b = bytes of the whole input; C = slot bytes, cut into P regions of E = C/P
// bytes; a "round" k covers elements [kE, (k+1)E) of every block.
// Flat (b ≤ small staging): each rank copies the blocks it does not own into its staging
// and publishes; each rank then reduces its block from its input and every peer's staging.
//   Cost: α + b·β + P·c_r·β.
// Pipelined: per round, A) copy the round's part of every foreign block into region p of the
// slot and publish; B) reduce the own part from the input and region r of every peer's slot,
// publish. A slot is reused D rounds later, after every peer published B of that round.
//   Cost: 2α per round, ⌈max c_p / E⌉ rounds; (P-1)/P·b copied in + P·c_r read per rank.
#include <cstring>
#include <vector>

#include "comm/reduce_kernels.h"
#include "comm/shm/shm_transport.h"

namespace strata::comm::shm {

void reduce_scatter_flat(OpCtx& c) {
  const detail::OpDesc& op = c.op;
  size_t es = dtype_size(op.dtype);
  std::vector<size_t> off = offsets_of(op.counts);
  auto send = static_cast<const char*>(op.send);
  char* mine = c.seg.small(c.rank, op.seq);
  for (int p = 0; p < c.size; ++p)
    if (p != c.rank && op.counts[size_t(p)])
      std::memcpy(mine + off[size_t(p)] * es, send + off[size_t(p)] * es, op.counts[size_t(p)] * es);
  c.open(counts_hash(op.counts));
  size_t n = op.counts[size_t(c.rank)], o = off[size_t(c.rank)];
  if (!n) return;
  thread_local std::vector<const void*> in;
  in.resize(size_t(c.size));
  for (int p = 0; p < c.size; ++p)
    in[size_t(p)] = p == c.rank ? send + o * es : c.seg.small(p, op.seq) + o * es;
  reduce_inputs(op.recv, nullptr, in.data(), c.size, n, op.dtype, op.redop, c.size);
}

void reduce_scatter_pipelined(OpCtx& c) {
  const detail::OpDesc& op = c.op;
  const Layout& L = c.seg.layout();
  size_t es = dtype_size(op.dtype);
  size_t unit = std::max<size_t>(1, 64 / es);
  size_t E = std::max<size_t>(1, L.chunk_bytes / (size_t(c.size) * es));
  if (E >= unit) E -= E % unit;
  std::vector<size_t> off = offsets_of(op.counts);
  size_t maxc = 0;
  for (size_t x : op.counts) maxc = std::max(maxc, x);
  auto send = static_cast<const char*>(op.send);
  auto recv = static_cast<char*>(op.recv);
  c.open(counts_hash(op.counts));
  thread_local std::vector<const void*> in;
  in.resize(size_t(c.size));
  std::vector<uint64_t> freed(L.depth, 0);
  size_t rounds = (maxc + E - 1) / E;
  size_t own_n = op.counts[size_t(c.rank)], own_o = off[size_t(c.rank)];
  for (size_t k = 0; k < rounds; ++k) {
    size_t lo = k * E;
    if (k >= L.depth) c.wait_all(freed[k % L.depth]);
    char* mine = c.seg.slot(c.rank, k);
    for (int p = 0; p < c.size; ++p) {  // A
      size_t cp = op.counts[size_t(p)];
      if (p == c.rank || lo >= cp) continue;
      std::memcpy(mine + size_t(p) * E * es, send + (off[size_t(p)] + lo) * es,
                  std::min(E, cp - lo) * es);
    }
    c.arrive();
    uint64_t copied = c.phase();
    if (lo < own_n) {  // B
      size_t m = std::min(E, own_n - lo);
      for (int i = 1; i < c.size; ++i) c.wait_rank((c.rank + i) % c.size, copied);
      for (int p = 0; p < c.size; ++p)
        in[size_t(p)] = p == c.rank ? send + (own_o + lo) * es
                                    : c.seg.slot(p, k) + size_t(c.rank) * E * es;
      reduce_inputs(recv + lo * es, nullptr, in.data(), c.size, m, op.dtype, op.redop, c.size);
    }
    c.arrive();
    freed[k % L.depth] = c.phase();
  }
}

}  // namespace strata::comm::shm
