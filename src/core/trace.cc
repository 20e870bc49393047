#include "core/trace.h"

#include <pthread.h>
#include <unistd.h>

#include <atomic>
#include <fstream>
#include <thread>

#include "core/error.h"
#include "core/files.h"
#include "nlohmann/json.hpp"

namespace strata {

// Never destroyed: threads that outlive main's static objects name themselves here (the
// comm watchdog's thread, joined only by its own static's destructor, may start as late as
// that; a destroyed tracer's vector was then freed twice, "double free or corruption").
Tracer& tracer() {
  static Tracer* t = new Tracer;
  return *t;
}

int Tracer::thread_id() {
  static std::atomic<int> next{0};
  thread_local int id = next++;
  return id;
}

void Tracer::name_thread(const std::string& name) {
  // The OS keeps 15 bytes: what top -H, ps -L, perf and gdb show. Not the main thread's:
  // that is the process's name (ps, pgrep).
  if (::gettid() != ::getpid()) pthread_setname_np(pthread_self(), name.substr(0, 15).c_str());
  int id = thread_id();
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [tid, n] : thread_names_)
    if (tid == id) {
      n = name;
      return;
    }
  thread_names_.emplace_back(id, name);
}

void Tracer::add(std::string name, std::string cat, int64_t start_ns, int64_t dur_ns,
                 std::string args_json) {
  if (!enabled_) return;
  int id = thread_id();
  std::lock_guard<std::mutex> lock(mu_);
  events_.push_back({std::move(name), std::move(cat), start_ns, dur_ns, id, std::move(args_json)});
}

std::vector<TraceEvent> Tracer::events() const {
  std::lock_guard<std::mutex> lock(mu_);
  return events_;
}

void Tracer::write(const std::string& path) const {
  nlohmann::json ev = nlohmann::json::array();
  std::lock_guard<std::mutex> lock(mu_);
  ev.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", rank_},
                {"args", {{"name", cat("rank ", rank_)}}}});
  for (auto& [tid, n] : thread_names_)
    ev.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", rank_}, {"tid", tid},
                  {"args", {{"name", n}}}});
  for (const TraceEvent& e : events_) {
    nlohmann::json j = {{"name", e.name}, {"cat", e.cat},      {"ph", "X"},
                        {"pid", rank_},   {"tid", e.tid},      {"ts", double(e.start_ns) / 1e3},
                        {"dur", double(e.dur_ns) / 1e3}};
    if (!e.args.empty()) j["args"] = nlohmann::json::parse(e.args);
    ev.push_back(std::move(j));
  }
  atomic_write_file(path, nlohmann::json{{"traceEvents", ev}, {"displayTimeUnit", "ms"}}.dump());
}

}  // namespace strata
