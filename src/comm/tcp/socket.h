// Socket helpers shared by the rendezvous store and the tcp backend: every fd is CLOEXEC,
// every send is MSG_NOSIGNAL (a dead peer is an error, never a SIGPIPE), and every blocking
// step takes an absolute deadline (now_ns() clock).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

namespace strata::comm::tcp {

// Owns one file descriptor.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() { reset(); }
  Fd(Fd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  Fd& operator=(Fd&& o) noexcept {
    if (this != &o) {
      reset();
      fd_ = std::exchange(o.fd_, -1);
    }
    return *this;
  }
  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  void reset();

 private:
  int fd_ = -1;
};

// "host:port" -> (host, port); throws Error naming the text when malformed.
std::pair<std::string, int> split_address(const std::string& address);

// A listening socket on bind_host:port (port 0: any free port), CLOEXEC.
Fd listen_on(const std::string& bind_host, int port, int backlog = 1024);
int local_port(int fd);
std::string local_ip(int fd);  // the address of this end of a connected socket

// Connects to host:port, retrying refused/unreachable attempts until the deadline; returns an
// invalid Fd when the deadline passes. `last_error` gets the last failure's text.
Fd connect_until(const std::string& host, int port, int64_t deadline_ns, std::string& last_error);

// TCP_NODELAY, large buffers, non-blocking as asked.
void tune_socket(int fd, bool nonblocking);
void set_nonblocking(int fd, bool on);
// Kernel keepalive probes: a peer host that vanished (powered off, cut off) without closing
// the connection makes it fail after about `seconds`. A stopped process's kernel still
// answers the probes, so a stopped rank is not mistaken for a dead one.
void set_keepalive(int fd, int seconds);

// Whole-buffer transfers on a (blocking or not) socket, polling until the deadline.
// Return values: 1 done, 0 deadline passed, -1 the peer closed / reset (errno kept).
int send_all(int fd, const void* data, size_t n, int64_t deadline_ns);
int recv_all(int fd, void* data, size_t n, int64_t deadline_ns);

// Non-blocking: moves what the socket takes (gives) now, advancing `done` towards `len`.
// Returns false when the peer closed or reset the connection.
bool send_some(int fd, const char* buf, size_t len, size_t& done);
bool recv_some(int fd, char* buf, size_t len, size_t& done);

// Milliseconds to pass to poll() for an absolute deadline (>= 0, capped at `cap_ms`).
int poll_ms(int64_t deadline_ns, int cap_ms);

}  // namespace strata::comm::tcp
