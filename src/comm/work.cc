#include "comm/work.h"

#include <chrono>

#include "core/error.h"
#include "core/timer.h"

namespace strata::comm {

void Work::finish(std::exception_ptr err) {
  {
    std::lock_guard lk(mu_);
    err_ = err;
    done_ = true;
  }
  cv_.notify_all();
}

void Work::wait(double timeout_s) {
  // Default: the op fails on its own at the group's timeout; the margin covers queueing.
  double limit = timeout_s >= 0 ? timeout_s : 2 * default_timeout_s_ + 10;
  if (!wait_for(limit))
    throw TimeoutError(cat(op_name(op_), " #", seq_, ": wait timed out after ", limit,
                           " s (the operation is still running)"));
}

bool Work::wait_for(double timeout_s) {
  std::unique_lock lk(mu_);
  if (!done_) {
    const int64_t t0 = now_ns();
    auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
    const bool finished = cv_.wait_until(lk, until, [&] { return done_; });
    add_thread_blocked_ns(now_ns() - t0);
    if (!finished) return false;
  }
  if (err_) std::rethrow_exception(err_);
  return true;
}

static thread_local int64_t t_blocked_ns = 0;
int64_t thread_blocked_ns() { return t_blocked_ns; }
void add_thread_blocked_ns(int64_t ns) { t_blocked_ns += ns; }

bool Work::test() const {
  std::lock_guard lk(mu_);
  return done_;
}

bool Work::ok() const {
  std::lock_guard lk(mu_);
  return done_ && !err_;
}

std::exception_ptr Work::error() const {
  std::lock_guard lk(mu_);
  return err_;
}

std::string Work::error_message() const {
  std::exception_ptr e = error();
  if (!e) return "";
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& x) {
    return x.what();
  } catch (...) {
    return "unknown error";
  }
}

}  // namespace strata::comm
