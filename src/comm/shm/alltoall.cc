// All-to-all (equal or uneven counts).
//
// Terms: P ranks; rank i sends s_ij elements to rank j (send offsets: prefix sums of its
// send counts) and receives r_ji = s_ji from each j (recv offsets: prefix sums of its recv
// counts); m = the largest block in the group (from the descriptors); the slot is cut into
// P-1 regions of E = C/(P-1) bytes, region d-1 holding the round's part of the block for
// rank (i+d) mod P (no region for the own block, which never leaves the rank); a "round" k
// covers elements [kE, (k+1)E) of every block.
// Flat (equal counts, the whole send buffer fits the small staging): each rank copies its
// foreign blocks into its staging and publishes; each rank then copies block r out of every
// peer's staging.   Cost: α + 2·(P-1)/P·b·β for b bytes per rank.
// Pipelined: per round, A) copy the round's part of every foreign block into its region,
// publish, copy the round's part of the own block straight to the output (while the peers
// fill their slots); B) copy this rank's region of each peer's slot out as soon as that peer
// published A, publish. Uneven counts publish the send counts first so every receiver
// checks them against its recv counts.   Cost: 2α per round, ⌈m/E⌉ rounds, same bytes as flat.
#include <cstring>
#include <vector>

#include "comm/shm/shm_transport.h"
#include "core/error.h"

namespace strata::comm::shm {

static void alltoall_flat(OpCtx& c, const std::vector<size_t>& so, const std::vector<size_t>& ro) {
  const detail::OpDesc& op = c.op;
  size_t es = dtype_size(op.dtype);
  auto send = static_cast<const char*>(op.send);
  auto recv = static_cast<char*>(op.recv);
  char* mine = c.seg.small(c.rank, op.seq);
  for (int j = 0; j < c.size; ++j)
    if (j != c.rank && op.counts[size_t(j)])
      std::memcpy(mine + so[size_t(j)] * es, send + so[size_t(j)] * es, op.counts[size_t(j)] * es);
  c.open();
  size_t own = op.counts[size_t(c.rank)];
  if (own && send != recv) std::memcpy(recv + ro[size_t(c.rank)] * es, send + so[size_t(c.rank)] * es, own * es);
  for (int i = 1; i < c.size; ++i) {
    int p = (c.rank + i) % c.size;  // equal counts: rank p's block for me is at r*count
    size_t n = op.counts2[size_t(p)];
    if (n) std::memcpy(recv + ro[size_t(p)] * es, c.seg.small(p, op.seq) + size_t(c.rank) * n * es, n * es);
  }
}

// Uneven counts: every receiver checks the senders' published counts against its own.
static void check_counts(OpCtx& c) {
  const detail::OpDesc& op = c.op;
  for (int p = 0; p < c.size; ++p) {
    uint64_t sent = c.seg.counts(p, op.seq)[c.rank];
    if (sent != op.counts2[size_t(p)])
      fail("group ", c.t.group(), " alltoallv #", op.seq, ": rank ", p, " sends ", sent,
           " elements to rank ", c.rank, " but rank ", c.rank, " expects ", op.counts2[size_t(p)],
           " from rank ", p);
  }
}

void alltoall_run(OpCtx& c) {
  const detail::OpDesc& op = c.op;
  const Layout& L = c.seg.layout();
  size_t es = dtype_size(op.dtype);
  std::vector<size_t> so = offsets_of(op.counts), ro = offsets_of(op.counts2);
  bool uneven = op.op == OpType::alltoallv;
  if (!uneven && so.back() * es <= L.small_bytes && c.t.options().algo != ShmAlgo::pipelined)
    return alltoall_flat(c, so, ro);
  size_t my_max = 0;
  for (size_t x : op.counts) my_max = std::max(my_max, x);
  if (uneven) {
    uint64_t* pub = c.seg.counts(c.rank, op.seq);
    for (int j = 0; j < c.size; ++j) pub[j] = op.counts[size_t(j)];
  }
  c.open(uneven ? my_max : 0, !uneven);
  size_t maxc = my_max;
  if (uneven) {
    check_counts(c);
    for (int p = 0; p < c.size; ++p) maxc = std::max<size_t>(maxc, c.desc(p).counts_hash);
  }
  auto send = static_cast<const char*>(op.send);
  auto recv = static_cast<char*>(op.recv);
  size_t own = op.counts[size_t(c.rank)];
  bool copy_own = own && send != recv;
  size_t unit = std::max<size_t>(1, 64 / es);
  size_t E = std::max<size_t>(1, L.chunk_bytes / (size_t(c.size - 1) * es));
  if (E >= unit) E -= E % unit;
  // Region of the block from rank `from` to rank `to` in `from`'s slot.
  auto region = [&](int from, int to) { return size_t((to - from - 1 + c.size) % c.size) * E * es; };
  std::vector<uint64_t> freed(L.depth, 0);
  size_t rounds = (maxc + E - 1) / E;
  for (size_t k = 0; k < rounds; ++k) {
    size_t lo = k * E;
    if (k >= L.depth) c.wait_all(freed[k % L.depth]);
    char* mine = c.seg.slot(c.rank, k);
    for (int j = 0; j < c.size; ++j) {  // A
      size_t n = op.counts[size_t(j)];
      if (j == c.rank || lo >= n) continue;
      std::memcpy(mine + region(c.rank, j), send + (so[size_t(j)] + lo) * es, std::min(E, n - lo) * es);
    }
    c.arrive();
    uint64_t copied = c.phase();
    if (copy_own && lo < own)
      std::memcpy(recv + (ro[size_t(c.rank)] + lo) * es, send + (so[size_t(c.rank)] + lo) * es,
                  std::min(E, own - lo) * es);
    for (int i = 1; i < c.size; ++i) {  // B
      int p = (c.rank + i) % c.size;
      size_t n = op.counts2[size_t(p)];
      if (lo >= n) continue;
      c.wait_rank(p, copied);
      std::memcpy(recv + (ro[size_t(p)] + lo) * es, c.seg.slot(p, k) + region(p, c.rank),
                  std::min(E, n - lo) * es);
    }
    c.arrive();
    freed[k % L.depth] = c.phase();
  }
}

}  // namespace strata::comm::shm
