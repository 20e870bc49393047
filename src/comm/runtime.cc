#include "comm/runtime.h"

#include <algorithm>
#include <cmath>

#include "comm/process_group.h"
#include "comm/watchdog.h"
#include "core/env.h"
#include "core/error.h"
#include "core/phase.h"
#include "core/timer.h"
#include "core/trace.h"

namespace strata::comm::detail {

static const EnvVar kTimeout("STRATA_TIMEOUT", "300",
                             "seconds a communication operation may wait for its peers");

double default_timeout_s() {
  const double t = kTimeout.get_double();
  STRATA_CHECK(t > 0 && std::isfinite(t), "STRATA_TIMEOUT=", kTimeout.get(),
               " must be a positive number of seconds");
  return t;
}

static int64_t seconds_to_ns(double s) { return int64_t(s * 1e9); }

GroupRuntime::GroupRuntime(std::unique_ptr<Transport> transport, std::string name,
                           std::vector<int> world_ranks, const Options& options)
    : transport_(std::move(transport)),
      name_(std::move(name)),
      world_ranks_(std::move(world_ranks)),
      options_(options) {
  timeout_s_ = options.timeout_s > 0 ? options.timeout_s : default_timeout_s();
  info_ = flight_recorder().intern(name_, world_ranks_);
  watchdog().watch(this);
}

GroupRuntime::~GroupRuntime() {
  {
    std::unique_lock lk(coll_mu_);
    coll_cv_.wait(lk, [&] { return coll_queue_.empty() && !coll_busy_; });
    stopping_ = true;
  }
  coll_cv_.notify_all();
  {
    std::unique_lock lk(p2p_mu_);
    stopping_ = true;
  }
  p2p_cv_.notify_all();
  transport_->p2p_wake();
  if (coll_thread_.joinable()) coll_thread_.join();
  if (p2p_thread_.joinable()) p2p_thread_.join();
  watchdog().unwatch(this);
  if (!broken_) transport_->detach();
}

std::exception_ptr GroupRuntime::broken_error() const {
  std::lock_guard lk(err_mu_);
  return first_error_;
}

std::string GroupRuntime::inflight_description() const {
  int op = inflight_op_.load();
  if (op < 0) return "idle";
  return cat(op_name(OpType(op)), " seq ", inflight_seq_.load());
}

uint64_t GroupRuntime::record(const OpDesc& op, const PhaseSnapshot& phase, int64_t t_ns) {
  FlightEntry e;
  e.group = info_;
  e.seq = op.seq;
  e.p2p = op.p2p;
  e.op = op.op;
  e.dtype = op.dtype;
  e.redop = op.redop;
  e.count = int64_t(op.count);
  if (!op.counts.empty()) {
    int64_t total = 0;
    for (size_t c : op.counts) total += int64_t(c);
    // v-ops record the sum, the same on every rank (an uneven reduce-scatter is one too: its
    // own block differs per rank, and with more than kMaxCounts ranks no counts are kept).
    bool uneven = std::any_of(op.counts.begin(), op.counts.end(), [&](size_t c) { return c != op.counts[0]; });
    if (op.op == OpType::allgatherv || op.op == OpType::alltoallv || uneven) e.count = total;
    if (op.counts.size() <= size_t(FlightEntry::kMaxCounts)) {
      e.num_counts = int32_t(op.counts.size());
      for (size_t i = 0; i < op.counts.size(); ++i) e.counts[i] = int64_t(op.counts[i]);
    }
  }
  e.peer = op.peer;
  e.root = op.root;
  e.tag = op.tag;
  e.t_scheduled_ns = t_ns ? t_ns : now_ns();
  e.phase = phase;
  return flight_recorder().record(e);
}

namespace {
// Foreground operations in flight; a waiter for none sleeps on the condition variable, which
// the operation that brings the count to 0 notifies when someone waits.
std::atomic<int> g_foreground_ops{0}, g_idle_waiters{0};
std::mutex g_idle_mu;
std::condition_variable g_idle_cv;
}  // namespace

GroupRuntime::InFlight::InFlight(bool counted) : counted_(counted) {
  if (counted_) g_foreground_ops.fetch_add(1);
}

GroupRuntime::InFlight::~InFlight() {
  if (counted_ && g_foreground_ops.fetch_sub(1) == 1 && g_idle_waiters.load() > 0) {
    std::lock_guard lk(g_idle_mu);  // a waiter is either before its check or asleep
    g_idle_cv.notify_all();
  }
}

// Sync collective: when the group is idle it runs right here, with no Work, no queue and
// no thread hand-off (the latency path); otherwise it queues behind the others and waits.
void GroupRuntime::run_sync(OpDesc op) {
  PhaseSnapshot phase = current_phase().get();
  std::unique_lock lk(coll_mu_);
  if (!coll_queue_.empty() || coll_busy_ || broken_) {
    lk.unlock();
    submit_locked_out(std::move(op), phase)->wait();
    return;
  }
  op.seq = next_seq_++;
  coll_busy_ = true;
  lk.unlock();
  const InFlight in_flight(!background_);
  int64_t t0 = now_ns();  // scheduled and started at once
  uint64_t rec = record(op, phase, t0);
  std::exception_ptr err = run_collective_op(op, rec, t0);
  const int64_t t1 = now_ns();
  add_thread_blocked_ns(t1 - t0);
  flight_recorder().update(rec, err ? OpState::failed : OpState::completed, t1);
  lk.lock();
  coll_busy_ = false;
  bool others = !coll_queue_.empty();
  lk.unlock();
  if (others) coll_cv_.notify_all();
  if (err) std::rethrow_exception(err);
}

WorkPtr GroupRuntime::submit(OpDesc op, bool sync) {
  if (sync && !op.p2p) {
    run_sync(std::move(op));
    return nullptr;
  }
  WorkPtr w = submit_locked_out(std::move(op), current_phase().get());
  if (sync) w->wait();
  return w;
}

WorkPtr GroupRuntime::submit_locked_out(OpDesc op, const PhaseSnapshot& phase) {
  auto item = std::make_unique<Item>(!background_);
  std::mutex& mu = op.p2p ? p2p_mu_ : coll_mu_;
  std::unique_lock lk(mu);  // orders sequence numbers with queue positions
  op.seq = op.p2p ? next_p2p_seq_++ : next_seq_++;
  item->work = std::make_shared<Work>(op.op, op.seq, timeout_s_);
  item->rec_id = record(op, phase);
  item->op = std::move(op);
  WorkPtr work = item->work;
  if (broken_) {
    lk.unlock();
    finish(*item, broken_error());
    return work;
  }
  if (item->op.p2p) {
    if (!p2p_thread_.joinable()) p2p_thread_ = std::thread([this] { p2p_loop(); });
    p2p_incoming_.push_back(std::move(item));
    lk.unlock();
    p2p_cv_.notify_one();
    transport_->p2p_wake();
  } else {
    if (!coll_thread_.joinable()) coll_thread_ = std::thread([this] { collective_loop(); });
    coll_queue_.push_back(std::move(item));
    lk.unlock();
    coll_cv_.notify_all();
  }
  return work;
}

void GroupRuntime::finish(Item& item, std::exception_ptr err) {
  flight_recorder().update(item.rec_id, err ? OpState::failed : OpState::completed);
  item.work->finish(err);
}

// Classifies the failure, dumps the recorder once, breaks the group and tells the peers.
void GroupRuntime::on_failure(std::exception_ptr err) {
  std::string reason = "error", msg;
  bool aborted_by_peer = false;
  try {
    std::rethrow_exception(err);
  } catch (const PeerTimeoutError& e) {
    reason = "timeout";
    msg = e.what();
    // Group ranks are not world ranks in a sub-group: the launcher names the world rank.
    if (e.peer() >= 0 && size_t(e.peer()) < world_ranks_.size())
      msg += cat(" (peer: world rank ", world_ranks_[size_t(e.peer())], ")");
  } catch (const TimeoutError& e) {
    reason = "timeout";
    msg = e.what();
  } catch (const PeerDeadError& e) {
    reason = "peer-dead";
    msg = e.what();
  } catch (const PeerAbortError& e) {
    reason = e.reason();
    msg = e.what();
    aborted_by_peer = true;
  } catch (const std::exception& e) {
    msg = e.what();
  }
  bool first = false;
  {
    std::lock_guard lk(err_mu_);
    if (!first_error_) {
      first_error_ = err;
      first_error_msg_ = msg;
      first = true;
    }
  }
  broken_ = true;
  if (!first) return;
  // A failure reported by a peer keeps the peer's reason (and is already in the segment).
  if (!aborted_by_peer) transport_->raise_abort(abort_reason_code(reason), msg);
  flight_recorder().dump_once(reason, msg);
  watchdog().notify_failure(this, reason, msg);
}

// A point-to-point op with a peer that may die (Options::may_die) and did fails alone: the
// group stays usable for the other peers. Any other failure breaks the group.
void GroupRuntime::fail_p2p(const OpDesc& op, std::exception_ptr err) {
  if (options_.peer_may_die(op.peer)) {
    try {
      std::rethrow_exception(err);
    } catch (const PeerDeadError&) {
      return;
    } catch (...) {
    }
  }
  on_failure(err);
}

// Runs one collective on this thread; returns its error (after the failure handling).
std::exception_ptr GroupRuntime::run_collective_op(OpDesc& op, uint64_t rec_id, int64_t start) {
  if (broken_) return broken_error();
  if (!start) start = now_ns();
  op.deadline_ns = start + seconds_to_ns(timeout_s_);
  inflight_seq_ = op.seq;
  inflight_op_ = int(op.op);
  inflight_deadline_ns_ = op.deadline_ns;
  flight_recorder().update(rec_id, OpState::started, start);
  std::exception_ptr err;
  try {
    if (op.op == OpType::split) {
      split_result_ = transport_->split(op, world_ranks_, split_ranks_);
    } else {
      transport_->run_collective(op);
    }
  } catch (...) {
    err = std::current_exception();
  }
  inflight_deadline_ns_ = 0;
  inflight_op_ = -1;
  if (err) {
    flight_recorder().update(rec_id, OpState::failed);  // before the dump
    on_failure(err);
  }
  if (tracer().enabled())
    tracer().add(cat(op_name(op.op), " ", name_, " #", op.seq), "comm", start, now_ns() - start);
  return err;
}

void GroupRuntime::collective_loop() {
  tracer().name_thread("comm " + name_);
  for (;;) {
    std::unique_ptr<Item> item;
    {
      std::unique_lock lk(coll_mu_);
      coll_cv_.wait(lk, [&] { return stopping_ || (!coll_queue_.empty() && !coll_busy_); });
      if (coll_queue_.empty()) return;
      item = std::move(coll_queue_.front());
      coll_queue_.pop_front();
      coll_busy_ = true;
    }
    finish(*item, run_collective_op(item->op, item->rec_id, 0));
    {
      std::lock_guard lk(coll_mu_);
      coll_busy_ = false;
    }
    coll_cv_.notify_all();
  }
}

// Point-to-point engine: advances every pending op without blocking; ops to (or from) the
// same peer progress in order. Sleeps on the transport's doorbell when nothing moved.
void GroupRuntime::p2p_loop() {
  tracer().name_thread("p2p " + name_);
  std::vector<std::unique_ptr<Item>> active;
  int64_t last_peer_check = now_ns();
  for (;;) {
    {
      std::unique_lock lk(p2p_mu_);
      if (active.empty())
        p2p_cv_.wait(lk, [&] { return stopping_ || !p2p_incoming_.empty(); });
      if (stopping_ && active.empty() && p2p_incoming_.empty()) return;
      for (auto& it : p2p_incoming_) {
        it->op.deadline_ns = now_ns() + seconds_to_ns(timeout_s_);
        flight_recorder().update(it->rec_id, OpState::started);
        active.push_back(std::move(it));
      }
      p2p_incoming_.clear();
    }
    bool moved = false;
    transport_->p2p_arm();
    std::vector<std::pair<int, bool>> blocked;  // (peer, is_send) with an earlier pending op
    for (auto& it : active) {
      std::pair<int, bool> key{it->op.peer, it->op.op == OpType::send};
      if (std::find(blocked.begin(), blocked.end(), key) != blocked.end()) continue;
      size_t before = it->st.done_bytes;
      bool was_started = it->st.started;
      std::exception_ptr err;
      if (broken_) {
        err = broken_error();
      } else {
        try {
          if (transport_->p2p_progress(it->op, it->st)) it->st.finished = true;
          if (!it->st.finished && now_ns() > it->op.deadline_ns)
            throw PeerTimeoutError(cat("group ", name_, " ", op_name(it->op.op), " #", it->op.seq,
                                       " with rank ", it->op.peer, " tag ", it->op.tag,
                                       ": timed out after ", timeout_s_, " s (", it->st.done_bytes,
                                       " bytes moved)"),
                                   it->op.peer);
        } catch (...) {
          err = std::current_exception();
        }
      }
      if (err) {
        flight_recorder().update(it->rec_id, OpState::failed);
        fail_p2p(it->op, err);
        finish(*it, err);
        it->st.finished = true;
        it.reset();
        moved = true;
        continue;
      }
      if (it->st.finished) {
        finish(*it, nullptr);
        it.reset();
        moved = true;
        continue;
      }
      if (it->st.done_bytes != before || it->st.started != was_started) moved = true;
      blocked.push_back(key);
    }
    active.erase(std::remove(active.begin(), active.end(), nullptr), active.end());
    if (!moved && !active.empty()) {
      if (now_ns() - last_peer_check > 200'000'000) {
        last_peer_check = now_ns();
        for (auto& it : active) {
          try {
            transport_->p2p_check_peer(it->op);
          } catch (...) {
            std::exception_ptr err = std::current_exception();
            flight_recorder().update(it->rec_id, OpState::failed);
            fail_p2p(it->op, err);
            finish(*it, err);
            it.reset();
          }
        }
        active.erase(std::remove(active.begin(), active.end(), nullptr), active.end());
      }
      transport_->p2p_wait(50'000'000);
    }
  }
}

std::shared_ptr<ProcessGroup> GroupRuntime::split(int color, int key, std::string name) {
  OpDesc op;
  op.op = OpType::split;
  op.color = color;
  op.key = key;
  op.split_name = name.empty() ? cat(name_, ".", color) : name;
  op.count = 1;
  std::unique_lock lk(coll_mu_);
  coll_cv_.wait(lk, [&] { return coll_queue_.empty() && !coll_busy_; });
  lk.unlock();
  WorkPtr w = submit(op, true);
  std::unique_ptr<Transport> t = std::move(split_result_);
  std::vector<int> ranks = std::move(split_ranks_);
  if (!t) return nullptr;
  Options sub = options_;
  sub.may_die.clear();  // numbered by this group's ranks (types.h)
  auto rt = std::make_unique<GroupRuntime>(std::move(t), op.split_name, std::move(ranks), sub);
  return std::make_shared<ProcessGroup>(std::move(rt));
}

std::string GroupRuntime::check_health(std::string& reason) {
  if (broken_) return "";
  return transport_->health(reason);
}

void GroupRuntime::fail_from_watchdog(const std::string& reason, const std::string& message) {
  {
    std::lock_guard lk(err_mu_);
    if (!first_error_) {
      if (reason == "timeout")
        first_error_ = std::make_exception_ptr(TimeoutError(message));
      else if (reason == "peer-dead")
        first_error_ = std::make_exception_ptr(PeerDeadError(message));
      else
        first_error_ = std::make_exception_ptr(PeerAbortError(message, reason));
      first_error_msg_ = message;
    }
  }
  broken_ = true;
  transport_->raise_abort(abort_reason_code(reason), message);
  transport_->p2p_wake();
}

}  // namespace strata::comm::detail

namespace strata::comm {

int foreground_ops_in_flight() { return detail::g_foreground_ops.load(); }

bool wait_foreground_idle(double timeout_s) {
  using namespace detail;
  if (g_foreground_ops.load() == 0) return true;
  g_idle_waiters.fetch_add(1);
  bool idle;
  {
    std::unique_lock lk(g_idle_mu);
    idle = g_idle_cv.wait_for(lk, std::chrono::duration<double>(timeout_s),
                              [] { return g_foreground_ops.load() == 0; });
  }
  g_idle_waiters.fetch_sub(1);
  return idle;
}

}  // namespace strata::comm
