// All-gather (equal or uneven counts).
//
// Terms: P ranks, rank p contributes c_p elements, placed at prefix offset o_p of every
// output; C = slot bytes; a "round" k covers bytes [kC, (k+1)C) of every contribution.
// Flat (max c_p fits the small staging): each rank copies its block into its staging and
// publishes; then copies every peer's block out.   Cost: α + c_r·β + Σ_{p≠r} c_p·β.
// Pipelined: per round, A) copy the round's part of the own block into the slot, publish;
// copy it on into the own part of the output from the slot (hot in cache); B) copy each
// peer's part out as soon as that peer published A; publish. A slot is reused D rounds
// later, after every peer published B of that round.
//   Cost: 2α per round, ⌈max c_p / C⌉ rounds; 2·c_r + Σ_{p≠r} c_p bytes of β per rank.
// Direct (threads of one process, or processes with STRATA_SHM_CMA=1 that may read each
// other's memory; cross-memory attach is off by default, see shm_transport.cc): every rank
// publishes the address of its block with its descriptor; each rank copies every peer's
// block straight from the peer's buffer (memcpy, or one kernel copy), then all wait until
// everyone finished reading.   Cost: 2α + Σ_{p≠r} c_p·β — half the copies of the staged path.
// In place (send == output + o_r): the own block is not copied.
#include <cstring>
#include <vector>

#include "comm/shm/shm_transport.h"

namespace strata::comm::shm {

void allgather_flat(OpCtx& c) {
  const detail::OpDesc& op = c.op;
  size_t es = dtype_size(op.dtype);
  std::vector<size_t> off(size_t(c.size) + 1, 0);
  for (int p = 0; p < c.size; ++p) off[size_t(p) + 1] = off[size_t(p)] + op.counts[size_t(p)];
  size_t own = op.counts[size_t(c.rank)];
  auto recv = static_cast<char*>(op.recv);
  if (own) std::memcpy(c.seg.small(c.rank, op.seq), op.send, own * es);
  c.open(counts_hash(op.counts));
  for (int i = 1; i < c.size; ++i) {
    int p = (c.rank + i) % c.size;
    if (op.counts[size_t(p)])
      std::memcpy(recv + off[size_t(p)] * es, c.seg.small(p, op.seq), op.counts[size_t(p)] * es);
  }
  char* dst = recv + off[size_t(c.rank)] * es;
  if (own && dst != op.send) std::memcpy(dst, op.send, own * es);
}

// The staged or the direct path, chosen after the descriptors are exchanged (so every
// rank takes the same one).
void allgather_large(OpCtx& c) {
  uint64_t addr = reinterpret_cast<uint64_t>(c.op.send);
  c.open(counts_hash(c.op.counts), true, &addr, sizeof addr);
  if (c.all_can_read() && c.t.options().algo != ShmAlgo::pipelined) allgather_direct(c);
  else allgather_pipelined(c);
}

void allgather_direct(OpCtx& c) {
  const detail::OpDesc& op = c.op;
  size_t es = dtype_size(op.dtype);
  auto recv = static_cast<char*>(op.recv);
  size_t off = 0, own_off = 0;
  std::vector<size_t> offs(size_t(c.size));
  for (int p = 0; p < c.size; ++p) {
    offs[size_t(p)] = off;
    if (p == c.rank) own_off = off;
    off += op.counts[size_t(p)];
  }
  for (int i = 1; i < c.size; ++i) {
    int p = (c.rank + i) % c.size;
    uint64_t src;
    std::memcpy(&src, c.desc(p).data, sizeof src);
    c.read(p, recv + offs[size_t(p)] * es, src, op.counts[size_t(p)] * es);
  }
  size_t own = op.counts[size_t(c.rank)];
  char* dst = recv + own_off * es;
  if (own && dst != op.send) std::memcpy(dst, op.send, own * es);
  c.arrive();  // done reading the peers' buffers; they may return once all are
  c.wait_all(2);
}

void allgather_pipelined(OpCtx& c) {
  const detail::OpDesc& op = c.op;
  const Layout& L = c.seg.layout();
  size_t es = dtype_size(op.dtype);
  size_t E = L.chunk_bytes / es;
  std::vector<size_t> off(size_t(c.size) + 1, 0);
  size_t maxc = 0;
  for (int p = 0; p < c.size; ++p) {
    off[size_t(p) + 1] = off[size_t(p)] + op.counts[size_t(p)];
    maxc = std::max(maxc, op.counts[size_t(p)]);
  }
  size_t own = op.counts[size_t(c.rank)];
  auto send = static_cast<const char*>(op.send);
  auto recv = static_cast<char*>(op.recv);
  char* own_dst = recv + off[size_t(c.rank)] * es;
  std::vector<uint64_t> freed(L.depth, 0);
  size_t rounds = (maxc + E - 1) / E;
  for (size_t k = 0; k < rounds; ++k) {
    size_t lo = k * E;
    if (k >= L.depth) c.wait_all(freed[k % L.depth]);
    char* mine = c.seg.slot(c.rank, k);
    if (lo < own) std::memcpy(mine, send + lo * es, std::min(E, own - lo) * es);
    c.arrive();
    // The own part of the output comes from the slot just written (cache-hot), not from a
    // second read of the input; the peers meanwhile copy the same slot.
    if (lo < own && own_dst != send)
      std::memcpy(own_dst + lo * es, mine, std::min(E, own - lo) * es);
    uint64_t copied = c.phase();
    for (int i = 1; i < c.size; ++i) {
      int p = (c.rank + i) % c.size;
      size_t cp = op.counts[size_t(p)];
      if (lo >= cp) continue;
      c.wait_rank(p, copied);
      std::memcpy(recv + (off[size_t(p)] + lo) * es, c.seg.slot(p, k), std::min(E, cp - lo) * es);
    }
    c.arrive();
    freed[k % L.depth] = c.phase();
  }
}

}  // namespace strata::comm::shm
