// Collectives of the tcp backend. Terms: p ranks, n elements, E bytes per element.
//
// Every collective is a set of per-peer transfers run full duplex by exchange(): each rank
// sends to and receives from all its peers at once (poll() over their connections), so no
// pair waits on another pair and a slow link slows only what crosses it.
//
//   all-reduce   reduce-scatter then all-gather, per segment of p chunks (chunk: opt.chunk_bytes,
//                else STRATA_TCP_CHUNK_BYTES, default 256 KiB): rank r receives chunk r of every
//                peer and reduces the p inputs at once, in rank order (reduce_kernels.h), so
//                results are bit-identical to the shm backend's (bf16 summed in f32 and rounded
//                once, avg divided once).
//                Each rank sends and receives 2(p-1)/p·n·E bytes.
//                Up to 16 KiB (opt.small_max_bytes): one round trip instead, each rank gets
//                every peer's whole vector and reduces the p inputs itself, in the same order.
//   reduce-scatter  the first half of that, over the blocks (equal or uneven counts).
//   all-gather(v)   each rank sends its block to every peer: (p-1)·block bytes out and in.
//   broadcast    a chain root → root+1 → ...; each rank forwards bytes as they arrive, so a
//                large message costs about n·E / bandwidth plus p hops of latency.
//   reduce       reduce-scatter, then the root gathers the reduced chunks.
//   all-to-all(v)  pairwise: block j goes to rank j, all at once.
//   barrier      one byte to and from every peer.
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "comm/reduce_kernels.h"
#include "comm/tcp/tcp_transport.h"
#include "core/env.h"
#include "core/error.h"
#include "core/timer.h"

namespace strata::comm::tcp {

using detail::OpDesc;

static const EnvVar kChunk("STRATA_TCP_CHUNK_BYTES", "262144",
                           "tcp backend: bytes per rank and step of all-reduce, reduce-scatter and reduce "
                           "(Options::chunk_bytes wins when set)");

// All-reduces up to this size take the one-round-trip path (Options::small_max_bytes wins).
constexpr size_t kSmallBytes = 16 << 10;

size_t TcpTransport::chunk_elems(DType dtype) const {
  size_t bytes = opt_.chunk_bytes ? opt_.chunk_bytes : size_t(std::max<int64_t>(1, kChunk.get_int()));
  return std::max<size_t>(1, bytes / dtype_size(dtype));
}

// ---------------------------------------------------------------- the exchange engine

void TcpTransport::exchange(std::vector<Xfer>& xs, const OpDesc& op) {
  const int64_t t0 = now_ns();
  std::vector<pollfd> pfds;
  std::vector<int> owner;  // index into xs of each pollfd; -1 abort eventfd, -2 - p ctrl of p
  for (;;) {
    bool all_done = true;
    for (auto& x : xs) {
      int fd = links_[size_t(x.peer)].coll.get();
      size_t can_send = x.send_limit ? std::min(x.slen, *x.send_limit) : x.slen;
      if (!send_some(fd, x.sbuf, can_send, x.sent)) peer_lost(op, x.peer, "sending to");
      if (!recv_some(fd, x.rbuf, x.rlen, x.rcvd)) peer_lost(op, x.peer, "receiving from");
      if (x.sent < x.slen || x.rcvd < x.rlen) all_done = false;
    }
    if (all_done) return;
    throw_if_failed(op, -1);
    int64_t now = now_ns();
    if (now > op.deadline_ns) {
      int late = -1;
      for (auto& x : xs)
        if (x.rcvd < x.rlen || x.sent < x.slen) {
          late = x.peer;
          if (x.rcvd < x.rlen) break;  // a peer we wait data from is the better name
        }
      throw detail::PeerTimeoutError(cat(op_label(op), ": timed out after ", double(now - t0) * 1e-9,
                                         " s waiting for ", peer_name(late), " (tcp backend)"),
                                     late);
    }
    pfds.clear();
    owner.clear();
    for (size_t i = 0; i < xs.size(); ++i) {
      auto& x = xs[i];
      size_t can_send = x.send_limit ? std::min(x.slen, *x.send_limit) : x.slen;
      short ev = short((x.sent < can_send ? POLLOUT : 0) | (x.rcvd < x.rlen ? POLLIN : 0));
      if (!ev) continue;
      pfds.push_back({links_[size_t(x.peer)].coll.get(), ev, 0});
      owner.push_back(int(i));
    }
    pfds.push_back({abort_efd_.get(), POLLIN, 0});
    owner.push_back(-1);
    {
      std::lock_guard lk(ctrl_mu_);
      for (int p = 0; p < size_; ++p)
        if (p != rank_ && peer_state_[size_t(p)] == kAlive) {
          pfds.push_back({links_[size_t(p)].ctrl.get(), POLLIN, 0});
          owner.push_back(-2 - p);
        }
    }
    ::poll(pfds.data(), pfds.size(), poll_ms(op.deadline_ns, 1000));
    for (size_t i = 0; i < pfds.size(); ++i) {
      if (!pfds[i].revents || owner[i] >= 0) continue;
      if (owner[i] == -1) continue;  // the abort flag is checked above
      const Xfer* lost = nullptr;
      {
        std::lock_guard lk(ctrl_mu_);
        read_control_locked();
        // A peer this op needs whose control connection failed (its host vanished: keepalive).
        for (auto& x : xs)
          if ((x.sent < x.slen || x.rcvd < x.rlen) && peer_state_[size_t(x.peer)] == kDead) lost = &x;
      }
      if (lost) peer_lost(op, lost->peer, lost->rcvd < lost->rlen ? "receiving from" : "sending to");
      break;
    }
  }
}

// ---------------------------------------------------------------- reductions

// Rank r reduces block r: receives block r of every peer (block q of its own `send` goes to
// rank q), then reduces the p inputs in rank order into `out`. Blocks are cut into chunks so
// the staging buffer stays (p-1)·chunk.
void TcpTransport::reduce_blocks(const OpDesc& op, const char* send, const std::vector<size_t>& offs,
                                 const std::vector<size_t>& counts, char* out) {
  const size_t es = dtype_size(op.dtype), chunk = chunk_elems(op.dtype);
  size_t longest = *std::max_element(counts.begin(), counts.end());
  tmp_.resize(size_t(size_) * chunk * es);
  std::vector<Xfer> xs;
  std::vector<const void*> in(static_cast<size_t>(size_));
  for (size_t o = 0; o < longest || (o == 0 && longest == 0); o += chunk) {
    xs.clear();
    for (int q = 0; q < size_; ++q) {
      if (q == rank_) continue;
      Xfer x;
      x.peer = q;
      size_t sq = counts[size_t(q)] > o ? std::min(chunk, counts[size_t(q)] - o) : 0;
      size_t rq = counts[size_t(rank_)] > o ? std::min(chunk, counts[size_t(rank_)] - o) : 0;
      x.sbuf = send + (offs[size_t(q)] + o) * es;
      x.slen = sq * es;
      x.rbuf = tmp_.data() + size_t(q) * chunk * es;
      x.rlen = rq * es;
      if (x.slen || x.rlen) xs.push_back(x);
    }
    exchange(xs, op);
    size_t mine = counts[size_t(rank_)] > o ? std::min(chunk, counts[size_t(rank_)] - o) : 0;
    if (!mine) {
      if (longest == 0) break;
      continue;
    }
    for (int q = 0; q < size_; ++q)
      in[size_t(q)] = q == rank_ ? send + (offs[size_t(rank_)] + o) * es : tmp_.data() + size_t(q) * chunk * es;
    reduce_inputs(out + o * es, nullptr, in.data(), size_, mine, op.dtype, op.redop, size_);
  }
}

static std::vector<size_t> prefix_offsets(const std::vector<size_t>& counts) {
  std::vector<size_t> offs(counts.size(), 0);
  for (size_t i = 1; i < counts.size(); ++i) offs[i] = offs[i - 1] + counts[i - 1];
  return offs;
}

// p near-equal parts of n elements.
static std::vector<size_t> even_parts(size_t n, int p) {
  std::vector<size_t> c(size_t(p), n / size_t(p));
  for (size_t i = 0; i < n % size_t(p); ++i) ++c[i];
  return c;
}

// Small all-reduce in one round trip: every rank sends its whole vector to every peer and
// reduces the p vectors itself, in rank order (the same sums as the two-phase path).
void TcpTransport::allreduce_small(const OpDesc& op) {
  const size_t bytes = op.count * dtype_size(op.dtype);
  tmp_.resize(size_t(size_) * bytes);
  std::vector<Xfer> xs;
  std::vector<const void*> in(static_cast<size_t>(size_));
  for (int q = 0; q < size_; ++q) {
    in[size_t(q)] = q == rank_ ? op.send : tmp_.data() + size_t(q) * bytes;
    if (q == rank_) continue;
    Xfer x;
    x.peer = q;
    x.sbuf = static_cast<const char*>(op.send);
    x.slen = bytes;
    x.rbuf = tmp_.data() + size_t(q) * bytes;
    x.rlen = bytes;
    xs.push_back(x);
  }
  exchange(xs, op);
  reduce_inputs(op.recv, nullptr, in.data(), size_, op.count, op.dtype, op.redop, size_);
}

void TcpTransport::allreduce(const OpDesc& op) {
  const size_t es = dtype_size(op.dtype);
  const size_t small = opt_.small_max_bytes ? opt_.small_max_bytes : kSmallBytes;
  if (op.count * es <= small) return allreduce_small(op);
  auto* send = static_cast<const char*>(op.send);
  auto* recv = static_cast<char*>(op.recv);
  const size_t seg = chunk_elems(op.dtype) * size_t(size_);
  std::vector<Xfer> xs;
  for (size_t b = 0; b < op.count; b += seg) {
    size_t len = std::min(seg, op.count - b);
    auto counts = even_parts(len, size_);
    auto offs = prefix_offsets(counts);
    reduce_blocks(op, send + b * es, offs, counts, recv + (b + offs[size_t(rank_)]) * es);
    xs.clear();
    for (int q = 0; q < size_; ++q) {
      if (q == rank_) continue;
      Xfer x;
      x.peer = q;
      x.sbuf = recv + (b + offs[size_t(rank_)]) * es;
      x.slen = counts[size_t(rank_)] * es;
      x.rbuf = recv + (b + offs[size_t(q)]) * es;
      x.rlen = counts[size_t(q)] * es;
      xs.push_back(x);
    }
    exchange(xs, op);
  }
}

void TcpTransport::reduce_scatter(const OpDesc& op) {
  reduce_blocks(op, static_cast<const char*>(op.send), prefix_offsets(op.counts), op.counts,
                static_cast<char*>(op.recv));
}

void TcpTransport::reduce(const OpDesc& op) {
  const size_t es = dtype_size(op.dtype);
  auto counts = even_parts(op.count, size_);
  auto offs = prefix_offsets(counts);
  const bool root = rank_ == op.root;
  std::vector<char> part;
  char* out = root ? static_cast<char*>(op.recv) + offs[size_t(rank_)] * es : nullptr;
  if (!root) {
    part.resize(counts[size_t(rank_)] * es);
    out = part.data();
  }
  reduce_blocks(op, static_cast<const char*>(op.send), offs, counts, out);
  std::vector<Xfer> xs;
  for (int q = 0; q < size_; ++q) {
    if (q == rank_ || (!root && q != op.root)) continue;
    Xfer x;
    x.peer = q;
    if (root) {
      x.rbuf = static_cast<char*>(op.recv) + offs[size_t(q)] * es;
      x.rlen = counts[size_t(q)] * es;
    } else {
      x.sbuf = out;
      x.slen = counts[size_t(rank_)] * es;
    }
    xs.push_back(x);
  }
  exchange(xs, op);
}

// ---------------------------------------------------------------- data movement

void TcpTransport::allgather(const OpDesc& op) {
  const size_t es = dtype_size(op.dtype);
  auto offs = prefix_offsets(op.counts);
  auto* recv = static_cast<char*>(op.recv);
  char* own = recv + offs[size_t(rank_)] * es;
  if (op.send != own && op.counts[size_t(rank_)])
    std::memmove(own, op.send, op.counts[size_t(rank_)] * es);
  std::vector<Xfer> xs;
  for (int q = 0; q < size_; ++q) {
    if (q == rank_) continue;
    Xfer x;
    x.peer = q;
    x.sbuf = own;
    x.slen = op.counts[size_t(rank_)] * es;
    x.rbuf = recv + offs[size_t(q)] * es;
    x.rlen = op.counts[size_t(q)] * es;
    xs.push_back(x);
  }
  exchange(xs, op);
}

void TcpTransport::broadcast(const OpDesc& op) {
  if (size_ == 1) return;
  const size_t bytes = op.count * dtype_size(op.dtype);
  auto* data = static_cast<char*>(op.recv);
  int pos = (rank_ - op.root + size_) % size_;
  int prev = (rank_ - 1 + size_) % size_, next = (rank_ + 1) % size_;
  std::vector<Xfer> xs;
  xs.reserve(2);
  if (pos > 0) {
    Xfer x;
    x.peer = prev;
    x.rbuf = data;
    x.rlen = bytes;
    xs.push_back(x);
  }
  if (pos < size_ - 1) {
    Xfer x;
    x.peer = next;
    x.sbuf = data;
    x.slen = bytes;
    if (pos > 0) x.send_limit = &xs[0].rcvd;  // forward what has arrived
    xs.push_back(x);
  }
  exchange(xs, op);
}

void TcpTransport::alltoall(const OpDesc& op) {
  const size_t es = dtype_size(op.dtype);
  const std::vector<size_t>& sc = op.counts;
  const std::vector<size_t>& rc = op.counts2.empty() ? op.counts : op.counts2;
  auto soffs = prefix_offsets(sc), roffs = prefix_offsets(rc);
  auto* send = static_cast<const char*>(op.send);
  auto* recv = static_cast<char*>(op.recv);
  std::vector<char> copy;
  if (send == recv) {  // in place: blocks arrive where others still have to leave from
    size_t total = soffs.back() + sc.back();
    copy.assign(send, send + total * es);
    send = copy.data();
  }
  if (sc[size_t(rank_)])
    std::memmove(recv + roffs[size_t(rank_)] * es, send + soffs[size_t(rank_)] * es, sc[size_t(rank_)] * es);
  std::vector<Xfer> xs;
  for (int q = 0; q < size_; ++q) {
    if (q == rank_) continue;
    Xfer x;
    x.peer = q;
    x.sbuf = send + soffs[size_t(q)] * es;
    x.slen = sc[size_t(q)] * es;
    x.rbuf = recv + roffs[size_t(q)] * es;
    x.rlen = rc[size_t(q)] * es;
    xs.push_back(x);
  }
  exchange(xs, op);
}

void TcpTransport::barrier(const OpDesc& op) {
  std::vector<char> out(static_cast<size_t>(size_), 'b'), in(static_cast<size_t>(size_));
  std::vector<Xfer> xs;
  for (int q = 0; q < size_; ++q) {
    if (q == rank_) continue;
    Xfer x;
    x.peer = q;
    x.sbuf = &out[size_t(q)];
    x.slen = 1;
    x.rbuf = &in[size_t(q)];
    x.rlen = 1;
    xs.push_back(x);
  }
  exchange(xs, op);
}

void TcpTransport::run_collective(OpDesc& op) {
  throw_if_failed(op, -1);
  if (check_ops_ && size_ > 1) check_op(op);
  switch (op.op) {
    case OpType::allreduce: return allreduce(op);
    case OpType::reduce_scatter: return reduce_scatter(op);
    case OpType::allgather:
    case OpType::allgatherv: return allgather(op);
    case OpType::broadcast: return broadcast(op);
    case OpType::reduce: return reduce(op);
    case OpType::alltoall:
    case OpType::alltoallv: return alltoall(op);
    case OpType::barrier: return barrier(op);
    default: fail(op_label(op), ": not a collective of the tcp backend");
  }
}

}  // namespace strata::comm::tcp
