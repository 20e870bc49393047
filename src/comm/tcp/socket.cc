#include "comm/tcp/socket.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>

#include "core/error.h"
#include "core/timer.h"

namespace strata::comm::tcp {

void Fd::reset() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

std::pair<std::string, int> split_address(const std::string& address) {
  size_t colon = address.rfind(':');
  STRATA_CHECK(colon != std::string::npos && colon > 0 && colon + 1 < address.size(),
               "bad address '", address, "' (expected host:port)");
  std::string host = address.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  int port = 0;
  for (char ch : address.substr(colon + 1)) {
    STRATA_CHECK(ch >= '0' && ch <= '9' && port < 65536, "bad port in address '", address, "'");
    port = port * 10 + (ch - '0');
  }
  STRATA_CHECK(port > 0 && port < 65536, "bad port in address '", address, "'");
  return {host, port};
}

static sockaddr_in resolve(const std::string& host, int port) {
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(uint16_t(port));
  if (host.empty() || host == "0.0.0.0") {
    sa.sin_addr.s_addr = htonl(INADDR_ANY);
    return sa;
  }
  if (inet_pton(AF_INET, host.c_str(), &sa.sin_addr) == 1) return sa;
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  int rc = getaddrinfo(host.c_str(), nullptr, &hints, &res);
  STRATA_CHECK(rc == 0 && res, "cannot resolve host '", host, "': ", gai_strerror(rc));
  sa.sin_addr = reinterpret_cast<sockaddr_in*>(res->ai_addr)->sin_addr;
  freeaddrinfo(res);
  return sa;
}

Fd listen_on(const std::string& bind_host, int port, int backlog) {
  Fd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  STRATA_CHECK(fd.valid(), "socket() failed: ", std::strerror(errno));
  int one = 1;
  setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in sa = resolve(bind_host, port);
  STRATA_CHECK(::bind(fd.get(), reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0, "cannot bind ",
               bind_host, ":", port, ": ", std::strerror(errno));
  STRATA_CHECK(::listen(fd.get(), backlog) == 0, "listen() on ", bind_host, ":", port, " failed: ",
               std::strerror(errno));
  return fd;
}

int local_port(int fd) {
  sockaddr_in sa{};
  socklen_t len = sizeof sa;
  getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len);
  return ntohs(sa.sin_port);
}

std::string local_ip(int fd) {
  sockaddr_in sa{};
  socklen_t len = sizeof sa;
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len) != 0) return "";
  char buf[INET_ADDRSTRLEN] = {};
  inet_ntop(AF_INET, &sa.sin_addr, buf, sizeof buf);
  return buf;
}

void set_nonblocking(int fd, bool on) {
  int fl = fcntl(fd, F_GETFL);
  fcntl(fd, F_SETFL, on ? (fl | O_NONBLOCK) : (fl & ~O_NONBLOCK));
}

void tune_socket(int fd, bool nonblocking) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  int buf = 4 << 20;
  setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &buf, sizeof buf);
  setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &buf, sizeof buf);
  set_nonblocking(fd, nonblocking);
}

void set_keepalive(int fd, int seconds) {
  if (seconds <= 0) return;
  int one = 1, idle = std::max(1, seconds / 3), intvl = std::max(1, seconds / 6), cnt = 4;
  setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof intvl);
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof cnt);
}

Fd connect_until(const std::string& host, int port, int64_t deadline_ns, std::string& last_error) {
  sockaddr_in sa = resolve(host, port);
  int64_t backoff_ms = 5;
  for (;;) {
    Fd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    STRATA_CHECK(fd.valid(), "socket() failed: ", std::strerror(errno));
    int rc = ::connect(fd.get(), reinterpret_cast<sockaddr*>(&sa), sizeof sa);
    if (rc != 0 && errno == EINPROGRESS) {
      pollfd p{fd.get(), POLLOUT, 0};
      int n = ::poll(&p, 1, poll_ms(deadline_ns, 1000));
      int err = 0;
      socklen_t len = sizeof err;
      if (n == 1) getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
      rc = (n == 1 && err == 0) ? 0 : -1;
      errno = n == 1 ? err : ETIMEDOUT;
    }
    if (rc == 0) {
      set_nonblocking(fd.get(), false);
      return fd;
    }
    last_error = std::strerror(errno);
    int64_t now = now_ns();
    if (now >= deadline_ns) return Fd();
    int64_t sleep_ms = std::min<int64_t>(backoff_ms, (deadline_ns - now) / 1'000'000 + 1);
    std::this_thread::sleep_for(std::chrono::milliseconds(sleep_ms));
    backoff_ms = std::min<int64_t>(backoff_ms * 2, 200);
  }
}

namespace {
// Repeats `io(done)` (one non-blocking send or recv of the bytes from `done` on) until `len`
// bytes are done; what send_some and recv_some return.
template <class Io>
bool move_some(const Io& io, size_t len, size_t& done) {
  while (done < len) {
    const ssize_t k = io(done);
    if (k > 0) {
      done += size_t(k);
      continue;
    }
    if (k < 0 && errno == EINTR) continue;
    return k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
  }
  return true;
}
}  // namespace

bool send_some(int fd, const char* buf, size_t len, size_t& done) {
  return move_some([&](size_t at) { return ::send(fd, buf + at, len - at, MSG_NOSIGNAL | MSG_DONTWAIT); }, len, done);
}

bool recv_some(int fd, char* buf, size_t len, size_t& done) {
  return move_some([&](size_t at) { return ::recv(fd, buf + at, len - at, MSG_DONTWAIT); }, len, done);
}

int poll_ms(int64_t deadline_ns, int cap_ms) {
  int64_t left = deadline_ns - now_ns();
  if (left <= 0) return 0;
  return int(std::min<int64_t>(cap_ms, (left + 999'999) / 1'000'000));
}

int send_all(int fd, const void* data, size_t n, int64_t deadline_ns) {
  auto* p = static_cast<const char*>(data);
  while (n) {
    ssize_t k = ::send(fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (k > 0) {
      p += k;
      n -= size_t(k);
      continue;
    }
    if (k < 0 && errno == EINTR) continue;
    if (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK) return -1;
    if (now_ns() >= deadline_ns) return 0;
    pollfd pf{fd, POLLOUT, 0};
    ::poll(&pf, 1, poll_ms(deadline_ns, 1000));
  }
  return 1;
}

int recv_all(int fd, void* data, size_t n, int64_t deadline_ns) {
  auto* p = static_cast<char*>(data);
  while (n) {
    ssize_t k = ::recv(fd, p, n, MSG_DONTWAIT);
    if (k > 0) {
      p += k;
      n -= size_t(k);
      continue;
    }
    if (k == 0) {
      errno = ECONNRESET;
      return -1;
    }
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) return -1;
    if (now_ns() >= deadline_ns) return 0;
    pollfd pf{fd, POLLIN, 0};
    ::poll(&pf, 1, poll_ms(deadline_ns, 1000));
  }
  return 1;
}

}  // namespace strata::comm::tcp
