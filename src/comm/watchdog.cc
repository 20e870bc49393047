#include "comm/watchdog.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "comm/flight_recorder.h"
#include "comm/runtime.h"
#include "core/error.h"
#include "core/timer.h"
#include "core/trace.h"

namespace strata::comm {

// Self-pipe: the handler only writes the signal number; the watchdog thread does the dump.
static int g_signal_pipe[2] = {-1, -1};

extern "C" void strata_comm_on_signal(int sig) {
  unsigned char b = (unsigned char)sig;
  if (g_signal_pipe[1] >= 0) {
    ssize_t r = write(g_signal_pipe[1], &b, 1);
    (void)r;
  }
}

Watchdog& watchdog() {
  static Watchdog w;
  return w;
}

Watchdog::~Watchdog() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
}

void Watchdog::install_signal_handlers() {
  if (handlers_installed_) return;
  handlers_installed_ = true;
  if (pipe(g_signal_pipe) != 0) return;
  for (int fd : g_signal_pipe) fcntl(fd, F_SETFD, FD_CLOEXEC);
  for (int sig : {SIGTERM, SIGINT, SIGHUP}) {
    struct sigaction old {};
    if (sigaction(sig, nullptr, &old) != 0) continue;
    if (old.sa_handler != SIG_DFL) continue;  // the program handles it itself
    struct sigaction sa {};
    sa.sa_handler = strata_comm_on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sigaction(sig, &sa, nullptr);
  }
}

static void detach_all_at_exit() { watchdog().detach_all(); }

void Watchdog::watch(detail::GroupRuntime* rt) {
  std::lock_guard lk(mu_);
  groups_.push_back(rt);
  install_signal_handlers();
  if (!thread_.joinable()) {
    std::atexit(detach_all_at_exit);
    thread_ = std::thread([this] { loop(); });
  }
}

void Watchdog::detach_all() {
  stop_ = true;
  std::lock_guard lk(mu_);
  for (detail::GroupRuntime* rt : groups_)
    if (!rt->broken()) rt->transport().detach();
}

void Watchdog::unwatch(detail::GroupRuntime* rt) {
  std::lock_guard lk(mu_);
  groups_.erase(std::remove(groups_.begin(), groups_.end(), rt), groups_.end());
}

void Watchdog::notify_failure(detail::GroupRuntime* failed, const std::string& reason,
                              const std::string& message) {
  std::lock_guard lk(mu_);
  for (detail::GroupRuntime* rt : groups_)
    if (rt != failed && !rt->broken())
      rt->fail_from_watchdog(reason, cat("group ", failed->name(), " failed: ", message));
}

void Watchdog::check_groups() {
  std::lock_guard lk(mu_);
  detail::GroupRuntime* failed = nullptr;
  std::string reason, msg;
  int64_t now = now_ns();
  for (detail::GroupRuntime* rt : groups_) {
    if (rt->broken()) continue;
    std::string r;
    std::string problem = rt->check_health(r);
    if (problem.empty()) {
      int64_t deadline = rt->inflight_deadline_ns();
      // Backstop: ops fail on their own at the deadline; 5 s later something is stuck.
      if (deadline > 0 && now > deadline + 5'000'000'000) {
        r = "timeout";
        problem = cat("group ", rt->name(), ": ", rt->inflight_description(),
                      " still in flight past its deadline");
      }
    }
    if (problem.empty()) continue;
    flight_recorder().dump_once(r, problem);
    rt->fail_from_watchdog(r, problem);
    if (!failed) {
      failed = rt;
      reason = r;
      msg = problem;
    }
  }
  if (!failed) return;
  for (detail::GroupRuntime* rt : groups_)
    if (!rt->broken()) rt->fail_from_watchdog(reason, cat("group ", failed->name(), ": ", msg));
}

void Watchdog::loop() {
  tracer().name_thread("watchdog");
  while (!stop_) {
    struct pollfd pfd {g_signal_pipe[0], POLLIN, 0};
    int n = poll(&pfd, g_signal_pipe[0] >= 0 ? 1 : 0, poll_interval_ms());
    if (n > 0 && (pfd.revents & POLLIN)) {
      unsigned char sig = 0;
      if (read(g_signal_pipe[0], &sig, 1) == 1) {
        // A launcher stops survivors right after a rank died: name the dead peer when the
        // groups can tell, rather than only the signal.
        check_groups();
        flight_recorder().dump_once("signal", cat("received signal ", int(sig), " (",
                                                  strsignal(sig), ")"));
        signal(sig, SIG_DFL);
        raise(sig);
      }
    }
    check_groups();
  }
}

std::string dump_flight_recorder(const std::string& detail) {
  return flight_recorder().dump("manual", detail);
}

}  // namespace strata::comm
