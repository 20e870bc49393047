// The tcp backend: forming a group's connections, the control connections (abort, liveness),
// split. Collectives are in tcp_collectives.cc, point-to-point in tcp_p2p.cc.
#include "comm/tcp/tcp_transport.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <numeric>
#include <optional>

#include "comm/tcp/store.h"
#include "core/env.h"
#include "core/error.h"
#include "core/timer.h"

namespace strata::comm::tcp {

using detail::OpDesc;

namespace {

constexpr char kMagic[4] = {'S', 'T', 'C', 'P'};
constexpr uint8_t kVersion = 1;
constexpr int kKinds = 3;  // coll, p2p, ctrl
constexpr char kAck = 'K';

const EnvVar kKeepalive("STRATA_TCP_KEEPALIVE_S", "10",
                        "tcp backend: seconds after which a peer host that vanished without closing its "
                        "connections counts as dead (kernel keepalive on the control connections; 0: off)");

// Handshake: magic, version, kind, rank, job, group (lengths as u32).
std::string handshake(const std::string& job, const std::string& group, int rank, int kind) {
  std::string h(kMagic, 4);
  h += char(kVersion);
  h += char(kind);
  auto u32 = [&](uint32_t v) { h.append(reinterpret_cast<const char*>(&v), 4); };
  u32(uint32_t(rank));
  u32(uint32_t(job.size()));
  u32(uint32_t(group.size()));
  return h + job + group;
}

std::string rank_list(const std::vector<int>& ranks) {
  std::string s;
  for (int r : ranks) s += (s.empty() ? "" : ", ") + std::to_string(r);
  return s;
}

Fd& link_of(PeerLinks& l, int kind) { return kind == 0 ? l.coll : kind == 1 ? l.p2p : l.ctrl; }

// Reads and checks one connection's handshake; returns (rank, kind), or (-1, -1) to reject it.
std::pair<int, int> read_handshake(int fd, const std::string& job, const std::string& group, int rank,
                                   int size, int64_t deadline_ns) {
  char head[18];
  if (recv_all(fd, head, sizeof head, deadline_ns) != 1 || std::memcmp(head, kMagic, 4) != 0 ||
      uint8_t(head[4]) != kVersion)
    return {-1, -1};
  uint32_t from, jl, gl;
  std::memcpy(&from, head + 6, 4);
  std::memcpy(&jl, head + 10, 4);
  std::memcpy(&gl, head + 14, 4);
  int kind = head[5];
  if (jl != job.size() || gl != group.size() || kind < 0 || kind >= kKinds || int(from) <= rank ||
      int(from) >= size)
    return {-1, -1};
  std::string names(jl + gl, '\0');
  if (recv_all(fd, names.data(), names.size(), deadline_ns) != 1 || names != job + group)
    return {-1, -1};
  return {int(from), kind};
}

}  // namespace

std::vector<PeerLinks> form_links(int listener, const std::vector<std::string>& addrs,
                                  const std::string& job, const std::string& group, int rank,
                                  int64_t deadline_ns) {
  const int size = int(addrs.size());
  std::vector<PeerLinks> links(static_cast<size_t>(size));
  auto where = [&] { return cat("tcp backend, job ", job, " group ", group, " rank ", rank); };
  for (int q = 0; q < rank; ++q) {
    auto [host, port] = split_address(addrs[size_t(q)]);
    for (int kind = 0; kind < kKinds; ++kind) {
      std::string err;
      Fd fd = connect_until(host, port, deadline_ns, err);
      if (!fd.valid())
        throw TimeoutError(cat(where(), ": could not connect to rank ", q, " at ", addrs[size_t(q)],
                               " before the timeout (", err, ")"));
      std::string h = handshake(job, group, rank, kind);
      char ack = 0;
      if (send_all(fd.get(), h.data(), h.size(), deadline_ns) != 1 ||
          recv_all(fd.get(), &ack, 1, deadline_ns) != 1 || ack != kAck)
        fail(where(), ": rank ", q, " at ", addrs[size_t(q)],
             " refused the connection (it belongs to another job or group, or exited)");
      link_of(links[size_t(q)], kind) = std::move(fd);
    }
  }
  int expected = (size - 1 - rank) * kKinds, got = 0;
  set_nonblocking(listener, true);
  while (got < expected) {
    pollfd p{listener, POLLIN, 0};
    if (::poll(&p, 1, poll_ms(deadline_ns, 200)) <= 0) {
      if (now_ns() < deadline_ns) continue;
      std::vector<int> missing;
      for (int q = rank + 1; q < size; ++q)
        if (!links[size_t(q)].ctrl.valid()) missing.push_back(q);
      throw TimeoutError(cat(where(), ": rank", missing.size() > 1 ? "s " : " ", rank_list(missing),
                             " never connected before the timeout"));
    }
    Fd fd(::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC));
    if (!fd.valid()) continue;
    set_nonblocking(fd.get(), false);
    // A stray connection gets a few seconds to introduce itself, then is dropped.
    auto [from, kind] = read_handshake(fd.get(), job, group, rank, size,
                                       std::min(deadline_ns, now_ns() + 5'000'000'000));
    if (from < 0 || link_of(links[size_t(from)], kind).valid()) continue;
    char ack = kAck;
    if (send_all(fd.get(), &ack, 1, deadline_ns) != 1) continue;
    link_of(links[size_t(from)], kind) = std::move(fd);
    ++got;
  }
  for (auto& l : links)
    for (int kind = 0; kind < kKinds; ++kind)
      if (link_of(l, kind).valid()) tune_socket(link_of(l, kind).get(), true);
  for (auto& l : links)
    if (l.ctrl.valid()) set_keepalive(l.ctrl.get(), int(kKeepalive.get_int()));
  return links;
}

TcpTransport::TcpTransport(std::vector<PeerLinks> links, std::string job, std::string group, int rank,
                           std::vector<int> world_ranks, std::string ip, const Options& opt)
    : links_(std::move(links)),
      job_(std::move(job)),
      group_(std::move(group)),
      rank_(rank),
      size_(int(links_.size())),
      world_ranks_(std::move(world_ranks)),
      ip_(std::move(ip)),
      opt_(opt) {
  peer_state_.assign(size_t(size_), kAlive);
  ctrl_in_.resize(size_t(size_));
  abort_efd_ = Fd(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  p2p_efd_ = Fd(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  STRATA_CHECK(abort_efd_.valid() && p2p_efd_.valid(), "eventfd() failed: ", std::strerror(errno));
  init_p2p();
  check_ops_ = tcp_check_ops_enabled();
}

TcpTransport::~TcpTransport() = default;

// ---------------------------------------------------------------- control connections

namespace {
// Control frame: u8 type ('B' bye, 'A' abort), u8 reason code, u16 bytes, message.
std::string control_frame(char type, int reason, const std::string& msg) {
  uint16_t n = uint16_t(std::min<size_t>(msg.size(), 4000));
  std::string f(1, type);
  f += char(reason);
  f.append(reinterpret_cast<const char*>(&n), 2);
  return f + msg.substr(0, n);
}
}  // namespace

void TcpTransport::read_control_locked() {
  char buf[4096];
  for (int p = 0; p < size_; ++p) {
    if (p == rank_ || peer_state_[size_t(p)] != kAlive) continue;
    std::string& in = ctrl_in_[size_t(p)];
    for (;;) {
      ssize_t k = ::recv(links_[size_t(p)].ctrl.get(), buf, sizeof buf, MSG_DONTWAIT);
      if (k > 0) {
        in.append(buf, size_t(k));
        continue;
      }
      if (k < 0 && errno == EINTR) continue;
      if (k == 0 || (errno != EAGAIN && errno != EWOULDBLOCK)) peer_state_[size_t(p)] = kDead;
      break;
    }
    while (in.size() >= 4) {
      uint16_t n;
      std::memcpy(&n, in.data() + 2, 2);
      if (in.size() < 4 + size_t(n)) break;
      char type = in[0];
      int reason = in[1];
      std::string msg = in.substr(4, n);
      in.erase(0, 4 + size_t(n));
      if (type == 'B') {
        peer_state_[size_t(p)] = kLeft;
      } else if (type == 'A' && !aborted_.load()) {
        abort_by_ = p;
        abort_msg_ = msg;
        abort_reason_ = detail::abort_reason_name(reason);
        aborted_ = true;
        uint64_t one = 1;
        (void)!::write(abort_efd_.get(), &one, 8);
      }
    }
    // A "bye" read in the same pass as the EOF that follows it wins: the peer left cleanly.
  }
}

std::string TcpTransport::op_label(const OpDesc& op) const {
  return cat("group ", group_, " ", op_name(op.op), " #", op.seq);
}

std::string TcpTransport::peer_name(int peer) const {
  int w = peer >= 0 && size_t(peer) < world_ranks_.size() ? world_ranks_[size_t(peer)] : peer;
  return cat("rank ", peer, " (world rank ", w, ")");
}

void TcpTransport::throw_if_failed(const OpDesc& op, int peer) {
  if (!aborted_.load() && peer < 0) return;
  std::lock_guard lk(ctrl_mu_);
  read_control_locked();
  if (aborted_.load()) {
    if (abort_by_ == rank_)
      throw detail::PeerAbortError(cat(op_label(op), ": group failed earlier: ", abort_msg_), abort_reason_);
    throw detail::PeerAbortError(cat(op_label(op), ": aborted because rank ", abort_by_, " reported: ",
                                     abort_msg_), abort_reason_);
  }
  if (peer >= 0 && peer_state_[size_t(peer)] != kAlive) {
    int state = peer_state_[size_t(peer)];
    throw detail::PeerDeadError(cat(op_label(op), ": peer ", peer_name(peer),
                                    state == kLeft ? " left the group (its process exited)" : " died",
                                    " (tcp connection closed)"));
  }
}

void TcpTransport::peer_lost(const OpDesc& op, int peer, const char* doing) {
  bool left;
  {
    std::lock_guard lk(ctrl_mu_);
    read_control_locked();
    if (peer_state_[size_t(peer)] == kAlive) peer_state_[size_t(peer)] = kDead;
    left = peer_state_[size_t(peer)] == kLeft;
  }
  throw_if_failed(op, -1);  // an abort explains it better
  throw detail::PeerDeadError(cat(op_label(op), ": peer ", peer_name(peer),
                                  left ? " left the group (its process exited)" : " died",
                                  " while this rank was ", doing, " it (tcp connection closed)"));
}

void TcpTransport::raise_abort(int reason_code, const std::string& message) {
  std::lock_guard lk(ctrl_mu_);
  if (aborted_.load()) return;
  abort_by_ = rank_;
  abort_msg_ = message;
  abort_reason_ = detail::abort_reason_name(reason_code);
  aborted_ = true;
  std::string f = control_frame('A', reason_code, message);
  for (int p = 0; p < size_; ++p)
    if (p != rank_ && peer_state_[size_t(p)] == kAlive)
      (void)!::send(links_[size_t(p)].ctrl.get(), f.data(), f.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  uint64_t one = 1;
  (void)!::write(abort_efd_.get(), &one, 8);
  (void)!::write(p2p_efd_.get(), &one, 8);
}

std::string TcpTransport::health(std::string& reason) {
  std::lock_guard lk(ctrl_mu_);
  read_control_locked();
  if (aborted_.load() && abort_by_ != rank_) {
    reason = abort_reason_;
    return cat("group ", group_, ": rank ", abort_by_, " reported: ", abort_msg_);
  }
  for (int p = 0; p < size_; ++p) {
    if (p == rank_ || peer_state_[size_t(p)] != kDead || opt_.peer_may_die(p)) continue;
    reason = "peer-dead";
    return cat("group ", group_, ": ", peer_name(p),
               " died (its tcp connection closed without a goodbye)");
  }
  return "";
}

void TcpTransport::detach() {
  std::lock_guard lk(ctrl_mu_);
  std::string f = control_frame('B', 0, "");
  for (int p = 0; p < size_; ++p)
    if (p != rank_ && peer_state_[size_t(p)] == kAlive)
      send_all(links_[size_t(p)].ctrl.get(), f.data(), f.size(), now_ns() + 1'000'000'000);
}

// ---------------------------------------------------------------- split

namespace {
struct SplitRecord {  // what each rank tells the others through the parent's allgather
  int32_t color, key, port;
  char ip[44];
};
}  // namespace

std::unique_ptr<detail::Transport> TcpTransport::split(OpDesc& op, const std::vector<int>& world_ranks,
                                                       std::vector<int>& world_ranks_out) {
  Fd listener;
  SplitRecord mine{};
  mine.color = op.color;
  mine.key = op.key;
  if (op.color >= 0) {
    listener = listen_on("0.0.0.0", 0);
    mine.port = local_port(listener.get());
    std::strncpy(mine.ip, ip_.c_str(), sizeof mine.ip - 1);
  }
  std::vector<SplitRecord> all(static_cast<size_t>(size_));
  OpDesc ag = op;
  ag.op = OpType::allgather;
  ag.dtype = DType::u8;
  ag.send = &mine;
  ag.recv = all.data();
  ag.count = sizeof mine;
  ag.counts.assign(size_t(size_), sizeof mine);
  allgather(ag);
  if (op.color < 0) return nullptr;
  std::vector<int> members;
  for (int r = 0; r < size_; ++r)
    if (all[size_t(r)].color == op.color) members.push_back(r);
  std::stable_sort(members.begin(), members.end(),
                   [&](int a, int b) { return all[size_t(a)].key < all[size_t(b)].key; });
  std::vector<std::string> addrs;
  int new_rank = -1;
  world_ranks_out.clear();
  for (int r : members) {
    if (r == rank_) new_rank = int(addrs.size());
    addrs.push_back(cat(std::string(all[size_t(r)].ip, strnlen(all[size_t(r)].ip, sizeof mine.ip)), ":",
                        all[size_t(r)].port));
    world_ranks_out.push_back(world_ranks[size_t(r)]);
  }
  // The sequence number keeps two splits with the same name apart.
  std::string group = cat(op.split_name, "@", group_, "#", op.seq);
  auto links = form_links(listener.get(), addrs, job_, group, new_rank, op.deadline_ns);
  Options sub = opt_;
  sub.may_die.clear();
  return std::make_unique<TcpTransport>(std::move(links), job_, op.split_name, new_rank, world_ranks_out,
                                        ip_, sub);
}

// ---------------------------------------------------------------- world

std::unique_ptr<TcpTransport> make_tcp_world(const std::string& store_addr, const std::string& job,
                                             int rank, int size, const Options& opt, int64_t deadline_ns) {
  std::vector<int> ranks(static_cast<size_t>(size));
  std::iota(ranks.begin(), ranks.end(), 0);
  if (size == 1)
    return std::make_unique<TcpTransport>(std::vector<PeerLinks>(1), job, "world", 0, ranks, "127.0.0.1", opt);
  STRATA_CHECK(!store_addr.empty(), "the tcp backend needs a rendezvous store, but STRATA_STORE is unset "
                                    "(start the ranks with `strata launch --backend tcp`)");
  auto left_s = [&] { return std::max(0.0, double(deadline_ns - now_ns()) * 1e-9); };
  StoreClient store(store_addr, left_s());
  Fd listener = listen_on("0.0.0.0", 0);
  std::string ip = store.local_ip();
  std::string prefix = job + "/w/addr/";
  store.set(prefix + std::to_string(rank), cat(ip, ":", local_port(listener.get())));
  std::vector<std::string> addrs(static_cast<size_t>(size));
  for (int q = 0; q < size; ++q) {
    try {
      // In short waits: a launcher that gives this world up (a member died before it formed:
      // live recovery, launcher/live_world.h) says so under <job>/abort.
      for (;;) {
        if (std::optional<std::string> why = store.try_get(job + "/abort"))
          throw detail::PeerDeadError(cat("tcp backend, job ", job, ": the world was given up before it "
                                          "formed: ", *why));
        const double wait_s = std::min(0.2, left_s());
        if (std::optional<std::string> a = store.try_get(prefix + std::to_string(q))) {
          addrs[size_t(q)] = *a;
          break;
        }
        if (wait_s <= 0) throw TimeoutError("");
        try {
          addrs[size_t(q)] = store.wait_get(prefix + std::to_string(q), wait_s);
          break;
        } catch (const TimeoutError&) {
          if (left_s() <= 0) throw;
        }
      }
    } catch (const TimeoutError&) {
      std::vector<int> missing;
      for (int m = q; m < size; ++m)
        if (!store.try_get(prefix + std::to_string(m))) missing.push_back(m);
      throw TimeoutError(cat("tcp backend, job ", job, ": rank", missing.size() > 1 ? "s " : " ",
                             rank_list(missing), " never published an address in the store at ",
                             store_addr, " before the timeout"));
    }
  }
  auto links = form_links(listener.get(), addrs, job, "world", rank, deadline_ns);
  return std::make_unique<TcpTransport>(std::move(links), job, "world", rank, ranks, ip, opt);
}

}  // namespace strata::comm::tcp
