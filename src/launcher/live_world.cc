#include "launcher/live_world.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <mutex>
#include <sstream>
#include <thread>

#include "comm/tcp/store.h"
#include "core/env.h"
#include "core/error.h"
#include "core/files.h"
#include "core/timer.h"

namespace strata::launcher {

using namespace strata::comm;  // the communication layer this launcher starts ranks of

static const EnvVar kLiveFile("STRATA_LIVE_FILE", "",
                              "where the launcher of a --recovery live job on one host posts the "
                              "world the survivors of a rank's death re-form; set by the launcher");

static const EnvVar kLiveKey("STRATA_LIVE_KEY", "",
                             "across hosts: the prefix of the keys in the job's store (STRATA_STORE) "
                             "where the launcher of a --recovery live job posts the world; set by "
                             "the launcher");

static const EnvVar kLiveId("STRATA_LIVE_ID", "0",
                            "how the launcher of a --recovery live job names this process in the "
                            "worlds it posts; set by the launcher (0: the process id)");

static const EnvVar kLiveJoin("STRATA_LIVE_JOIN", "0",
                              "in a replacement rank of a --recovery live job: the world generation "
                              "after which it joins the survivors; set by the launcher");

static const EnvVar kLiveReplaces("STRATA_LIVE_REPLACES", "-1",
                                  "in a replacement rank of a --recovery live job: the launched rank "
                                  "it stands for (its place in its replica group); set by the launcher");

LiveBoard live_board_of_files(const std::string& path) {
  auto file = [path](const std::string& name) { return name == "world" ? path : cat(path, ".", name); };
  LiveBoard b;
  b.put = [file](const std::string& name, const std::string& text) { atomic_write_file(file(name), text); };
  b.get = [file](const std::string& name) -> std::optional<std::string> {
    std::ifstream f(file(name));
    if (!f) return std::nullopt;
    std::ostringstream s;
    s << f.rdbuf();
    return s.str();
  };
  return b;
}

LiveBoard live_board_of_store(comm::tcp::StoreServer& store, const std::string& prefix) {
  LiveBoard b;
  b.put = [&store, prefix](const std::string& name, const std::string& text) { store.set(prefix + name, text); };
  b.get = [&store, prefix](const std::string& name) { return store.get(prefix + name); };
  b.give_up = [&store](const std::string& job, const std::string& why) { store.set(job + "/abort", why); };
  return b;
}

LiveBoard* rank_live_board() {
  static std::once_flag once;
  static std::unique_ptr<LiveBoard> board;
  std::call_once(once, [] {
    if (!kLiveFile.get().empty()) {
      board = std::make_unique<LiveBoard>(live_board_of_files(kLiveFile.get()));
    } else if (!kLiveKey.get().empty()) {
      const std::string address = comm::tcp::store_address();
      STRATA_CHECK(!address.empty(), "STRATA_LIVE_KEY is set, but no STRATA_STORE names the job's store");
      // One connection, used by one thread at a time (the training thread).
      auto client = std::make_shared<comm::tcp::StoreClient>(address, 30.0);
      auto mu = std::make_shared<std::mutex>();
      const std::string prefix = kLiveKey.get();
      board = std::make_unique<LiveBoard>();
      board->put = [client, mu, prefix](const std::string& name, const std::string& text) {
        std::lock_guard<std::mutex> lock(*mu);
        client->set(prefix + name, text);
      };
      board->get = [client, mu, prefix](const std::string& name) {
        std::lock_guard<std::mutex> lock(*mu);
        return client->try_get(prefix + name);
      };
    }
  });
  return board.get();
}

int64_t live_self_id() {
  const int64_t id = kLiveId.get_int();
  return id > 0 ? id : int64_t(getpid());
}

std::string live_ready_mark(int64_t id) { return cat("ready-", id); }
std::string live_formed_mark(int generation) { return cat("formed-", generation); }
std::string live_broken_mark(int generation, int64_t id) { return cat("broken-", generation, "-", id); }

int live_join_generation() { return int(kLiveJoin.get_int()); }

int live_replaced_rank() { return int(kLiveReplaces.get_int()); }

void announce_live_join() {
  LiveBoard* b = rank_live_board();
  STRATA_CHECK(b, "STRATA_LIVE_JOIN is set, but neither STRATA_LIVE_FILE nor STRATA_LIVE_KEY names "
               "the job's live board");
  b->put(live_ready_mark(live_self_id()), "ready\n");
}

void announce_live_world_formed(int generation) {
  if (LiveBoard* b = rank_live_board()) b->put(live_formed_mark(generation), "formed\n");
}

void announce_live_world_broken(int generation) {
  if (LiveBoard* b = rank_live_board()) b->put(live_broken_mark(generation, live_self_id()), "broken\n");
}

void write_live_world(const LiveBoard& board, int generation, const std::string& job, int from,
                      const std::string& failure, const std::vector<LiveMember>& members) {
  std::string text = cat("generation ", generation, "\nworld ", members.size(), "\njob ", job,
                         "\nfrom ", from, "\nfailure ", failure, "\n");
  for (size_t r = 0; r < members.size(); ++r)
    text += cat("id ", members[r].id, " rank ", r, " local ", members[r].local_rank, " ",
                members[r].local_world, "\n");
  board.put("world", text);
}

std::optional<LiveWorld> read_live_world(const LiveBoard& board) {
  const std::optional<std::string> text = board.get("world");
  if (!text) return std::nullopt;
  std::istringstream f(*text);
  LiveWorld w;
  const int64_t me = live_self_id();
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
    } else if (key == "id") {
      int64_t id = 0;
      std::string word, local;
      int rank = -1, local_rank = -1, local_world = 0;
      in >> id >> word >> rank >> local >> local_rank >> local_world;
      if (id == me) w.rank = rank, w.local_rank = local_rank, w.local_world = local_world;
    }
  }
  if (w.generation <= 0 || w.world <= 0 || w.job.empty()) return std::nullopt;
  if (w.rank >= 0 && (w.local_rank < 0 || w.local_world <= w.local_rank)) return std::nullopt;
  return w;
}

std::optional<LiveWorld> read_live_world() {
  LiveBoard* b = rank_live_board();
  return b ? read_live_world(*b) : std::nullopt;
}

std::optional<LiveWorld> wait_for_live_world(int after, double timeout_s, bool joining) {
  LiveBoard* b = rank_live_board();
  if (!b) return std::nullopt;
  const int64_t deadline = now_ns() + int64_t(timeout_s * 1e9);
  for (;;) {
    std::optional<LiveWorld> w = read_live_world(*b);
    if (w && w->generation > after && (w->rank >= 0 || !joining)) return w->rank >= 0 ? w : std::nullopt;
    if (now_ns() > deadline) return std::nullopt;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

void adopt_live_world(const LiveWorld& w) {
  setenv("STRATA_RANK", std::to_string(w.rank).c_str(), 1);
  setenv("STRATA_WORLD_SIZE", std::to_string(w.world).c_str(), 1);
  setenv("STRATA_LOCAL_RANK", std::to_string(w.local_rank).c_str(), 1);
  setenv("STRATA_LOCAL_WORLD_SIZE", std::to_string(w.local_world).c_str(), 1);
  setenv("STRATA_JOB_ID", w.job.c_str(), 1);
}

}  // namespace strata::launcher
