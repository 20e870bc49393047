// Live recovery's side of the launcher (LaunchOptions::live; the ranks' side is
// launcher/live_world.h): what supervise (launcher.cc) does for a live job.
//
// A member dies (killed by a signal): reform_without kills the rest of its data-parallel
// replica (a tp x pp replica cannot go on with a hole in it) and posts the next generation on
// the job's live board: the survivors renumbered 0..n-1 in mesh order, each keeping its tp rank
// and stage, under a fresh job id (write_generation). With rejoin, the dead replica's launched
// ranks are due for replacements: start_replacement starts one per slot (the launch's command,
// STRATA_LIVE_JOIN set, on the dead rank's host); once every one said it is ready and the
// survivors' world formed (joiners_ready), join_replacement posts the generation with their
// replica as the last data-parallel index. A replacement that ends before it joins takes its
// replica's others with it (drop_joiners); the world goes on as it was.
//
// A member that holds the world without dying: once a member said its world broke,
// kill_members_holding_the_world kills a stopped member at once and a hung one (it has not said
// so itself) half a --timeout later; its death then re-forms the world as above.
//
// Terms: a member is a rank of the current live world (Child::live_rank >= 0); a replica the
// ranks of one data-parallel index (LaunchOptions::live_inner x live_stages of them), its
// slots numbered as replicas_of says.
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "comm/bootstrap.h"
#include "core/error.h"
#include "core/timer.h"
#include "launcher/launcher_internal.h"
#include "launcher/live_world.h"
#include "launcher/rank_status.h"

namespace strata::launcher::detail {

using namespace strata::comm;  // the communication layer this launcher starts ranks of

// The members of the current live world (a replacement not yet joined is none), in rank order.
std::vector<Child*> live_members(JobGuard& g) {
  std::vector<Child*> out;
  for (Child& c : g.children)
    if (c.running && c.live_rank >= 0) out.push_back(&c);
  std::sort(out.begin(), out.end(), [](const Child* a, const Child* b) { return a->live_rank < b->live_rank; });
  return out;
}

// Writes the next generation of the live world: `members` renumbered 0..n-1 in this order.
static void write_generation(JobGuard& g, const std::vector<Child*>& members, int from,
                             const std::string& what, const LaunchOptions& o) {
  std::vector<LiveMember> ms(members.size());  // local rank: the members before it on its host
  for (size_t r = 0; r < members.size(); ++r) {
    ms[r].id = members[r]->live_id;
    ms[r].local_rank = ms[r].local_world = 0;
    for (size_t q = 0; q < members.size(); ++q)
      if (members[q]->host == members[r]->host) ++ms[r].local_world, ms[r].local_rank += q < r ? 1 : 0;
  }
  // The world before, if it is still forming, stops waiting for its members (the tcp backend).
  if (g.board->give_up)
    g.board->give_up(g.live_jobs.empty() ? g.plan->job_id : g.live_jobs.back(), what);
  const std::string job = new_job_id();
  g.live_jobs.push_back(job);
  const int generation = int(g.live_jobs.size());
  write_live_world(*g.board, generation, job, from, what, ms);
  for (size_t r = 0; r < members.size(); ++r) members[r]->live_rank = int(r);
  log_line(o, cat("strata launch: ", what, "; live recovery: the job goes on with ", members.size(),
                  " rank(s) (world ", generation, ")"));
}

// A live world's members as data-parallel replicas: replica d holds, at slot p · inner + i,
// the member of world rank (p · dp + d) · inner + i (LaunchOptions::live_inner). `world`: every
// member, in rank order.
static std::vector<std::vector<Child*>> replicas_of(const std::vector<Child*>& world, const LaunchOptions& o) {
  const int inner = o.live_inner, per = inner * o.live_stages, n = int(world.size());
  const int dp = n / per;
  std::vector<std::vector<Child*>> out(static_cast<size_t>(dp), std::vector<Child*>(static_cast<size_t>(per)));
  for (int r = 0; r < n; ++r) {
    const int d = (r / inner) % dp, slot = (r / (inner * dp)) * inner + r % inner;
    out[size_t(d)][size_t(slot)] = world[size_t(r)];
  }
  return out;
}

// The members of `replicas` in world-rank order, replica d at data-parallel index d.
static std::vector<Child*> in_rank_order(const std::vector<std::vector<Child*>>& replicas, const LaunchOptions& o) {
  std::vector<Child*> out;
  for (int p = 0; p < o.live_stages; ++p)
    for (const std::vector<Child*>& rep : replicas)
      for (int i = 0; i < o.live_inner; ++i) out.push_back(rep[size_t(p * o.live_inner + i)]);
  return out;
}

// Live recovery (LaunchOptions::live): `dead` was killed by `status`; the rest of its
// data-parallel replica is killed with it and the ranks still running re-form a world without
// them (launcher/live_world.h). False when none is left to.
bool reform_without(JobGuard& g, Child& dead, int status, const LaunchOptions& o) {
  std::vector<Child*> world = live_members(g);
  if (world.empty() || !g.board || dead.live_rank < 0) return false;
  world.insert(std::upper_bound(world.begin(), world.end(), &dead,
                                [](const Child* a, const Child* b) { return a->live_rank < b->live_rank; }),
               &dead);
  const int per = o.live_inner * o.live_stages;
  if (int(world.size()) % per != 0) return false;  // not a whole number of replicas: not re-formed
  std::vector<std::vector<Child*>> replicas = replicas_of(world, o);
  const size_t d = size_t((dead.live_rank / o.live_inner) % int(replicas.size()));
  const std::vector<Child*> gone = replicas[d];
  replicas.erase(replicas.begin() + std::ptrdiff_t(d));
  if (replicas.empty()) return false;
  const std::string what = cat("rank ", dead.live_rank, " ",
                               dead.killed_why.empty() ? describe_wait_status(status) : dead.killed_why);
  std::vector<int> due;
  for (Child* c : gone) {
    due.push_back(c->rank);
    if (c == &dead) continue;
    // The rest of the replica cannot go on without it: killed, and no longer a member (its
    // exit ends nothing).
    if (c->running && kill(-c->pid, SIGKILL) != 0) kill(c->pid, SIGKILL);
    log_line(o, cat("strata launch: rank ", c->live_rank, " goes with rank ", dead.live_rank,
                    "'s data-parallel replica (killed)"));
    c->live_rank = -1;
  }
  write_generation(g, in_rank_order(replicas, o), int(world.size()), what, o);
  if (o.live_rejoin) g.replacements_due.push_back(due);
  return true;
}

// A member's state letter from /proc (R, S, T for stopped, ...); '?' when unreadable.
static char process_state(pid_t pid) {
  FILE* f = std::fopen(cat("/proc/", pid, "/stat").c_str(), "r");
  if (!f) return '?';
  char buf[512] = {0};
  const size_t n = std::fread(buf, 1, sizeof buf - 1, f);
  std::fclose(f);
  const char* close = std::strrchr(buf, ')');
  return close && close + 2 < buf + n ? close[2] : '?';
}

// Live recovery: a member said its world broke, but nobody died: a member that holds the
// world without dying is killed, so the others re-form without it. One that is stopped (state
// T in /proc: SIGSTOP, a debugger; seen for ranks on this machine) at once; any other that has
// not said its world broke `grace` after the first that did (hung: busy, or blocked outside
// the job's collectives, on any host; the others' groups all failed once one timed out, so
// each reaches a failed collective within a step) then. grace is half the --timeout the
// others wait for the next world, so they see it.
void kill_members_holding_the_world(JobGuard& g, const LaunchOptions& o) {
  const int generation = int(g.live_jobs.size());
  std::vector<Child*> silent;
  const std::vector<Child*> members = live_members(g);
  for (Child* c : members)
    if (!g.board->has(live_broken_mark(generation, c->live_id))) silent.push_back(c);
  if (silent.size() == members.size()) return;  // none broke
  if (g.broken_generation != generation) g.broken_generation = generation, g.broken_since_ns = now_ns();
  const double grace_s = std::max(1.0, (o.timeout_s > 0 ? o.timeout_s : 60) / 2);
  const bool late = double(now_ns() - g.broken_since_ns) * 1e-9 > grace_s;
  for (Child* c : silent) {
    const char state = process_state(c->pid);
    std::string why;
    if (state == 'T' || state == 't') why = "was stopped while its peers waited on it (killed)";
    else if (late)
      why = cat("did not answer its peers (hung: its world broke ", grace_s,
                " s ago and it did not say so; killed)");
    if (!why.empty() && kill(c->pid, SIGKILL) == 0) c->killed_why = why;
  }
}

// Rejoin: starts a replacement (the launch's command) that waits to be named in the world file
// after the current generation, on the host of the launched rank `for_rank`, for `slot` of
// the replica it joins.
void start_replacement(JobGuard& g, std::vector<LineSink>& sinks, int for_rank, int slot, const LaunchOptions& o) {
  // The launch's last rank until the world file names its place (its start-up checks see the
  // launch's world; rank 0 would take the run directory's lock).
  const Proc& last = g.plan->procs.back();
  int host = -1;  // the dead rank's host
  for (const Child& c : g.children)
    if (c.rank == for_rank) host = c.host;
  std::vector<std::pair<std::string, std::string>> env;
  for (const auto& [k, v] : last.env)
    if (k != "STRATA_LIVE_ID") env.push_back({k, v});
  env.push_back({"STRATA_LIVE_JOIN", std::to_string(g.live_jobs.size())});
  env.push_back({"STRATA_LIVE_REPLACES", std::to_string(for_rank)});
  env.push_back({"STRATA_LIVE_ID", std::to_string(++g.last_live_id)});
  const Proc l = rank_proc(o, g.plan->prog, env, last.rank, host);
  int pipes[2][2];
  for (auto& p : pipes) {
    STRATA_CHECK(pipe2(p, O_CLOEXEC) == 0, "pipe failed: ", std::strerror(errno));
    g.fds.push_back(p[0]);
    g.fds.push_back(p[1]);
  }
  int read_ends[2] = {pipes[0][0], pipes[1][0]};
  Child c;
  c.rank = for_rank;
  c.pid = spawn(l.path, l.argv, env, pipes[0][1], pipes[1][1], read_ends, 2);
  c.running = true;
  c.host = host;
  c.live_id = g.last_live_id;
  c.slot = slot;
  g.children.push_back(c);
  g.joiners.push_back(c.pid);
  for (int s = 0; s < 2; ++s) {
    std::replace(g.fds.begin(), g.fds.end(), pipes[s][1], -1);
    close(pipes[s][1]);
    LineSink sink;
    sink.fd_in = pipes[s][0];
    sink.fd_out = s == 0 ? 1 : 2;
    sink.rank = for_rank;
    sink.prefix = o.prefix_output;
    sink.tagged = MpirunOutput(!o.prefix_output);
    sink.timeouts = sinks.empty() ? nullptr : sinks.front().timeouts;
    sinks.push_back(sink);
  }
}

// "rank 1", or "ranks 0, 1" for a replica of several.
static std::string ranks_text(const std::vector<int>& ranks) {
  std::string out = ranks.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < ranks.size(); ++i) out += cat(i ? ", " : "", ranks[i]);
  return out;
}

// Rejoin: every replacement of the replica said it is ready, and the world formed.
bool joiners_ready(const JobGuard& g) {
  if (g.joiners.empty() || !g.board->has(live_formed_mark(int(g.live_jobs.size())))) return false;
  for (const Child& c : g.children)
    if (g.joining(c.pid) && !g.board->has(live_ready_mark(c.live_id))) return false;
  return true;
}

// Rejoin: the replacements are ready; the world grows by their replica, as the last
// data-parallel index, at the survivors' next step boundary.
void join_replacement(JobGuard& g, const LaunchOptions& o) {
  const std::vector<Child*> members = live_members(g);
  std::vector<std::vector<Child*>> replicas = replicas_of(members, o);
  std::vector<Child*> joining(g.joiners.size());
  for (Child& c : g.children)
    if (g.joining(c.pid)) joining[size_t(c.slot)] = &c;
  std::vector<int> replaced;  // the launched ranks they stand for, by slot
  for (const Child* c : joining) replaced.push_back(c->rank);
  replicas.push_back(joining);
  write_generation(g, in_rank_order(replicas, o), int(members.size()),
                   cat(joining.size() == 1 ? "a replacement for " : "replacements for ", ranks_text(replaced),
                       joining.size() == 1 ? " joins" : " join"),
                   o);
  for (Child* c : joining) c->joined_generation = int(g.live_jobs.size());
  g.joiners.clear();
}

// Rejoin: the replacements not yet joined are stopped (one of them ended, or the job is done).
void drop_joiners(JobGuard& g) {
  for (Child& c : g.children)
    if (g.joining(c.pid) && c.running && kill(-c.pid, SIGKILL) != 0) kill(c.pid, SIGKILL);
  g.joiners.clear();
}

// Rejoin: a member ended training (exit 0) at a step boundary where its world did not grow: a
// replacement named in a world that has not formed would wait there for survivors that are
// gone, and one still starting would join none. Both are stopped; no longer members, their
// exits end nothing, and no replacement starts or joins after this.
void dismiss_late_replacements(JobGuard& g, const LaunchOptions& o) {
  g.training_ended = true;
  drop_joiners(g);
  g.replacements_due.clear();
  if (!g.board) return;
  for (Child& c : g.children) {
    if (!c.running || c.joined_generation == 0 || g.board->has(live_formed_mark(c.joined_generation)))
      continue;
    log_line(o, cat("strata launch: the replacement for rank ", c.rank, " was named in world ",
                    c.joined_generation, " after the job's training ended; stopped"));
    c.live_rank = -1;
    c.joined_generation = 0;
    if (kill(-c.pid, SIGKILL) != 0) kill(c.pid, SIGKILL);
  }
}

}  // namespace strata::launcher::detail
