#include "comm/runtime.h"

#include <algorithm>

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

double default_timeout_s() { return kTimeout.get_double(); }

static int64_t seconds_to_ns(double s) { return int64_t(s * 1e9); }

GroupRuntime::GroupRuntime(std::unique_ptr<Transport> transport, std::string name,
                           std::vector<int> world_ranks, const Options& options)
    : transport_(std::move(transport)),
      name_(std::move(name)),
      world_ranks_(std::move(world_ranks)),
      options_(options) {
  timeout_s_ = options.timeout_s > 0 ? options.timeout_s : kTimeout.get_double();
  STRATA_CHECK(timeout_s_ > 0, "communication timeout must be positive (STRATA_TIMEOUT=",
               kTimeout.get(), ")");
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

WorkPtr GroupRuntime::submit(OpDesc op, bool sync) {
  auto item = std::make_unique<Item>();
  PhaseSnapshot phase = current_phase().get();
  std::unique_lock submit_lk(submit_mu_);
  op.seq = op.p2p ? next_p2p_seq_++ : next_seq_++;
  item->work = std::make_shared<Work>(op.op, op.seq, timeout_s_);
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
    if (op.op == OpType::allgatherv || op.op == OpType::alltoallv) e.count = total;
    if (op.counts.size() <= size_t(FlightEntry::kMaxCounts)) {
      e.num_counts = int32_t(op.counts.size());
      for (size_t i = 0; i < op.counts.size(); ++i) e.counts[i] = int64_t(op.counts[i]);
    }
  }
  e.peer = op.peer;
  e.root = op.root;
  e.tag = op.tag;
  e.t_scheduled_ns = now_ns();
  e.phase = phase;
  item->rec_id = flight_recorder().record(e);
  item->op = std::move(op);
  WorkPtr work = item->work;

  if (broken_) {
    finish(*item, broken_error());
    if (sync) work->wait();  // rethrows
    return work;
  }
  if (item->op.p2p) {
    {
      std::lock_guard lk(p2p_mu_);
      if (!p2p_thread_.joinable()) p2p_thread_ = std::thread([this] { p2p_loop(); });
      p2p_incoming_.push_back(std::move(item));
    }
    submit_lk.unlock();
    p2p_cv_.notify_one();
    transport_->p2p_wake();
  } else {
    std::unique_lock lk(coll_mu_);
    if (sync && coll_queue_.empty() && !coll_busy_) {
      // The group is idle: run on the caller's thread (no hand-off latency).
      coll_busy_ = true;
      lk.unlock();
      submit_lk.unlock();
      run_collective_item(*item);
      lk.lock();
      coll_busy_ = false;
      lk.unlock();
      coll_cv_.notify_all();
    } else {
      if (!coll_thread_.joinable()) coll_thread_ = std::thread([this] { collective_loop(); });
      coll_queue_.push_back(std::move(item));
      lk.unlock();
      submit_lk.unlock();
      coll_cv_.notify_all();
    }
  }
  if (sync) work->wait();
  return work;
}

void GroupRuntime::finish(Item& item, std::exception_ptr err) {
  flight_recorder().update(item.rec_id, err ? OpState::failed : OpState::completed);
  item.work->finish(err);
}

// Classifies the failure, dumps the recorder once, breaks the group and tells the peers.
void GroupRuntime::on_failure(const Item& item, std::exception_ptr err) {
  std::string reason = "error", msg;
  bool aborted_by_peer = false;
  try {
    std::rethrow_exception(err);
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

void GroupRuntime::run_collective_item(Item& item) {
  if (broken_) {
    finish(item, broken_error());
    return;
  }
  int64_t start = now_ns();
  item.op.deadline_ns = start + seconds_to_ns(timeout_s_);
  inflight_seq_ = item.op.seq;
  inflight_op_ = int(item.op.op);
  inflight_deadline_ns_ = item.op.deadline_ns;
  flight_recorder().update(item.rec_id, OpState::started);
  std::exception_ptr err;
  try {
    if (item.op.op == OpType::split) {
      split_result_ = transport_->split(item.op, world_ranks_, split_ranks_);
    } else {
      transport_->run_collective(item.op);
    }
  } catch (...) {
    err = std::current_exception();
  }
  inflight_deadline_ns_ = 0;
  inflight_op_ = -1;
  if (err) {
    flight_recorder().update(item.rec_id, OpState::failed);  // before the dump
    on_failure(item, err);
  }
  if (tracer().enabled())
    tracer().add(cat(op_name(item.op.op), " ", name_, " #", item.op.seq), "comm", start,
                 now_ns() - start);
  finish(item, err);
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
    run_collective_item(*item);
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
            throw TimeoutError(cat("group ", name_, " ", op_name(it->op.op), " #", it->op.seq,
                                   " with rank ", it->op.peer, " tag ", it->op.tag,
                                   ": timed out after ", timeout_s_, " s (", it->st.done_bytes,
                                   " bytes moved)"));
        } catch (...) {
          err = std::current_exception();
        }
      }
      if (err) {
        flight_recorder().update(it->rec_id, OpState::failed);
        on_failure(*it, err);
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
            on_failure(*it, err);
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
  auto rt = std::make_unique<GroupRuntime>(std::move(t), op.split_name, std::move(ranks), options_);
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
