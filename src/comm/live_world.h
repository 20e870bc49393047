// Live recovery's world file (`strata train --recovery live`): when a rank of a live job dies,
// its launcher does not stop the others; it writes the world they re-form into a small file
// named by STRATA_LIVE_FILE (beside the job's shared-memory objects, removed with them):
//
//   generation 1                  worlds re-formed so far
//   world 2                       ranks of the new world
//   job host-123-abcd             a fresh STRATA_JOB_ID: the new world's shm groups
//   from 3                        ranks of the world whose in-memory copies it continues from
//   failure rank 1 was killed by signal 9 (Killed)
//   pid 4242 rank 0               every survivor, by process id, with its new rank
//   pid 4244 rank 1
//
// A survivor whose group broke waits for a generation newer than its own that names its
// process, takes its new coordinates into its environment (STRATA_RANK, STRATA_WORLD_SIZE,
// STRATA_LOCAL_*, STRATA_JOB_ID) and joins the new world with init_from_env. The file is
// replaced atomically (write, then rename), so a reader sees one generation or the next.
//
// Rejoin: the launcher then starts a replacement with STRATA_LIVE_JOIN=<generation>. Once it
// has built what it can alone it announces itself (a file <STRATA_LIVE_FILE>.ready-<pid>);
// once the survivors' world has formed too (rank 0's <STRATA_LIVE_FILE>.formed-<generation>),
// the launcher writes the next generation, the survivors and the replacement, last; the
// survivors see it at a step boundary (rank 0 reads the file, one all-reduce tells the rest)
// and re-form with it, and the replacement reads the survivors' copies.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace strata::comm {

struct LiveWorld {
  int generation = 0;
  int world = 0;
  int rank = -1;        // this process's rank in it; -1 when it is not named
  std::string job;
  int from = 0;         // ranks of the world whose in-memory copies it continues from
  std::string failure;  // what ended the previous world
};

// STRATA_LIVE_FILE: "" when this process's launcher runs no live recovery.
std::string live_world_file();

// Launcher side: writes generation `generation` with `pids` (in their new rank order).
void write_live_world(const std::string& path, int generation, const std::string& job, int from,
                      const std::string& failure, const std::vector<int64_t>& pids);

// The file a replacement (pid) creates once it is ready to join.
std::string live_ready_file(const std::string& path, int64_t pid);

// STRATA_LIVE_JOIN: in a replacement, the generation after which it joins; 0 otherwise.
int live_join_generation();

// In a replacement: says the launcher it is ready (creates its live_ready_file).
void announce_live_join();

// The file rank 0 of generation `generation` creates once that world formed and loaded its
// state: a replacement joins only a world that formed (its copies are the ones to load).
std::string live_formed_file(const std::string& path, int generation);
void announce_live_world_formed(int generation);

// The file a rank creates when its world of generation `generation` broke: a peer that did
// not die (stopped, SIGSTOP or a debugger) is then stopped for good by the launcher, which
// re-forms the world without it.
std::string live_broken_file(const std::string& path, int generation, int64_t pid);
void announce_live_world_broken(int generation);

// Reads the file as it stands; nullopt when it is absent or malformed.
std::optional<LiveWorld> read_live_world(const std::string& path);

// Waits up to timeout_s for a generation newer than `after` that names this process.
// nullopt when none came (the launcher stops the job instead) or this process is not in it.
std::optional<LiveWorld> wait_for_live_world(int after, double timeout_s);

// Takes `w`'s coordinates into this process's environment, for init_from_env.
void adopt_live_world(const LiveWorld& w);

}  // namespace strata::comm
