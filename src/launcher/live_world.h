// Live recovery's world (`strata train --recovery shrink|live`): when a rank of a live job
// dies, its launcher does not stop the others; it posts the world they re-form on the job's
// live board: files beside the job's shared-memory objects on one host (STRATA_LIVE_FILE), or
// keys of the job's rendezvous store across hosts (STRATA_LIVE_KEY, with STRATA_STORE: the
// tcp backend, comm/tcp/store.h). The world is a small text:
//
//   generation 1                  worlds re-formed so far
//   world 3                       ranks of the new world
//   job host-123-abcd             a fresh STRATA_JOB_ID: the new world's groups
//   from 4                        ranks of the world whose in-memory copies it continues from
//   failure rank 1 was killed by signal 9 (Killed)
//   id 1 rank 0 local 0 2         every survivor by its STRATA_LIVE_ID (its process id where the
//   id 3 rank 1 local 1 2         launcher set none): its new rank, and its local rank and the
//   id 4 rank 2 local 0 1         ranks of the new world on its host
//
// Under tp, cp or pp the unit is a data-parallel replica (the ranks of one dp index): the
// launcher kills the rest of a dead rank's replica and lists the survivors in mesh rank order,
// so each keeps its tp rank and stage; a replica of replacements joins as the last dp index.
//
// A survivor whose group broke waits for a generation newer than its own that names it, takes
// its new coordinates into its environment (STRATA_RANK, STRATA_WORLD_SIZE, STRATA_LOCAL_*,
// STRATA_JOB_ID) and joins the new world with init_from_env. A file board replaces the file
// atomically (write, then rename) and a store sets one key, so a reader sees one generation or
// the next.
//
// Rejoin: the launcher then starts a replacement with STRATA_LIVE_JOIN=<generation> (and
// STRATA_LIVE_REPLACES, the launched rank it stands for: under --replica-groups, its group). Once it
// has built what it can alone it announces itself (mark ready-<id>); once the survivors' world
// has formed too (rank 0's mark formed-<generation>), the launcher posts the next generation,
// the survivors and the replacement, last; the survivors see it at a step boundary (rank 0
// reads the board, one all-reduce tells the rest) and re-form with it, and the replacement
// reads the survivors' copies. A rank whose world broke while nobody died posts
// broken-<generation>-<id>: a member that is stopped, or that has not posted its own mark
// half a --timeout after the first, is then killed by the launcher.
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace strata::comm::tcp {
class StoreServer;
}

namespace strata::launcher {

struct LiveWorld {
  int generation = 0;
  int world = 0;
  int rank = -1;        // this process's rank in it; -1 when it is not named
  std::string job;
  int from = 0;         // ranks of the world whose in-memory copies it continues from
  std::string failure;  // what ended the previous world
  int local_rank = -1, local_world = 0;  // this process's place on its host
};

// Where a live job's launcher and ranks exchange the world and the marks ("world",
// "ready-<id>", "formed-<generation>", "broken-<generation>-<id>").
struct LiveBoard {
  std::function<void(const std::string& name, const std::string& text)> put;
  std::function<std::optional<std::string>(const std::string& name)> get;  // never waits long
  bool has(const std::string& name) const { return get(name).has_value(); }
  // Launcher side, stores only: the world of job `job` is given up (a member died before it
  // formed): its forming ends at once instead of at the timeout.
  std::function<void(const std::string& job, const std::string& why)> give_up;
};
// Files: "world" is `path` itself, a mark is `path`.<name>.
LiveBoard live_board_of_files(const std::string& path);
// Keys <prefix><name> of the store the launcher hosts; give_up(job, why) sets <job>/abort,
// which fails a tcp world of that job still forming.
LiveBoard live_board_of_store(comm::tcp::StoreServer& store, const std::string& prefix);

// This process's board, from STRATA_LIVE_FILE or STRATA_LIVE_KEY (+ STRATA_STORE); null when
// its launcher runs no live recovery.
LiveBoard* rank_live_board();

// How a live job's ranks and the launcher name a process: STRATA_LIVE_ID, else the process id.
int64_t live_self_id();

struct LiveMember {
  int64_t id = 0;
  int local_rank = 0, local_world = 1;
};

// Launcher side: posts generation `generation` with `members` (in their new rank order).
void write_live_world(const LiveBoard& board, int generation, const std::string& job, int from,
                      const std::string& failure, const std::vector<LiveMember>& members);

// The marks' names.
std::string live_ready_mark(int64_t id);
std::string live_formed_mark(int generation);
std::string live_broken_mark(int generation, int64_t id);

// STRATA_LIVE_JOIN: in a replacement, the generation after which it joins; 0 otherwise.
int live_join_generation();

// STRATA_LIVE_REPLACES: in a replacement, the launched rank it stands for; -1 otherwise.
int live_replaced_rank();

// In a replacement: tells the launcher it is ready (posts its ready mark).
void announce_live_join();

// Rank 0 of generation `generation` posts this once that world formed and loaded its state:
// a replacement joins only a world that formed (its copies are the ones to load).
void announce_live_world_formed(int generation);

// A rank whose world of generation `generation` broke: a peer that did not die (stopped,
// SIGSTOP or a debugger) is then stopped for good by the launcher, which re-forms the world
// without it.
void announce_live_world_broken(int generation);

// The world on `board` as it stands, as this process (live_self_id) sees it; nullopt when
// there is none or it is malformed.
std::optional<LiveWorld> read_live_world(const LiveBoard& board);
// This rank's board's world; nullopt without a board.
std::optional<LiveWorld> read_live_world();

// Waits up to timeout_s for a generation newer than `after` that names this process.
// nullopt when none came (the launcher stops the job instead) or, for a survivor, when the
// next one leaves it out. A replacement (`joining`) waits on past generations that do not name
// it yet (further deaths re-form the world before it joins).
std::optional<LiveWorld> wait_for_live_world(int after, double timeout_s, bool joining = false);

// Takes `w`'s coordinates into this process's environment, for init_from_env.
void adopt_live_world(const LiveWorld& w);

}  // namespace strata::launcher
