#include "comm/work.h"

#include <chrono>

#include "core/error.h"

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
  std::unique_lock lk(mu_);
  auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(limit);
  if (!cv_.wait_until(lk, until, [&] { return done_; }))
    throw TimeoutError(cat(op_name(op_), " #", seq_, ": wait timed out after ", limit,
                           " s (the operation is still running)"));
  if (err_) std::rethrow_exception(err_);
}

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
