// Server-client messages: see wire.h.
#include "fed/wire.h"

#include <chrono>

#include "comm/transport.h"
#include "core/error.h"

namespace strata::fed {

const char* kind_name(Kind k) {
  static const char* names[] = {"?",      "control", "model",  "update",    "gone",   "keys",
                                "roster", "shares",  "shares_fwd", "masked", "survivors", "unmask"};
  const auto i = size_t(k);
  return i < sizeof(names) / sizeof(names[0]) ? names[i] : "?";
}

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void send_message(comm::ProcessGroup& g, int peer, const Header& h, const void* payload,
                  Traffic& t) {
  g.send(&h, sizeof(h), DType::u8, peer, 1);
  if (h.bytes > 0) g.send(payload, h.bytes, DType::u8, peer, 2);
  t.sent += sizeof(h) + h.bytes;
}

static void read_payload(comm::ProcessGroup& g, int peer, Message& m, Traffic& t) {
  STRATA_CHECK(m.h.bytes < (uint64_t(1) << 34), "rank ", peer, " announced a ", m.h.bytes,
               "-byte message: the channel cannot be trusted any more");
  m.payload.resize(m.h.bytes);
  if (m.h.bytes > 0) g.recv(m.payload.data(), m.h.bytes, DType::u8, peer, 2);
  t.received += sizeof(Header) + m.h.bytes;
}

Message recv_message(comm::ProcessGroup& g, int peer, Traffic& t) {
  Message m;
  g.recv(&m.h, sizeof(m.h), DType::u8, peer, 1);
  read_payload(g, peer, m, t);
  return m;
}

void Link::post(Traffic& t) {
  drain(t);
  pending_ = g_->recv_async(&pending_h_, sizeof(pending_h_), DType::u8, peer_, 1);
}

bool Link::wait(int64_t deadline_ns, Message& out, Traffic& t) {
  STRATA_CHECK(pending_, "fed: wait on rank ", peer_, " with no receive posted (internal)");
  try {
    if (deadline_ns > 0) {
      const double left = double(deadline_ns - now_ns()) / 1e9;
      if (left <= 0 && !pending_->test()) return false;
      try {
        if (!pending_->test()) pending_->wait(left);
      } catch (const TimeoutError&) {
        if (!pending_->test()) return false;
      }
    }
    pending_->wait();
  } catch (const comm::detail::PeerDeadError&) {
    pending_.reset();  // the peer is gone: nothing is owed on this channel any more
    throw;
  }
  pending_.reset();
  out.h = pending_h_;
  read_payload(*g_, peer_, out, t);
  return true;
}

int Link::drain(Traffic& t) {
  if (!pending_) return 0;
  Message late;
  wait(0, late, t);
  return 1;
}

}  // namespace strata::fed
