#include "comm/tcp/store.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <list>
#include <vector>

#include "core/env.h"
#include "core/error.h"
#include "core/timer.h"
#include "core/trace.h"

namespace strata::comm::tcp {

static const EnvVar kStore("STRATA_STORE", "",
                           "host:port of the rendezvous store of the tcp backend (set by strata launch "
                           "--backend tcp)");

std::string store_address() { return kStore.is_set() ? kStore.get() : std::string(); }

namespace {
enum Status : uint8_t { kOk = 0, kMissing = 1, kTimedOut = 2 };
constexpr size_t kHeader = 9;                // u8 command + u32 key bytes + u32 value bytes
constexpr uint32_t kMaxField = 1u << 30;     // a sanity bound on a request's sizes

void put_u32(std::string& s, uint32_t v) { s.append(reinterpret_cast<const char*>(&v), 4); }
uint32_t get_u32(const char* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
int64_t get_i64(const std::string& s) {
  int64_t v = 0;
  std::memcpy(&v, s.data(), std::min<size_t>(8, s.size()));
  return v;
}
std::string i64_bytes(int64_t v) { return std::string(reinterpret_cast<const char*>(&v), 8); }

std::string response(uint8_t status, const std::string& value) {
  std::string r(1, char(status));
  put_u32(r, uint32_t(value.size()));
  return r + value;
}
}  // namespace

struct StoreServer::Impl {
  struct Conn {
    Fd fd;
    std::string in, out;
    bool parked = false;  // a wait is pending: requests after it wait their turn
    bool closing = false;
  };
  struct Waiter {
    Conn* conn;
    std::string key;
    int64_t deadline_ns;
  };
  std::list<Conn> conns;
  std::list<Waiter> waiters;
};

StoreServer::StoreServer(const std::string& bind_host, int port) : impl_(std::make_unique<Impl>()) {
  listener_ = listen_on(bind_host, port);
  port_ = local_port(listener_.get());
  set_nonblocking(listener_.get(), true);
  wake_ = Fd(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  STRATA_CHECK(wake_.valid(), "eventfd() failed: ", std::strerror(errno));
  thread_ = std::thread([this] { serve(); });
}

StoreServer::~StoreServer() {
  stop_ = true;
  uint64_t one = 1;
  (void)!::write(wake_.get(), &one, 8);
  if (thread_.joinable()) thread_.join();
}

void StoreServer::set(const std::string& key, const std::string& value) {
  {
    std::lock_guard lk(mu_);
    kv_[key] = value;
  }
  uint64_t one = 1;
  (void)!::write(wake_.get(), &one, 8);
}

std::optional<std::string> StoreServer::get(const std::string& key) const {
  std::lock_guard lk(mu_);
  auto it = kv_.find(key);
  if (it == kv_.end()) return std::nullopt;
  return it->second;
}

void StoreServer::erase_prefix(const std::string& prefix) {
  std::lock_guard lk(mu_);
  auto it = kv_.lower_bound(prefix);
  while (it != kv_.end() && it->first.compare(0, prefix.size(), prefix) == 0) it = kv_.erase(it);
}

void StoreServer::serve() {
  tracer().name_thread("tcp store");
  Impl& s = *impl_;
  // Answers parked waits whose key exists or whose time is up.
  auto release_waiters = [&] {
    int64_t now = now_ns();
    for (auto it = s.waiters.begin(); it != s.waiters.end();) {
      auto v = get(it->key);
      if (!v && now < it->deadline_ns) {
        ++it;
        continue;
      }
      it->conn->out += v ? response(kOk, *v) : response(kTimedOut, "");
      it->conn->parked = false;
      it = s.waiters.erase(it);
    }
  };
  // Handles the complete requests buffered on a connection (stops at a parked wait).
  auto handle = [&](Impl::Conn& c) {
    while (!c.parked && c.in.size() >= kHeader) {
      uint32_t klen = get_u32(c.in.data() + 1), vlen = get_u32(c.in.data() + 5);
      if (klen > kMaxField || vlen > kMaxField) {
        c.closing = true;
        return;
      }
      if (c.in.size() < kHeader + klen + vlen) return;
      char cmd = c.in[0];
      std::string key = c.in.substr(kHeader, klen), value = c.in.substr(kHeader + klen, vlen);
      c.in.erase(0, kHeader + klen + vlen);
      if (cmd == 'S') {
        {
          std::lock_guard lk(mu_);
          kv_[key] = value;
        }
        c.out += response(kOk, "");
        release_waiters();
      } else if (cmd == 'G') {
        auto v = get(key);
        c.out += v ? response(kOk, *v) : response(kMissing, "");
      } else if (cmd == 'W') {
        auto v = get(key);
        if (v) {
          c.out += response(kOk, *v);
        } else {
          c.parked = true;
          s.waiters.push_back({&c, key, now_ns() + get_i64(value) * 1'000'000});
        }
      } else if (cmd == 'A') {
        int64_t now_value;
        {
          std::lock_guard lk(mu_);
          auto it = kv_.find(key);
          now_value = (it == kv_.end() ? 0 : get_i64(it->second)) + get_i64(value);
          kv_[key] = i64_bytes(now_value);
        }
        c.out += response(kOk, i64_bytes(now_value));
        release_waiters();
      } else {
        c.closing = true;
        return;
      }
    }
  };

  std::vector<pollfd> pfds;
  std::vector<Impl::Conn*> order;
  while (!stop_.load()) {
    pfds.assign({{listener_.get(), POLLIN, 0}, {wake_.get(), POLLIN, 0}});
    order.clear();
    for (auto& c : s.conns) {
      pfds.push_back({c.fd.get(), short(POLLIN | (c.out.empty() ? 0 : POLLOUT)), 0});
      order.push_back(&c);
    }
    int64_t next = now_ns() + 1'000'000'000;
    for (auto& w : s.waiters) next = std::min(next, w.deadline_ns);
    ::poll(pfds.data(), pfds.size(), poll_ms(next, 1000));
    if (stop_.load()) break;
    if (pfds[1].revents) {
      uint64_t v;
      (void)!::read(wake_.get(), &v, 8);
    }
    if (pfds[0].revents & POLLIN) {
      for (;;) {
        int fd = ::accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd < 0) break;
        tune_socket(fd, true);
        s.conns.emplace_back();
        s.conns.back().fd = Fd(fd);
      }
    }
    for (size_t i = 0; i < order.size(); ++i) {
      Impl::Conn& c = *order[i];
      short re = pfds[i + 2].revents;
      if (re & (POLLIN | POLLHUP | POLLERR)) {
        char buf[65536];
        for (;;) {
          ssize_t k = ::recv(c.fd.get(), buf, sizeof buf, MSG_DONTWAIT);
          if (k > 0) {
            c.in.append(buf, size_t(k));
            continue;
          }
          if (k == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) c.closing = true;
          if (k < 0 && errno == EINTR) continue;
          break;
        }
        handle(c);
      }
    }
    release_waiters();
    for (auto& c : s.conns)
      if (!c.parked && !c.in.empty()) handle(c);  // requests queued behind a released wait
    for (auto it = s.conns.begin(); it != s.conns.end();) {
      Impl::Conn& c = *it;
      while (!c.out.empty()) {
        ssize_t k = ::send(c.fd.get(), c.out.data(), c.out.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
        if (k > 0) {
          c.out.erase(0, size_t(k));
          continue;
        }
        if (k < 0 && errno == EINTR) continue;
        if (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK) c.closing = true;
        break;
      }
      if (c.closing) {
        s.waiters.remove_if([&](const Impl::Waiter& w) { return w.conn == &c; });
        it = s.conns.erase(it);
      } else {
        ++it;
      }
    }
  }
}

StoreClient::StoreClient(const std::string& address, double connect_timeout_s) : address_(address) {
  auto [host, port] = split_address(address);
  std::string err;
  fd_ = connect_until(host, port, now_ns() + int64_t(connect_timeout_s * 1e9), err);
  if (!fd_.valid())
    throw Error(cat("cannot reach the rendezvous store at ", address, " within ", connect_timeout_s,
                    " s: ", err));
  tune_socket(fd_.get(), false);
}

int StoreClient::request(char cmd, const std::string& key, const std::string& value, std::string& out,
                         double wait_s) {
  std::lock_guard lk(mu_);
  STRATA_CHECK(fd_.valid(), "the connection to the rendezvous store at ", address_, " was lost earlier");
  std::string req(1, cmd);
  put_u32(req, uint32_t(key.size()));
  put_u32(req, uint32_t(value.size()));
  req += key;
  req += value;
  // The server answers a wait when it times out, so the client allows it a little longer.
  int64_t deadline = now_ns() + int64_t((wait_s + 30.0) * 1e9);
  char head[5];
  if (send_all(fd_.get(), req.data(), req.size(), deadline) != 1 ||
      recv_all(fd_.get(), head, 5, deadline) != 1) {
    fd_.reset();
    fail("the rendezvous store at ", address_, " did not answer a request for key '", key,
         "' (did the launcher exit?)");
  }
  out.resize(get_u32(head + 1));
  if (!out.empty() && recv_all(fd_.get(), out.data(), out.size(), deadline) != 1) {
    fd_.reset();
    fail("the rendezvous store at ", address_, " closed the connection mid-answer for key '", key, "'");
  }
  return head[0];
}

void StoreClient::set(const std::string& key, const std::string& value) {
  std::string out;
  request('S', key, value, out, 0);
}

std::optional<std::string> StoreClient::try_get(const std::string& key) {
  std::string out;
  if (request('G', key, "", out, 0) != kOk) return std::nullopt;
  return out;
}

std::string StoreClient::wait_get(const std::string& key, double timeout_s) {
  std::string out;
  int64_t ms = int64_t(std::max(0.0, timeout_s) * 1000);
  if (request('W', key, i64_bytes(ms), out, timeout_s) != kOk)
    throw TimeoutError(cat("key '", key, "' was not set in the rendezvous store at ", address_,
                           " within ", timeout_s, " s"));
  return out;
}

int64_t StoreClient::add(const std::string& key, int64_t delta) {
  std::string out;
  request('A', key, i64_bytes(delta), out, 0);
  return get_i64(out);
}

std::string StoreClient::local_ip() const { return tcp::local_ip(fd_.get()); }

}  // namespace strata::comm::tcp
