// A handle on one asynchronous communication operation (c10d's Work): the operation runs on
// its group's communication thread while the caller computes; wait() joins it.
//
//   auto w = pg.all_reduce_async(grad, grad, n, DType::f32, ReduceOp::sum);
//   ... compute ...
//   w->wait();            // throws strata::Error / strata::TimeoutError if the op failed
//
// Buffers passed to an async operation must stay alive and untouched until it finished.
#pragma once
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <string>

#include "comm/types.h"

namespace strata::comm {

class Work {
 public:
  Work(OpType op, uint64_t seq, double default_timeout_s)
      : op_(op), seq_(seq), default_timeout_s_(default_timeout_s) {}
  Work(const Work&) = delete;
  Work& operator=(const Work&) = delete;

  // Blocks until the operation finished, then rethrows its error, if any. timeout_s < 0 waits
  // up to the group's timeout (plus a margin: the operation fails on its own first). If the
  // wait itself runs out, throws TimeoutError; the operation keeps running.
  void wait(double timeout_s = -1);
  // wait() for at most `timeout_s`: false (no exception) while the operation still runs.
  bool wait_for(double timeout_s);
  // True once the operation finished, successfully or not. Never blocks, never throws.
  bool test() const;
  // True once finished without error.
  bool ok() const;
  // The operation's error (null while running or after success).
  std::exception_ptr error() const;
  std::string error_message() const;  // "" when none

  OpType op() const { return op_; }
  uint64_t seq() const { return seq_; }  // the group's sequence number of this operation

  // Called by the communication thread exactly once.
  void finish(std::exception_ptr err = nullptr);

 private:
  OpType op_;
  uint64_t seq_;
  double default_timeout_s_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::exception_ptr err_;
};

using WorkPtr = std::shared_ptr<Work>;

// Nanoseconds the calling thread has spent blocked in communication so far: in Work::wait
// and in sync collectives run on it. A trainer subtracts it from its step time to get the
// time it computed (straggler detection, diag/straggler.h).
int64_t thread_blocked_ns();
void add_thread_blocked_ns(int64_t ns);

}  // namespace strata::comm
