// Internals of the launcher (launcher/launcher.h), shared by launcher.cc (plan the launch, start the
// ranks, forward their output, supervise them) and launcher_live.cc (live recovery's side:
// re-form the world without a dead replica, start and join its replacement). Not an API: only
// those two files include it.
#pragma once
#include <signal.h>
#include <sys/types.h>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "launcher/launcher.h"
#include "launcher/live_world.h"
#include "launcher/mpirun_output.h"

namespace strata::launcher::detail {

// Splits a stream into lines and writes each with a prefix, whole (one write per line).
struct LineSink {
  int fd_in = -1;
  int fd_out = 1;
  int rank = -1;  // -1: mpirun's own stream (tags decide the rank)
  bool prefix = true;
  std::string buf;
  std::vector<std::string>* captured = nullptr;  // untagged lines kept for parsing
  MpirunOutput tagged{false};  // rank -1: splits mpirun's stream by rank
  std::vector<std::pair<int, std::string>>* timeouts = nullptr;  // ranks' lines saying "timed out"
  std::vector<int>* answered = nullptr;  // ranks whose lines show they outlived a failure

  void write_all(const std::string& out);
  void emit(int line_rank, const std::string& line);
  // mpirun's stream: tags decide the rank, also in the middle of a line (launcher/mpirun_output.h).
  void demux(const char* data, size_t n);
  // Returns false at end of stream.
  bool drain();
};

struct Child {
  pid_t pid = -1;
  int rank = -1;
  bool running = false;
  int status = 0;
  int live_rank = -1;  // its rank in the world live recovery re-formed last (the launch's first)
  // Live recovery killed it while its peers waited on it: why ("was stopped while ..."); "":
  // it was not.
  std::string killed_why;
  int64_t live_id = 0;  // how live worlds name it (STRATA_LIVE_ID; its pid when none was set)
  int host = -1;        // index into LaunchOptions::hosts of where it runs; -1: this host
  int slot = -1;        // a replacement: its place in the replica it joins (replicas_of)
  int joined_generation = 0;  // a replacement: the live world it was named in (0: not yet)
};

// What launch_once starts: one process per rank (shm), or one mpirun for all (mpi).
struct Proc {
  std::string path;
  std::vector<std::string> argv;
  std::vector<std::pair<std::string, std::string>> env;
  int rank;  // -1: mpirun
  int host = -1;  // index into LaunchOptions::hosts of where the rank runs; -1: this host
  int64_t live_id = 0;  // its STRATA_LIVE_ID (set in env too); 0: none was set
};

struct LaunchPlan {
  std::string job_id;
  std::string prog;  // the program each rank runs (found in PATH)
  std::vector<Proc> procs;
  std::string status_dir;  // mpi with rank_exec: where ranks record how they ended
};

// Everything one attempt holds, released on every exit, a throw included: the launcher's
// SIGINT/SIGTERM handlers are restored, children still running are killed (with their
// process groups) and reaped, pipes closed, the job's segments and the status directory
// removed.
class JobGuard {
 public:
  JobGuard(std::string job_id, std::string status_dir);
  ~JobGuard();
  JobGuard(const JobGuard&) = delete;
  JobGuard& operator=(const JobGuard&) = delete;

  // Sends `sig` to every running child's process group (or the child, before its setsid()).
  // SIGTERM comes with SIGCONT: a stopped rank (SIGSTOP, a debugger's stop) acts on SIGTERM
  // only once continued, so it would otherwise hold the job for the whole grace period and
  // die by SIGKILL without dumping its flight recorder.
  void signal_all(int sig);

  std::vector<Child> children;
  std::vector<int> fds;  // open pipe ends; -1 once closed
  std::vector<std::string> live_jobs;  // the worlds live recovery re-formed (their shm objects)
  std::optional<LiveBoard> board;      // where a live job's worlds are posted; none otherwise
  int64_t last_live_id = 0;            // STRATA_LIVE_ID given last
  const LaunchPlan* plan = nullptr;  // what was started (a replacement starts the same)
  // Rejoin: the replicas to start replacements for, each as the ranks (as launched) of its
  // members by slot; one replica at a time joins.
  std::vector<std::vector<int>> replacements_due;
  std::vector<pid_t> joiners;  // the replacements started, not yet in the world (by slot)
  bool training_ended = false;  // a member finished training: no replacement joins any more
  // The generation a member first said broke, and when (kill_members_holding_the_world).
  int broken_generation = -1;
  int64_t broken_since_ns = 0;
  bool joining(pid_t pid) const { return std::count(joiners.begin(), joiners.end(), pid) > 0; }

 private:
  std::string job_id_, status_dir_;
  struct sigaction old_int_ {}, old_term_ {};
};

// One line of the launcher's own: to LaunchOptions::log, else to stderr (flushed).
void log_line(const LaunchOptions& o, const std::string& line);

// Forks `path` with `argv` and `env` set, its stdout and stderr into out_fd and err_fd, in its
// own session, dying with the launcher; the child closes close_from_fds first.
pid_t spawn(const std::string& path, const std::vector<std::string>& argv,
            const std::vector<std::pair<std::string, std::string>>& env, int out_fd, int err_fd,
            int close_from_fds[], int nclose);

// One rank's process: the program itself, or on another host (the tcp backend across hosts)
// the remote shell running it there with `env` on its command line.
Proc rank_proc(const LaunchOptions& o, const std::string& prog,
               std::vector<std::pair<std::string, std::string>> env, int rank, int host);

// Live recovery's side of supervision (launcher_live.cc).

// The members of the current live world (a replacement not yet joined is none), in rank order.
std::vector<Child*> live_members(JobGuard& g);

// `dead` was killed by `status`: the rest of its data-parallel replica is killed with it and
// the ranks still running re-form a world without them. False when none is left to.
bool reform_without(JobGuard& g, Child& dead, int status, const LaunchOptions& o);

// A member said its world broke, but nobody died: a stopped or hung member is killed.
void kill_members_holding_the_world(JobGuard& g, const LaunchOptions& o);

// Rejoin: starts a replacement for the launched rank `for_rank`, at `slot` of its replica.
void start_replacement(JobGuard& g, std::vector<LineSink>& sinks, int for_rank, int slot, const LaunchOptions& o);

// Rejoin: every replacement of the replica said it is ready, and the world formed.
bool joiners_ready(const JobGuard& g);

// Rejoin: the world grows by the ready replacements' replica.
void join_replacement(JobGuard& g, const LaunchOptions& o);

// Rejoin: the replacements not yet joined are stopped.
void drop_joiners(JobGuard& g);

// Rejoin: a member finished training: the replacements named in a world that never formed
// (its survivors ended first) are told the job is done and stopped; the job ends as it was.
void dismiss_late_replacements(JobGuard& g, const LaunchOptions& o);

}  // namespace strata::launcher::detail
