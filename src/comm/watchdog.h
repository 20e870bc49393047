// Watchdog: one thread per process that watches every live group. It notices what blocked
// operations cannot see themselves and makes every live rank leave a flight-recorder dump:
//  - a peer process that died (or exited) while the group is in use, within ~0.2 s;
//  - an abort raised in a shared segment by a peer whose operation failed or timed out;
//  - an operation still in flight past its deadline (a backstop; ops fail on their own);
//  - SIGTERM / SIGINT / SIGHUP (how the launcher stops survivors): dump, then die by the
//    signal. Handlers are installed only where the signal still has its default action.
// A failure in one group aborts this process's other groups too, so ranks that are not in
// the failing group (but share the world with it) learn of it and dump.
#pragma once
#include <atomic>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace strata::comm {

namespace detail {
class GroupRuntime;
}

class Watchdog {
 public:
  Watchdog() = default;
  ~Watchdog();
  void watch(detail::GroupRuntime* rt);
  void unwatch(detail::GroupRuntime* rt);
  // A group of this process failed: abort the process's other groups (peers then dump).
  void notify_failure(detail::GroupRuntime* failed, const std::string& reason,
                      const std::string& message);
  // Installs the signal handlers (idempotent); watch() calls it.
  void install_signal_handlers();
  int poll_interval_ms() const { return 100; }
  // At normal process exit: marks this process's ranks as cleanly gone from their groups
  // (peers must not report an orderly exit as a death) and stops the thread.
  void detach_all();

 private:
  void loop();
  void check_groups();
  std::mutex mu_;
  std::vector<detail::GroupRuntime*> groups_;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  bool handlers_installed_ = false;
};

Watchdog& watchdog();

// Writes this process's flight recorder now (reason "manual"); returns the file path.
std::string dump_flight_recorder(const std::string& detail = "requested");

}  // namespace strata::comm
