// GroupRuntime: what every backend shares around its Transport. It numbers operations,
// records them in the flight recorder, runs collectives in order on a communication thread
// (or on the caller's thread when a sync op finds the group idle), drives point-to-point
// operations on a second thread, and turns the first failure into a broken group, a
// recorder dump and an abort that peers see.
#pragma once
#include <atomic>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "comm/flight_recorder.h"
#include "comm/transport.h"
#include "comm/work.h"

namespace strata::comm {
class ProcessGroup;
}

namespace strata::comm::detail {

// Seconds from STRATA_TIMEOUT (default 300).
double default_timeout_s();

class GroupRuntime {
 public:
  GroupRuntime(std::unique_ptr<Transport> transport, std::string name, std::vector<int> world_ranks,
               const Options& options);
  ~GroupRuntime();

  int rank() const { return transport_->rank(); }
  int size() const { return transport_->size(); }
  const std::string& name() const { return name_; }
  const std::vector<int>& world_ranks() const { return world_ranks_; }
  Backend backend() const { return transport_->backend(); }
  double timeout_s() const { return timeout_s_; }
  uint64_t next_seq() const { return next_seq_.load(); }
  const Options& options() const { return options_; }
  Transport& transport() { return *transport_; }

  // Assigns the op its sequence number, records it, and runs or queues it. Sync
  // collectives return null (errors are thrown).
  WorkPtr submit(OpDesc op, bool sync);
  std::shared_ptr<ProcessGroup> split(int color, int key, std::string name);

  // Watchdog hooks (any thread, never block).
  // "" when fine; else the problem, with the dump reason in `reason`.
  std::string check_health(std::string& reason);
  // Marks the group failed so every wait inside it gives up at once.
  void fail_from_watchdog(const std::string& reason, const std::string& message);
  // Seconds the running collective has been in flight (0 when idle), and its deadline.
  int64_t inflight_deadline_ns() const { return inflight_deadline_ns_.load(); }
  bool broken() const { return broken_.load(); }
  std::string inflight_description() const;

  // A background group's operations (replicas of in-memory checkpoints) do not count in
  // foreground_ops_in_flight(). Set before its first operation.
  void set_background() { background_ = true; }

 private:
  // Counts in foreground_ops_in_flight() from its construction to its destruction, unless
  // its group is in the background.
  class InFlight {
   public:
    explicit InFlight(bool counted);
    ~InFlight();
    InFlight(const InFlight&) = delete;
    InFlight& operator=(const InFlight&) = delete;

   private:
    bool counted_;
  };
  struct Item {
    explicit Item(bool counted) : in_flight(counted) {}
    OpDesc op;
    WorkPtr work;
    uint64_t rec_id = 0;
    P2PState st;
    InFlight in_flight;
  };
  uint64_t record(const OpDesc& op, const PhaseSnapshot& phase, int64_t t_ns = 0);
  void run_sync(OpDesc op);
  WorkPtr submit_locked_out(OpDesc op, const PhaseSnapshot& phase);
  std::exception_ptr run_collective_op(OpDesc& op, uint64_t rec_id, int64_t start_ns);
  void collective_loop();
  void p2p_loop();
  void finish(Item& item, std::exception_ptr err);
  void on_failure(std::exception_ptr err);
  void fail_p2p(const OpDesc& op, std::exception_ptr err);
  std::exception_ptr broken_error() const;

  std::unique_ptr<Transport> transport_;
  std::string name_;
  std::vector<int> world_ranks_;
  Options options_;
  double timeout_s_;
  const GroupInfo* info_;  // interned in the flight recorder
  std::atomic<uint64_t> next_seq_{0};
  std::atomic<uint64_t> next_p2p_seq_{0};

  // Collectives.
  std::mutex coll_mu_;
  std::condition_variable coll_cv_;
  std::deque<std::unique_ptr<Item>> coll_queue_;
  bool coll_busy_ = false;
  std::thread coll_thread_;

  // Point-to-point.
  std::mutex p2p_mu_;
  std::condition_variable p2p_cv_;
  std::deque<std::unique_ptr<Item>> p2p_incoming_;
  std::thread p2p_thread_;
  std::atomic<int> p2p_active_{0};

  std::atomic<bool> stopping_{false};
  std::atomic<bool> broken_{false};
  bool background_ = false;
  mutable std::mutex err_mu_;
  std::exception_ptr first_error_;
  std::string first_error_msg_;

  std::atomic<int64_t> inflight_deadline_ns_{0};
  std::atomic<uint64_t> inflight_seq_{0};
  std::atomic<int> inflight_op_{-1};

  std::unique_ptr<Transport> split_result_;
  std::vector<int> split_ranks_;
};

}  // namespace strata::comm::detail
