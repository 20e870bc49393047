#include "comm/flight_recorder.h"

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "core/env.h"
#include "core/error.h"
#include "core/timer.h"
#include "nlohmann/json.hpp"

namespace strata::comm {

static const EnvVar kRecorderSize("STRATA_FLIGHT_RECORDER_SIZE", "2000",
                                  "communication operations kept by the flight recorder");
static const EnvVar kDumpDir("STRATA_DUMP_DIR", "",
                             "directory for flight-recorder dumps (default: current directory)");

// Never destroyed, like the tracer (core/trace.cc): the watchdog's thread may dump it while
// the process exits.
FlightRecorder& flight_recorder() {
  static FlightRecorder* r = new FlightRecorder(size_t(std::max<int64_t>(1, kRecorderSize.get_int())));
  return *r;
}

FlightRecorder::FlightRecorder(size_t capacity) : ring_(std::max<size_t>(capacity, 1)) {}

uint64_t FlightRecorder::record(const FlightEntry& e) {
  std::lock_guard lk(mu_);
  uint64_t id = next_id_++;
  FlightEntry& slot = ring_[id % ring_.size()];
  slot = e;
  slot.id = id;
  slot.state = OpState::scheduled;
  return id;
}

void FlightRecorder::update(uint64_t id, OpState state, int64_t t_ns) {
  int64_t t = t_ns ? t_ns : now_ns();
  std::lock_guard lk(mu_);
  FlightEntry& slot = ring_[id % ring_.size()];
  if (slot.id != id) return;  // overwritten by newer ops
  slot.state = state;
  if (state == OpState::started) slot.t_started_ns = t;
  if (state == OpState::completed || state == OpState::failed) slot.t_completed_ns = t;
}

std::vector<FlightEntry> FlightRecorder::snapshot() const {
  std::lock_guard lk(mu_);
  std::vector<FlightEntry> out;
  uint64_t first = next_id_ > ring_.size() ? next_id_ - ring_.size() : 1;
  for (uint64_t id = first; id < next_id_; ++id) {
    const FlightEntry& e = ring_[id % ring_.size()];
    if (e.id == id) out.push_back(e);
  }
  return out;
}

const GroupInfo* FlightRecorder::intern(const std::string& name, const std::vector<int>& ranks) {
  std::lock_guard lk(mu_);
  for (auto& g : groups_)
    if (g->name == name && g->world_ranks == ranks) return g.get();
  groups_.push_back(std::make_unique<GroupInfo>(GroupInfo{name, ranks}));
  return groups_.back().get();
}

void FlightRecorder::set_identity(int rank, int world) {
  std::lock_guard lk(mu_);
  rank_ = rank;
  world_ = world;
}

static nlohmann::json phase_json(const PhaseSnapshot& p) {
  return {{"step", p.step}, {"layer", p.layer}, {"kind", phase_name(p.kind)}};
}

nlohmann::json FlightRecorder::to_json(const std::string& reason, const std::string& detail) const {
  std::vector<FlightEntry> entries = snapshot();
  char host[256] = {0};
  gethostname(host, sizeof host - 1);
  nlohmann::json j;
  {
    std::lock_guard lk(mu_);
    j["rank"] = rank_;
    j["world"] = world_;
  }
  j["pid"] = int(getpid());
  j["host"] = host;
  j["reason"] = reason;
  j["detail"] = detail;
  j["time_ns"] = now_ns();
  j["phase"] = phase_json(current_phase().get());
  j["recorder_capacity"] = ring_.size();
  nlohmann::json arr = nlohmann::json::array();
  for (const FlightEntry& e : entries) {
    nlohmann::json x;
    x["id"] = e.id;
    x["group"] = e.group ? e.group->name : "?";
    x["group_ranks"] = e.group ? e.group->world_ranks : std::vector<int>{};
    x["seq"] = e.seq;
    x["p2p"] = e.p2p;
    x["op"] = op_name(e.op);
    x["dtype"] = dtype_name(e.dtype);
    x["count"] = e.count;
    if (e.num_counts > 0)
      x["counts"] = std::vector<int64_t>(e.counts, e.counts + e.num_counts);
    x["peer"] = e.peer;
    x["tag"] = e.tag;
    x["root"] = e.root;
    x["redop"] = reduce_op_name(e.redop);
    x["state"] = op_state_name(e.state);
    x["t_scheduled_ns"] = e.t_scheduled_ns;
    x["t_started_ns"] = e.t_started_ns;
    x["t_completed_ns"] = e.t_completed_ns;
    x["phase"] = phase_json(e.phase);
    arr.push_back(std::move(x));
  }
  j["entries"] = std::move(arr);
  return j;
}

std::string FlightRecorder::dump(const std::string& reason, const std::string& detail,
                                 const std::string& dir_in) const {
  std::string dir = !dir_in.empty() ? dir_in : kDumpDir.is_set() ? kDumpDir.get() : ".";
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  int r;
  {
    std::lock_guard lk(mu_);
    r = rank_;
  }
  std::string path = dir + "/flight-rank" + std::to_string(r) + ".json";
  std::string tmp = path + ".tmp." + std::to_string(getpid());
  {
    std::ofstream f(tmp);
    STRATA_CHECK(f.good(), "cannot write flight-recorder dump ", tmp);
    f << to_json(reason, detail).dump(1) << "\n";
    STRATA_CHECK(f.good(), "cannot write flight-recorder dump ", tmp);
  }
  STRATA_CHECK(std::rename(tmp.c_str(), path.c_str()) == 0, "cannot rename ", tmp, " to ", path);
  return path;
}

bool FlightRecorder::dumped() const {
  std::lock_guard lk(mu_);
  return dumped_;
}

void FlightRecorder::rearm() {
  std::lock_guard lk(mu_);
  dumped_ = false;
}

std::string FlightRecorder::dump_once(const std::string& reason, const std::string& detail) {
  // Held across the write: a second caller (the watchdog about to re-raise a launcher's
  // SIGTERM) must not return, and let the process die, before the first dump is on disk.
  std::lock_guard dump_lk(dump_mu_);
  {
    std::lock_guard lk(mu_);
    if (dumped_) return "";
    dumped_ = true;
  }
  try {
    std::string path = dump(reason, detail);
    std::fprintf(stderr, "strata: rank %d: %s: %s; flight recorder written to %s\n", rank_,
                 reason.c_str(), detail.c_str(), path.c_str());
    return path;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "strata: rank %d: could not write the flight recorder: %s\n", rank_,
                 e.what());
    return "";
  }
}

}  // namespace strata::comm
