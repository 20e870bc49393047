// What the live-recovery tests share (test_live_recovery.cc on one host, test_live_hosts.cc
// across namespace hosts): the run, its records, and what a finished job must not leave.
#pragma once
#include <gtest/gtest.h>
#include <dirent.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "ckpt/mem_slots.h"
#include "cli_util.h"
#include "core/error.h"

namespace strata::test {

// `steps` steps of a 1-layer model; --batch 12 splits over 4, 3 and 2 ranks alike.
inline std::string live_run(const std::string& run_dir, const std::string& extra, int steps = 8) {
  return "train --layers 1 --dim 32 --heads 2 --max-seq 16 --seq 16 --vocab 256 --batch 12 --steps " +
         std::to_string(steps) + " --warmup 2 --lr 1e-2 --threads 1 --sample-tokens 0 --eval-every 0 "
         "--eval-batches 1 --peak-gflops 1 --timeout 20 --run-dir " + run_dir + " " + extra;
}

// The step the `nth` live recovery line continues from: N of "from the in-memory copy of
// step N", 0 of "from step 0 (no step has a complete in-memory copy ...)"; -1 when there is no
// such line or it says neither (only that line is read).
inline int64_t live_resume_step(const std::string& err, int nth = 0) {
  const std::string key = "strata train: live recovery: ";
  size_t at = err.find(key);
  for (int i = 0; i < nth && at != std::string::npos; ++i) at = err.find(key, at + 1);
  if (at == std::string::npos) return -1;
  const std::string line = err.substr(at, err.find('\n', at) - at);
  if (line.find("from step 0 (no step has a complete in-memory copy") != std::string::npos) return 0;
  const std::string from = "from the in-memory copy of step ";
  const size_t s = line.find(from);
  return s == std::string::npos ? -1 : std::stoll(line.substr(s + from.size()));
}

// Objects in /dev/shm whose name contains `part`.
inline std::vector<std::string> shm_objects(const std::string& part) {
  std::vector<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator("/dev/shm"))
    if (e.path().filename().string().find(part) != std::string::npos) out.push_back(e.path().string());
  return out;
}

// The 16 hex digits that name `run_dir`'s in-memory segments.
inline std::string segment_key(const std::string& run_dir) {
  const std::string key =
      std::filesystem::weakly_canonical(std::filesystem::absolute(run_dir)).string();
  const std::string name = ckpt::MemSegment::name_for(key, 0);  // "/strata-mem-<hex>-rank0"
  return name.substr(std::strlen("/strata-mem-"), 16);
}

// Processes whose command line mentions `part` (a run directory), other than this one.
inline std::vector<std::string> processes_naming(const std::string& part) {
  std::vector<std::string> out;
  DIR* d = opendir("/proc");
  while (dirent* e = d ? readdir(d) : nullptr) {
    if (!std::isdigit(static_cast<unsigned char>(e->d_name[0]))) continue;
    std::ifstream f(std::string("/proc/") + e->d_name + "/cmdline", std::ios::binary);
    std::string cmd((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    if (cmd.find(part) != std::string::npos && std::stoi(e->d_name) != getpid())
      out.push_back(std::string(e->d_name) + ": " + cmd);
  }
  if (d) closedir(d);
  return out;
}

// After the job: no in-memory segment of `run` and no process naming it.
inline void expect_nothing_left(const std::string& run, const std::string& why) {
  EXPECT_EQ(shm_objects(segment_key(run)), std::vector<std::string>{}) << why;
  EXPECT_EQ(processes_naming(run), std::vector<std::string>{}) << why;
}

// metrics.jsonl of `run` records each of its `steps` steps once, in order.
inline void expect_every_step_once(const std::string& run, int steps, const std::string& why) {
  const std::vector<nlohmann::json> records = step_records(run + "/metrics.jsonl");
  ASSERT_EQ(records.size(), size_t(steps)) << why;
  for (int s = 0; s < steps; ++s) EXPECT_EQ(records[size_t(s)]["step"], s + 1) << why;
}

// The losses (and tokens) of the run's step records, by step.
inline std::vector<std::pair<double, int64_t>> steps_of(const std::string& run_dir) {
  std::vector<std::pair<double, int64_t>> out;
  for (const nlohmann::json& j : step_records(run_dir + "/metrics.jsonl"))
    out.push_back({j["loss"].get<double>(), j["tokens"].get<int64_t>()});
  return out;
}

// --replica-groups: each step's group losses (null: a group the world lacked), by step.
inline std::vector<nlohmann::json> group_losses(const std::string& run_dir) {
  std::vector<nlohmann::json> out;
  for (const nlohmann::json& j : step_records(run_dir + "/metrics.jsonl")) out.push_back(j.at("group_losses"));
  return out;
}

// Process ids of `parent`'s children.
inline std::vector<pid_t> children_of(pid_t parent) {
  std::vector<pid_t> out;
  DIR* d = opendir("/proc");
  while (dirent* e = d ? readdir(d) : nullptr) {
    if (!std::isdigit(static_cast<unsigned char>(e->d_name[0]))) continue;
    std::ifstream f(std::string("/proc/") + e->d_name + "/stat");
    std::string stat((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    const size_t close = stat.rfind(')');
    if (close == std::string::npos) continue;
    char state = 0;
    int ppid = 0;
    if (std::sscanf(stat.c_str() + close + 1, " %c %d", &state, &ppid) == 2 && ppid == parent && state != 'Z')
      out.push_back(pid_t(std::stoi(e->d_name)));
  }
  if (d) closedir(d);
  return out;
}

// How often `text` occurs in the file at `path` (read as it is being written).
inline int occurrences(const std::string& path, const std::string& text) {
  std::ifstream f(path);
  const std::string all((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  int n = 0;
  for (size_t at = all.find(text); at != std::string::npos; at = all.find(text, at + 1)) ++n;
  return n;
}

// The newest step record of a metrics.jsonl being written (0: none yet); its last 8 KiB are
// enough (polled often, the file grows by a record a step).
inline int64_t newest_step(const std::string& metrics) {
  std::ifstream f(metrics, std::ios::ate);
  if (!f) return 0;
  const std::streamoff size = f.tellg();
  f.seekg(std::max<std::streamoff>(0, size - 8192));
  std::string line;
  int64_t step = 0;
  while (std::getline(f, line)) {
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    if (!j.is_discarded() && j.contains("loss")) step = j["step"].get<int64_t>();
  }
  return step;
}

// Deals a seeded schedule of `kills` SIGKILLs to the job `p` (a `strata train --recovery live`
// launcher whose children are its `world` ranks, metrics in `run`): each time the world is
// whole again (the k-th join loaded), a random rank is killed a random 1-3 steps later. False,
// with the test failed and the job killed, when it ended first or a wait passed 60 s.
inline bool deal_seeded_kills(Proc& p, const std::string& run, int world, int kills, std::mt19937& gen,
                              const std::string& why) {
  auto wait_until = [&](const std::function<bool()>& done, const std::string& what) {
    for (int i = 0; i < 6000 && !done(); ++i) {
      if (waitpid(p.pid, &p.status, WNOHANG) != 0) {
        ADD_FAILURE() << "the job ended (status " << p.status << ") while waiting for " << what << "; "
                      << why << "\n" << read_file(p.err_path);
        return false;
      }
      usleep(10000);
    }
    if (done()) return true;
    ADD_FAILURE() << "no " << what << " within 60 s; " << why << "\n" << read_file(p.err_path);
    kill(p.pid, SIGKILL);  // its ranks die with it (PR_SET_PDEATHSIG)
    wait_for(p, 10);
    return false;
  };
  for (int k = 0; k < kills; ++k) {
    if (!wait_until([&] { return occurrences(p.err_path, "strata train: live recovery: a replacement") >= k; },
                    cat("join ", k)))
      return false;
    const int64_t at = newest_step(run + "/metrics.jsonl") + std::uniform_int_distribution<int>(1, 3)(gen);
    if (!wait_until([&] { return newest_step(run + "/metrics.jsonl") >= at; }, cat("step ", at))) return false;
    const std::vector<pid_t> ranks = children_of(p.pid);
    if (ranks.size() != size_t(world)) {
      ADD_FAILURE() << ranks.size() << " ranks running when the world should be whole; " << why;
      kill(p.pid, SIGKILL);
      wait_for(p, 10);
      return false;
    }
    if (kill(ranks[size_t(std::uniform_int_distribution<int>(0, world - 1)(gen))], SIGKILL) != 0) {
      ADD_FAILURE() << "kill failed; " << why;
      return false;
    }
  }
  return true;
}

}  // namespace strata::test
