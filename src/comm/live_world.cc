#include "comm/live_world.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <thread>

#include "core/env.h"
#include "core/error.h"
#include "core/files.h"
#include "core/timer.h"

namespace strata::comm {

static const EnvVar kLiveFile("STRATA_LIVE_FILE", "",
                              "where the launcher of a --recovery live job writes the world the "
                              "survivors of a rank's death re-form; set by the launcher");

static const EnvVar kLiveJoin("STRATA_LIVE_JOIN", "0",
                              "in a replacement rank of a --recovery live job: the world generation "
                              "after which it joins the survivors; set by the launcher");

std::string live_world_file() { return kLiveFile.get(); }

std::string live_ready_file(const std::string& path, int64_t pid) {
  return cat(path, ".ready-", pid);
}

int live_join_generation() { return int(kLiveJoin.get_int()); }

void announce_live_join() {
  const std::string path = live_world_file();
  STRATA_CHECK(!path.empty(), "STRATA_LIVE_JOIN is set, but no STRATA_LIVE_FILE names the job's world");
  atomic_write_file(live_ready_file(path, getpid()), "ready\n");
}

std::string live_formed_file(const std::string& path, int generation) {
  return cat(path, ".formed-", generation);
}

void announce_live_world_formed(int generation) {
  const std::string path = live_world_file();
  if (!path.empty()) atomic_write_file(live_formed_file(path, generation), "formed\n");
}

std::string live_broken_file(const std::string& path, int generation, int64_t pid) {
  return cat(path, ".broken-", generation, "-", pid);
}

void announce_live_world_broken(int generation) {
  const std::string path = live_world_file();
  if (!path.empty()) atomic_write_file(live_broken_file(path, generation, getpid()), "broken\n");
}

void write_live_world(const std::string& path, int generation, const std::string& job, int from,
                      const std::string& failure, const std::vector<int64_t>& pids) {
  std::string text = cat("generation ", generation, "\nworld ", pids.size(), "\njob ", job,
                         "\nfrom ", from, "\nfailure ", failure, "\n");
  for (size_t r = 0; r < pids.size(); ++r) text += cat("pid ", pids[r], " rank ", r, "\n");
  atomic_write_file(path, text);
}

std::optional<LiveWorld> read_live_world(const std::string& path) {
  std::ifstream f(path);
  if (!f) return std::nullopt;
  LiveWorld w;
  const int64_t me = getpid();
  std::string line;
  while (std::getline(f, line)) {
    std::istringstream in(line);
    std::string key;
    in >> key;
    if (key == "generation") {
      in >> w.generation;
    } else if (key == "world") {
      in >> w.world;
    } else if (key == "job") {
      in >> w.job;
    } else if (key == "from") {
      in >> w.from;
    } else if (key == "failure") {
      std::getline(in >> std::ws, w.failure);
    } else if (key == "pid") {
      int64_t pid = 0;
      std::string word;
      int rank = -1;
      in >> pid >> word >> rank;
      if (pid == me) w.rank = rank;
    }
  }
  if (w.generation <= 0 || w.world <= 0 || w.job.empty()) return std::nullopt;
  return w;
}

std::optional<LiveWorld> wait_for_live_world(int after, double timeout_s) {
  const std::string path = live_world_file();
  if (path.empty()) return std::nullopt;
  const int64_t deadline = now_ns() + int64_t(timeout_s * 1e9);
  for (;;) {
    std::optional<LiveWorld> w = read_live_world(path);
    if (w && w->generation > after) return w->rank >= 0 ? w : std::nullopt;
    if (now_ns() > deadline) return std::nullopt;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

void adopt_live_world(const LiveWorld& w) {
  const std::string rank = std::to_string(w.rank), world = std::to_string(w.world);
  setenv("STRATA_RANK", rank.c_str(), 1);
  setenv("STRATA_WORLD_SIZE", world.c_str(), 1);
  setenv("STRATA_LOCAL_RANK", rank.c_str(), 1);
  setenv("STRATA_LOCAL_WORLD_SIZE", world.c_str(), 1);
  setenv("STRATA_JOB_ID", w.job.c_str(), 1);
}

}  // namespace strata::comm
