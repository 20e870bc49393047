// Chrome trace events (the JSON that Perfetto and chrome://tracing open), one file per rank.
// Disabled tracers cost one branch per span. Spans are "complete" events (ph "X") on the
// thread that records them; threads get readable names (e.g. "compute", "comm").
//
//   if (tracer.enabled()) { TraceSpan s(tracer, "forward L3", "compute"); ... }
#pragma once
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "core/timer.h"
#include "nlohmann/json_fwd.hpp"

namespace strata {

struct TraceEvent {
  std::string name, cat;
  int64_t start_ns, dur_ns;
  int tid;
  std::string args;  // JSON object text, or empty
};

class Tracer {
 public:
  void enable(int rank) { enabled_ = true; rank_ = rank; }
  bool enabled() const { return enabled_; }
  int rank() const { return rank_; }
  // Names the calling thread's track (e.g. "compute", "comm") and the thread itself (its
  // first 15 bytes: what top -H, ps -L and perf show), enabled or not.
  void name_thread(const std::string& name);
  void add(std::string name, std::string cat, int64_t start_ns, int64_t dur_ns,
           std::string args_json = {});
  // Writes {"traceEvents": [...], "displayTimeUnit": "ms"} with pid = rank; times in us.
  void write(const std::string& path) const;
  std::vector<TraceEvent> events() const;

 private:
  int thread_id();
  bool enabled_ = false;
  int rank_ = 0;
  mutable std::mutex mu_;
  std::vector<TraceEvent> events_;
  std::vector<std::pair<int, std::string>> thread_names_;
};

// The process's tracer (one per rank process).
Tracer& tracer();

class TraceSpan {
 public:
  TraceSpan(Tracer& t, std::string name, std::string cat)
      : t_(t), name_(std::move(name)), cat_(std::move(cat)), start_(t.enabled() ? now_ns() : 0) {}
  ~TraceSpan() {
    if (t_.enabled()) t_.add(std::move(name_), std::move(cat_), start_, now_ns() - start_);
  }
  TraceSpan(const TraceSpan&) = delete;
  TraceSpan& operator=(const TraceSpan&) = delete;

 private:
  Tracer& t_;
  std::string name_, cat_;
  int64_t start_;
};

}  // namespace strata
