// Point-to-point of the tcp backend. Each message on a pair's p2p connection is a frame:
// i32 tag, u32 reserved, u64 payload bytes, payload. The runtime progresses one send and one
// recv per peer at a time (in submission order), so frames leave in send order. A recv takes
// the first message of its tag: messages of another tag that arrive first are buffered for
// the peer ("unexpected"), and so is whatever p2p_wait reads while no recv claims it.
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <deque>
#include <iterator>
#include <utility>
#include <vector>

#include "comm/tcp/tcp_transport.h"
#include "core/error.h"

namespace strata::comm::tcp {

using detail::OpDesc;
using detail::P2PState;

namespace {
// P2PState::backend of a recv completed by the reader on its behalf.
char kDelivered;
}  // namespace

void TcpTransport::init_p2p() {
  for (int p = 0; p < size_; ++p) p2p_.push_back(std::make_unique<P2PPeer>());
}

bool TcpTransport::p2p_progress(OpDesc& op, P2PState& st) {
  throw_if_failed(op, -1);
  STRATA_CHECK(op.peer >= 0 && op.peer < size_, op_label(op), ": bad peer ", op.peer);
  if (op.peer == rank_ && op.op == OpType::send) {  // to itself: straight into its own buffer
    auto* data = static_cast<const char*>(op.send);
    p2p_[size_t(rank_)]->unexpected.emplace_back(op.tag, std::string(data, op.count * dtype_size(op.dtype)));
    st.done_bytes = op.count * dtype_size(op.dtype);
    return true;
  }
  return op.op == OpType::send ? p2p_send(op, st) : p2p_recv(op, st);
}

bool TcpTransport::p2p_send(OpDesc& op, P2PState& st) {
  P2PPeer& pp = *p2p_[size_t(op.peer)];
  const size_t bytes = op.count * dtype_size(op.dtype);
  if (!st.started) {
    if (pp.sender) return false;  // another send to this peer is on the wire
    pp.sender = &st;
    st.started = true;
    int32_t tag = op.tag;
    uint64_t n = bytes;
    std::memset(pp.send_hdr, 0, sizeof pp.send_hdr);
    std::memcpy(pp.send_hdr, &tag, 4);
    std::memcpy(pp.send_hdr + 8, &n, 8);
    pp.send_off = 0;
  }
  int fd = links_[size_t(op.peer)].p2p.get();
  const size_t total = kP2PHeader + bytes;
  pp.send_blocked = false;
  while (pp.send_off < total) {
    const char* src = pp.send_off < kP2PHeader ? pp.send_hdr + pp.send_off
                                                 : static_cast<const char*>(op.send) + (pp.send_off - kP2PHeader);
    size_t n = pp.send_off < kP2PHeader ? kP2PHeader - pp.send_off : total - pp.send_off;
    ssize_t k = ::send(fd, src, n, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (k > 0) {
      pp.send_off += size_t(k);
      continue;
    }
    if (k < 0 && errno == EINTR) continue;
    if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      pp.send_blocked = true;
      break;
    }
    peer_lost(op, op.peer, "sending to");
  }
  st.done_bytes = pp.send_off > kP2PHeader ? pp.send_off - kP2PHeader : 0;
  if (pp.send_off < total) return false;
  pp.sender = nullptr;
  return true;
}

bool TcpTransport::p2p_recv(OpDesc& op, P2PState& st) {
  P2PPeer& pp = *p2p_[size_t(op.peer)];
  const size_t bytes = op.count * dtype_size(op.dtype);
  if (st.backend == &kDelivered) return true;
  st.started = true;
  if (pp.dest_owner != &st) {
    // The last buffered message may still be arriving (p2p_wait started reading it).
    auto end = pp.in_msg && !pp.dest_owner ? std::prev(pp.unexpected.end()) : pp.unexpected.end();
    for (auto it = pp.unexpected.begin(); it != end; ++it) {
      if (it->first != op.tag) continue;
      STRATA_CHECK(it->second.size() == bytes, op_label(op), " from rank ", op.peer, " tag ", op.tag,
                   ": expected ", bytes, " bytes, got ", it->second.size());
      if (bytes) std::memcpy(op.recv, it->second.data(), bytes);
      pp.unexpected.erase(it);
      st.done_bytes = bytes;
      return true;
    }
  }
  return op.peer != rank_ && p2p_read(op.peer, &op, &st);
}

// Reads what the peer's p2p connection has; a frame of `op`'s tag goes straight into its
// buffer. Returns true when `st`'s message completed.
bool TcpTransport::p2p_read(int peer, OpDesc* op, P2PState* st) {
  P2PPeer& pp = *p2p_[size_t(peer)];
  int fd = links_[size_t(peer)].p2p.get();
  auto lost = [&] {
    pp.closed = true;
    if (op) peer_lost(*op, peer, "receiving from");
  };
  for (;;) {
    if (pp.closed) {
      lost();
      return false;
    }
    if (!pp.in_msg) {
      ssize_t k = ::recv(fd, pp.hdr + pp.hdr_got, kP2PHeader - pp.hdr_got, MSG_DONTWAIT);
      if (k < 0 && errno == EINTR) continue;
      if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return false;
      if (k <= 0) {
        lost();
        return false;
      }
      pp.hdr_got += size_t(k);
      if (pp.hdr_got < kP2PHeader) continue;
      pp.hdr_got = 0;
      int32_t tag;
      std::memcpy(&tag, pp.hdr, 4);
      std::memcpy(&pp.len, pp.hdr + 8, 8);
      pp.in_msg = true;
      pp.got = 0;
      if (op && tag == op->tag) {
        size_t bytes = op->count * dtype_size(op->dtype);
        STRATA_CHECK(pp.len == bytes, op_label(*op), " from rank ", peer, " tag ", op->tag,
                     ": expected ", bytes, " bytes, got ", pp.len);
        pp.dest = static_cast<char*>(op->recv);
        pp.dest_owner = st;
      } else {
        pp.unexpected.emplace_back(tag, std::string(pp.len, '\0'));
        pp.dest = pp.unexpected.back().second.data();
        pp.dest_owner = nullptr;
      }
    }
    size_t got = pp.got;
    bool open = recv_some(fd, pp.dest, pp.len, got);
    pp.got = got;
    if (pp.dest_owner) pp.dest_owner->done_bytes = pp.got;
    if (!open) lost();
    if (pp.got < pp.len) return false;
    pp.in_msg = false;
    P2PState* owner = std::exchange(pp.dest_owner, nullptr);
    if (owner) {
      owner->done_bytes = pp.len;
      if (owner == st) return true;
      owner->backend = &kDelivered;
    }
    if (op) {  // the claimer's message may have been buffered behind
      for (auto& m : pp.unexpected)
        if (m.first == op->tag) return false;  // p2p_recv takes it on its next call
    }
  }
}

void TcpTransport::p2p_wait(int64_t max_ns) {
  std::vector<pollfd> pfds;
  std::vector<int> peer_of;
  for (int p = 0; p < size_; ++p) {
    if (p == rank_ || p2p_[size_t(p)]->closed) continue;
    short ev = short(POLLIN | (p2p_[size_t(p)]->send_blocked ? POLLOUT : 0));
    pfds.push_back({links_[size_t(p)].p2p.get(), ev, 0});
    peer_of.push_back(p);
  }
  pfds.push_back({p2p_efd_.get(), POLLIN, 0});
  int ms = int(std::max<int64_t>(0, (max_ns + 999'999) / 1'000'000));
  if (::poll(pfds.data(), pfds.size(), ms) <= 0) return;
  if (pfds.back().revents) {
    uint64_t v;
    (void)!::read(p2p_efd_.get(), &v, 8);
  }
  for (size_t i = 0; i + 1 < pfds.size(); ++i)
    if (pfds[i].revents & (POLLIN | POLLHUP | POLLERR)) p2p_read(peer_of[i], nullptr, nullptr);
}

void TcpTransport::p2p_wake() {
  uint64_t one = 1;
  (void)!::write(p2p_efd_.get(), &one, 8);
}

void TcpTransport::p2p_check_peer(const OpDesc& op) {
  throw_if_failed(op, op.peer);
  if (p2p_[size_t(op.peer)]->closed) peer_lost(op, op.peer, op.op == OpType::send ? "sending to" : "receiving from");
}

}  // namespace strata::comm::tcp
