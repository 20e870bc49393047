// The bandwidth doctor's measurements between hosts (terms and cost in host_net.h).
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <sstream>

#include "comm/hier/topology.h"
#include "comm/process_group.h"
#include "core/error.h"
#include "core/timer.h"
#include "diag/host_net.h"

namespace strata::diag {
namespace {

using launcher::NetIface;
using comm::ProcessGroup;

constexpr size_t kIfaceText = 2048;  // bytes per rank for its interface list

std::string encode_ifaces(const std::vector<NetIface>& ifs) {
  std::string s;
  for (const NetIface& f : ifs)
    s += cat(f.name, " ", f.state, " ", f.up ? 1 : 0, " ", f.ipv4.empty() ? "-" : f.ipv4, "\n");
  return s.substr(0, kIfaceText - 1);
}

std::vector<NetIface> decode_ifaces(const char* text) {
  std::vector<NetIface> out;
  std::istringstream in(text);
  NetIface f;
  int up = 0;
  while (in >> f.name >> f.state >> up >> f.ipv4) {
    f.up = up != 0;
    if (f.ipv4 == "-") f.ipv4.clear();
    out.push_back(f);
  }
  return out;
}

const NetIface* find(const std::vector<NetIface>& ifs, const std::string& name) {
  for (const NetIface& f : ifs)
    if (f.name == name) return &f;
  return nullptr;
}

// A TCP socket with a deadline for connect/accept (raw probes); closes on scope exit.
struct Fd {
  int fd = -1;
  explicit Fd(int f) : fd(f) {}
  ~Fd() {
    if (fd >= 0) close(fd);
  }
};

bool wait_fd(int fd, short events, double timeout_s) {
  pollfd p{fd, events, 0};
  return poll(&p, 1, int(timeout_s * 1000)) == 1 && !(p.revents & (POLLERR | POLLHUP | POLLNVAL));
}

bool write_all(int fd, const uint8_t* p, size_t n) {
  while (n > 0) {
    ssize_t k = ::send(fd, p, n, MSG_NOSIGNAL);
    if (k <= 0) return false;
    p += k, n -= size_t(k);
  }
  return true;
}

bool read_all(int fd, uint8_t* p, size_t n, double timeout_s) {
  while (n > 0) {
    if (!wait_fd(fd, POLLIN, timeout_s)) return false;
    ssize_t k = ::recv(fd, p, n, 0);
    if (k <= 0) return false;
    p += k, n -= size_t(k);
  }
  return true;
}

// Receiver side of one raw probe on `addr`: listens, tells the sender the port (port 0
// when it cannot listen), takes `bytes` and acks.
void raw_receive(ProcessGroup& pg, int sender, const std::string& addr, size_t bytes, double timeout_s,
                 std::vector<uint8_t>& buf) {
  int32_t port = 0;
  Fd ls(socket(AF_INET, SOCK_STREAM, 0));
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  socklen_t len = sizeof sa;
  if (ls.fd >= 0 && inet_pton(AF_INET, addr.c_str(), &sa.sin_addr) == 1 &&
      bind(ls.fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0 && listen(ls.fd, 1) == 0 &&
      getsockname(ls.fd, reinterpret_cast<sockaddr*>(&sa), &len) == 0)
    port = ntohs(sa.sin_port);
  pg.send(&port, 1, DType::i32, sender);
  if (port == 0) return;
  // The sender may fail to connect (a link down): accept gives up after the timeout.
  if (!wait_fd(ls.fd, POLLIN, timeout_s + 1)) return;
  Fd c(accept(ls.fd, nullptr, nullptr));
  uint8_t ack = 1;
  if (c.fd >= 0 && read_all(c.fd, buf.data(), bytes, timeout_s + 5)) write_all(c.fd, &ack, 1);
}

// Sender side: connects to the receiver's address (the route to it picks the interface),
// sends `bytes`, waits for the ack; GB/s or an error.
RawProbe raw_send(ProcessGroup& pg, int receiver, const std::string& iface, const std::string& addr, size_t bytes,
                  double timeout_s, std::vector<uint8_t>& buf) {
  RawProbe p{iface, 0, ""};
  int32_t port = 0;
  pg.recv(&port, 1, DType::i32, receiver);
  if (port == 0) return p.error = cat("the receiver cannot listen on ", addr), p;
  Fd s(socket(AF_INET, SOCK_STREAM, 0));
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(uint16_t(port));
  inet_pton(AF_INET, addr.c_str(), &sa.sin_addr);
  fcntl(s.fd, F_SETFL, fcntl(s.fd, F_GETFL) | O_NONBLOCK);
  int64_t t0 = now_ns();
  int rc = connect(s.fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa);
  if (rc != 0 && errno != EINPROGRESS) return p.error = cat("connect to ", addr, ": ", std::strerror(errno)), p;
  int err = 0;
  socklen_t len = sizeof err;
  if (!wait_fd(s.fd, POLLOUT, timeout_s) || getsockopt(s.fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0 || err != 0)
    return p.error = cat("connect to ", addr, ": ", err ? std::strerror(err) : "timed out"), p;
  fcntl(s.fd, F_SETFL, fcntl(s.fd, F_GETFL) & ~O_NONBLOCK);
  uint8_t ack = 0;
  if (!write_all(s.fd, buf.data(), bytes) || !read_all(s.fd, &ack, 1, timeout_s + 5))
    return p.error = cat("transfer to ", addr, " failed"), p;
  p.gbps = double(bytes) / double(now_ns() - t0);
  return p;
}

std::vector<std::pair<std::string, uint64_t>> tx_counters() {
  std::vector<std::pair<std::string, uint64_t>> out;
  for (const NetIface& f : launcher::local_interfaces())
    if (!f.loopback()) out.emplace_back(f.name, f.tx_bytes);
  return out;
}

// Best MPI rate a -> b over cfg.reps repetitions and the bytes a's interfaces sent.
void measure_link(ProcessGroup& pg, const HostNetResult& r, HostLink& link, int ra, int rb,
                  const HostNetConfig& cfg, std::vector<uint8_t>& buf) {
  const int me = pg.rank();
  auto before = me == ra ? tx_counters() : decltype(tx_counters()){};
  uint8_t ack = 0;
  for (int rep = 0; rep <= cfg.reps; ++rep) {  // rep 0 warms the connection up
    if (me == rb) {
      for (int m = 0; m < cfg.messages; ++m) pg.recv(buf.data(), cfg.bytes, DType::u8, ra);
      pg.send(&ack, 1, DType::u8, ra);
      continue;
    }
    int64_t t0 = now_ns();
    for (int m = 0; m < cfg.messages; ++m) pg.send(buf.data(), cfg.bytes, DType::u8, rb);
    pg.recv(&ack, 1, DType::u8, rb);
    if (rep > 0) link.mpi_gbps = std::max(link.mpi_gbps, double(cfg.bytes) * cfg.messages / double(now_ns() - t0));
  }
  if (me == ra)
    for (auto& [name, bytes] : tx_counters())
      for (auto& [bname, bbytes] : before)
        if (bname == name) link.tx_bytes.emplace_back(name, bytes - bbytes);
  // Raw TCP on every interface both hosts have with an address, as many bytes as one MPI
  // repetition (a token bucket's burst then weighs the same in both).
  const size_t raw_bytes = cfg.bytes * size_t(cfg.messages);
  if (buf.size() < raw_bytes) buf.resize(raw_bytes, 0x5a);
  const auto& fa = r.ifaces[size_t(link.from)];
  const auto& fb = r.ifaces[size_t(link.to)];
  for (const NetIface& f : fa) {
    const NetIface* g = find(fb, f.name);
    if (f.loopback() || !g || g->ipv4.empty()) continue;
    if (me == rb) raw_receive(pg, ra, g->ipv4, raw_bytes, cfg.connect_timeout_s, buf);
    if (me == ra) link.raw.push_back(raw_send(pg, rb, f.name, g->ipv4, raw_bytes, cfg.connect_timeout_s, buf));
  }
}

// Sends a link measured on its sender to every rank: "mpi_gbps n name bytes ... m iface gbps error|...".
void share_link(ProcessGroup& pg, HostLink& link, int sender) {
  std::string text;
  if (pg.rank() == sender) {
    text = cat(link.mpi_gbps, " ", link.tx_bytes.size());
    for (auto& [n, b] : link.tx_bytes) text += cat(" ", n, " ", b);
    text += cat(" ", link.raw.size());
    for (const RawProbe& p : link.raw) text += cat(" ", p.iface, " ", p.gbps, " ", p.error.empty() ? "-" : p.error, "|");
  }
  int64_t n = int64_t(text.size());
  pg.broadcast(&n, 1, DType::i64, sender);
  text.resize(size_t(n));
  pg.broadcast(text.data(), size_t(n), DType::u8, sender);
  if (pg.rank() == sender) return;
  std::istringstream in(text);
  size_t k = 0;
  in >> link.mpi_gbps >> k;
  link.tx_bytes.resize(k);
  for (auto& [name, b] : link.tx_bytes) in >> name >> b;
  in >> k;
  link.raw.resize(k);
  for (RawProbe& p : link.raw) {
    in >> p.iface >> p.gbps >> std::ws;
    std::getline(in, p.error, '|');
    if (p.error == "-") p.error.clear();
  }
}

// Best time of an all-reduce of `bytes` over `g` (every rank of the world calls; ranks
// outside g, null, only take part in the max).
double time_all_reduce(ProcessGroup& world, ProcessGroup* g, size_t bytes, int iters) {
  std::vector<float> v(bytes / sizeof(float), 1.0f);
  double best = INFINITY;
  for (int it = 0; it <= iters; ++it) {
    world.barrier();
    int64_t t0 = now_ns();
    if (g) g->all_reduce(v.data(), v.data(), v.size(), DType::f32, comm::ReduceOp::sum);
    double dt = g ? double(now_ns() - t0) : 0;
    world.all_reduce(&dt, &dt, 1, DType::f64, comm::ReduceOp::max);
    if (it > 0) best = std::min(best, dt);
  }
  return best * 1e-3;
}

void measure_tp(ProcessGroup& world, const HostNetResult& r, const HostNetConfig& cfg, TpPlacement& out) {
  const int n = world.size(), T = cfg.tp, me = world.rank();
  out.tp = T;
  out.bytes = cfg.tp_bytes;
  if (T <= 1 || n % T != 0) return;
  for (int g = 0; g < n / T; ++g) {
    std::vector<int> ranks;
    bool spans = false;
    for (int t = 0; t < T; ++t) {
      ranks.push_back(g * T + t);
      spans |= r.host_of[size_t(g * T + t)] != r.host_of[size_t(g * T)];
    }
    if (spans) out.spanning.push_back(ranks);
  }
  if (out.spanning.empty()) return;
  // The cost: a tp group's all-reduce, and the same on T ranks of one host (the first T
  // ranks of host 0, when it has T).
  comm::GroupPtr tp = world.split(me / T, me, "doctor-tp");
  std::vector<int> local;
  for (int q = 0; q < n && int(local.size()) < T; ++q)
    if (r.host_of[size_t(q)] == 0) local.push_back(q);
  const bool in_local = int(local.size()) == T && std::count(local.begin(), local.end(), me);
  comm::GroupPtr one_host = world.split(in_local ? 0 : -1, me, "doctor-host");
  out.group_us = time_all_reduce(world, tp.get(), cfg.tp_bytes, 3);
  if (int(local.size()) == T) out.local_us = time_all_reduce(world, one_host.get(), cfg.tp_bytes, 3);
}

}  // namespace

const RawProbe* HostLink::best_raw() const {
  const RawProbe* best = nullptr;
  for (const RawProbe& p : raw)
    if (p.gbps > 0 && (!best || p.gbps > best->gbps)) best = &p;
  return best;
}

HostNetResult measure_hosts(ProcessGroup& pg, const HostNetConfig& cfg) {
  STRATA_CHECK(cfg.bytes >= 1 && cfg.messages >= 1 && cfg.reps >= 1, "host doctor: sizes and counts must be positive");
  HostNetResult r;
  comm::HostLayout layout = comm::discover_hosts(pg);
  r.hosts = layout.hosts;
  r.host_of = layout.host_of;
  r.wanted_ifaces = cfg.wanted_ifaces;
  const int H = layout.num_hosts(), n = pg.size();
  // Every rank's interfaces; a host's are those its first rank sees.
  std::string mine = encode_ifaces(launcher::local_interfaces());
  std::vector<char> send(kIfaceText, 0), all(kIfaceText * size_t(n), 0);
  std::memcpy(send.data(), mine.data(), mine.size());
  pg.all_gather(send.data(), all.data(), kIfaceText, DType::u8);
  std::vector<int> first(size_t(H), -1);
  for (int q = n - 1; q >= 0; --q) first[size_t(layout.host_of[size_t(q)])] = q;
  for (int h = 0; h < H; ++h) r.ifaces.push_back(decode_ifaces(all.data() + kIfaceText * size_t(first[size_t(h)])));
  std::vector<uint8_t> buf(cfg.bytes, 0x5a);
  for (int a = 0; a < H; ++a)
    for (int b = 0; b < H; ++b) {
      if (a == b) continue;
      HostLink link;
      link.from = a, link.to = b;
      const int ra = first[size_t(a)], rb = first[size_t(b)];
      pg.barrier();
      if (pg.rank() == ra || pg.rank() == rb) measure_link(pg, r, link, ra, rb, cfg, buf);
      share_link(pg, link, ra);
      r.links.push_back(std::move(link));
    }
  measure_tp(pg, r, cfg, r.tp);
  return r;
}

}  // namespace strata::diag
