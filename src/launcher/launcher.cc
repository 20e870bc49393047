#include "launcher/launcher.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <algorithm>
#include <cctype>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "comm/bootstrap.h"
#include "comm/hier/topology.h"
#include "comm/tcp/store.h"
#include "core/env.h"
#include "core/error.h"
#include "core/timer.h"
#include "launcher/launcher_internal.h"
#include "launcher/live_world.h"
#include "launcher/mpirun_failure.h"
#include "launcher/mpirun_output.h"
#include "launcher/rank_status.h"
#include "launcher/run_segments.h"

namespace strata::launcher {

using namespace strata::comm;  // the communication layer this launcher starts ranks of

// The launcher's internals (launcher/launcher_internal.h); live recovery's are in launcher_live.cc.
using detail::Child;
using detail::JobGuard;
using detail::LaunchPlan;
using detail::LineSink;
using detail::log_line;
using detail::Proc;
using detail::rank_proc;
using detail::spawn;
using detail::dismiss_late_replacements;
using detail::drop_joiners;
using detail::join_replacement;
using detail::joiners_ready;
using detail::kill_members_holding_the_world;
using detail::live_members;
using detail::reform_without;
using detail::start_replacement;



// The program's path as execv will run it, or "" when it cannot be found.
static std::string find_program(const std::string& prog) {
  auto executable = [](const std::string& p) {
    struct stat st {};
    return stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode) && access(p.c_str(), X_OK) == 0;
  };
  if (prog.find('/') != std::string::npos) return executable(prog) ? prog : "";
  const char* path = std::getenv("PATH");
  std::string dirs = path ? path : "/usr/local/bin:/usr/bin:/bin";
  size_t start = 0;
  while (start <= dirs.size()) {
    size_t end = dirs.find(':', start);
    if (end == std::string::npos) end = dirs.size();
    std::string dir = dirs.substr(start, end - start);
    std::string cand = (dir.empty() ? "." : dir) + "/" + prog;
    if (executable(cand)) return cand;
    start = end + 1;
  }
  return "";
}


static int exit_code_of(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

namespace detail {

void log_line(const LaunchOptions& o, const std::string& line) {
  if (o.log) {
    o.log(line);
  } else {
    std::fprintf(stderr, "%s\n", line.c_str());
    std::fflush(stderr);
  }
}

void LineSink::write_all(const std::string& out) {
  const char* p = out.data();
  size_t left = out.size();
  while (left) {
    ssize_t n = write(fd_out, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    p += n;
    left -= size_t(n);
  }
}

void LineSink::emit(int line_rank, const std::string& line) {
  std::string out = line;
  if (line_rank >= 0 && prefix) out = cat("[rank ", line_rank, "] ", line);
  if (line_rank < 0 && captured) captured->push_back(line);
  if (line_rank >= 0 && timeouts && line.find("timed out") != std::string::npos)
    timeouts->push_back({line_rank, line});
  if (line_rank >= 0 && answered && answers_after_failure(line_rank, line))
    answered->push_back(line_rank);
  out += '\n';
  write_all(out);
}

void LineSink::demux(const char* data, size_t n) {
  auto sink = [&](int r, const std::string& text, bool complete) {
    if (complete) emit(r, text);
    else write_all(text);  // a progress line, as it comes
  };
  if (n) tagged.feed(data, n, sink);
  else tagged.finish(sink);
}

bool LineSink::drain() {
  char tmp[65536];
  ssize_t n = read(fd_in, tmp, sizeof tmp);
  if (n < 0 && (errno == EINTR || errno == EAGAIN)) return true;
  if (n <= 0) {
    if (rank < 0) demux(nullptr, 0);
    if (!buf.empty()) emit(rank, buf);
    buf.clear();
    close(fd_in);
    fd_in = -1;
    return false;
  }
  if (rank < 0) {
    demux(tmp, size_t(n));
    return true;
  }
  buf.append(tmp, size_t(n));
  size_t pos;
  while ((pos = buf.find('\n')) != std::string::npos) {
    emit(rank, buf.substr(0, pos));
    buf.erase(0, pos + 1);
  }
  // A progress line redrawn in place ("\r..." without a newline, see train/metrics.h)
  // passes as it comes when output is not prefixed, instead of waiting for a newline.
  if (!prefix && buf.find('\r') != std::string::npos) {
    write_all(buf);
    buf.clear();
  }
  return true;
}

pid_t spawn(const std::string& path, const std::vector<std::string>& argv,
            const std::vector<std::pair<std::string, std::string>>& env, int out_fd, int err_fd,
            int close_from_fds[], int nclose) {
  pid_t pid = fork();
  STRATA_CHECK(pid >= 0, "fork failed: ", std::strerror(errno));
  if (pid > 0) return pid;
  // Child: own session and process group (the launcher stops a rank with all its children;
  // with autogroup scheduling each rank competes for CPU like a separate job, as mpirun's
  // ranks do, instead of all ranks sharing one session's share), dies with the launcher,
  // output into the pipes.
  setsid();
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  signal(SIGINT, SIG_DFL);
  signal(SIGTERM, SIG_DFL);
  dup2(out_fd, 1);
  dup2(err_fd, 2);
  for (int i = 0; i < nclose; ++i) close(close_from_fds[i]);
  for (auto& [k, v] : env) setenv(k.c_str(), v.c_str(), 1);
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  execv(path.c_str(), args.data());
  std::fprintf(stderr, "strata launch: cannot execute %s: %s\n", path.c_str(), std::strerror(errno));
  _exit(127);
}

}  // namespace detail

namespace {

volatile sig_atomic_t g_stop_signal = 0;  // the launcher itself was asked to stop
extern "C" void on_launcher_signal(int sig) { g_stop_signal = sig; }

// "rank R" in r.message -> "rank R (ROLE)", ROLE from o.rank_role.
void name_failed_rank_role(LaunchResult& r, const LaunchOptions& o) {
  if (!o.rank_role || r.failed_rank < 0) return;
  const std::string role = o.rank_role(r.failed_rank, o.nproc);
  const std::string key = cat("rank ", r.failed_rank);
  for (size_t at = r.message.find(key); !role.empty() && at != std::string::npos;
       at = r.message.find(key, at + 1)) {
    const size_t end = at + key.size();
    if (end < r.message.size() && std::isdigit(static_cast<unsigned char>(r.message[end]))) continue;
    r.message.insert(end, cat(" (", role, ")"));
    return;
  }
}

}  // namespace


static LaunchResult launch_once(const LaunchOptions& o);

// STRATA_* variables of this process (env knobs) that mpirun should pass on, except the
// rank coordinates and those already in `set`.
static std::vector<std::string> forwarded_env(const std::vector<std::pair<std::string, std::string>>& set) {
  static const char* const kOwn[] = {"STRATA_RANK", "STRATA_WORLD_SIZE", "STRATA_LOCAL_RANK",
                                     "STRATA_LOCAL_WORLD_SIZE"};
  std::vector<std::string> out;
  for (char** e = environ; *e; ++e) {
    std::string kv = *e, k = kv.substr(0, kv.find('='));
    if (k.rfind("STRATA_", 0) != 0) continue;
    bool skip = false;
    for (const char* own : kOwn) skip |= k == own;
    for (auto& [sk, sv] : set) skip |= k == sk;
    if (!skip) out.push_back(k);
  }
  return out;
}

// Across hosts (tcp): this host's address the hosts reach the job's store at: the first of its
// interfaces (sorted by name) on a subnet of one of theirs.
static std::string store_host_for(const std::vector<std::vector<NetIface>>& ifs, const std::vector<HostSlots>& hosts) {
  for (const NetIface& mine : local_interfaces()) {
    if (mine.loopback() || mine.ipv4.empty() || !mine.up) continue;
    for (const auto& host : ifs)
      for (const NetIface& f : host)
        if (f.subnet == mine.subnet && !f.loopback()) return mine.ipv4;
  }
  fail("the tcp backend's ranks reach the launcher's store, but no interface of this host shares a "
       "subnet with the hosts (", format_hosts(hosts), ")");
}

// The attempts of one supervised job, all under `run_id`.
static LaunchResult run_attempts(const LaunchOptions& o, const std::string& run_id,
                                 const std::function<void(const std::string&)>& log) {
  LaunchOptions attempt = o;
  for (int k = 0;; ++k) {
    attempt.extra_env = o.extra_env;
    attempt.extra_env.push_back({"STRATA_RUN_ID", run_id});
    if (o.max_restarts > 0) attempt.extra_env.push_back({"STRATA_RESTART", std::to_string(k)});
    if (k > 0) attempt.job_id.clear();  // a fresh job: no segments shared with the dead one
    LaunchResult r = launch_once(attempt);
    r.restarts = k;
    name_failed_rank_role(r, attempt);
    if (r.exit_code == 0 || r.interrupted || o.max_restarts == 0) return r;
    if (k == o.max_restarts) {
      r.message = cat(r.message, "; giving up after ", k, " restart", k == 1 ? "" : "s",
                      " (--max-restarts ", o.max_restarts, ")");
      return r;
    }
    std::string where;
    if (o.elastic && attempt.hosts.size() > 1) {
      auto dead = std::find_if(attempt.hosts.begin(), attempt.hosts.end(),
                               [&](const HostSlots& h) { return h.host == r.failed_host; });
      if (dead != attempt.hosts.end()) {
        attempt.hosts.erase(dead);
        attempt.nproc = std::min(attempt.nproc, total_slots(attempt.hosts));
        where = cat(" on the remaining hosts (--elastic: ", attempt.nproc, " ranks on ", format_hosts(attempt.hosts),
                    ", without ", r.failed_host, ")");
      } else {
        where = " on the same hosts (--elastic: the failed rank's host is unknown)";
      }
    }
    log(cat("strata launch: restart ", k + 1, "/", o.max_restarts, where, " after ", r.message));
  }
}

LaunchResult launch(const LaunchOptions& o) {
  STRATA_CHECK(o.max_restarts >= 0, "--max-restarts must not be negative, got ", o.max_restarts);
  auto log = [&](const std::string& line) { log_line(o, line); };
  const std::string run_id = new_job_id();
  // What the ranks left for their restarts (launcher/run_segments.h) goes when the job ends,
  // however it ends (a throw included), on this host; what a killed launcher's job left goes
  // now.
  for (const std::string& line : remove_orphaned_runs()) log(cat("strata launch: ", line));
  record_run_owner(run_id);
  struct RunOwned {
    const std::string& id;
    ~RunOwned() { remove_run_owned(id); }
  } owned{run_id};
  // The tcp backend's ranks find each other through a rendezvous store that lives as long as
  // the job, restarts included (each attempt's keys are under its own job id); across hosts
  // it listens on every interface (plan_launch gives the ranks its address).
  LaunchOptions with_store = o;
  std::unique_ptr<comm::tcp::StoreServer> store;
  if (o.backend == Backend::tcp) {
    store = std::make_unique<comm::tcp::StoreServer>(o.hosts.empty() ? "127.0.0.1" : "0.0.0.0", 0);
    with_store.store = store.get();
  }
  LaunchResult r = run_attempts(with_store, run_id, log);
  // On the other hosts: a rank that failed, or a host an --elastic restart left out, could
  // not remove its own; nor could a rank a live job went on without.
  if (!o.hosts.empty() && (r.exit_code != 0 || r.restarts > 0 || o.live))
    for (const std::string& p : remove_run_owned_on_hosts(run_id, o.hosts, o.rsh_agent, o.reach_timeout_s))
      log(cat("strata launch: the job's shared-memory objects on that host may remain: ", p));
  return r;
}

namespace detail {

// One rank's process: the program itself, or on another host (the tcp backend across hosts)
// the remote shell running it there with `env` on its command line.
Proc rank_proc(const LaunchOptions& o, const std::string& prog,
               std::vector<std::pair<std::string, std::string>> env, int rank, int host) {
  std::vector<std::string> argv = o.command;
  argv[0] = prog;
  if (host < 0) return {prog, argv, env, rank, -1};
  std::string script = "exec env";
  for (const auto& [k, v] : env) script += " " + shell_quote(k + "=" + v);
  for (const std::string& k : forwarded_env(env))
    if (const char* v = std::getenv(k.c_str())) script += " " + shell_quote(k + "=" + v);
  for (const std::string& a : argv) script += " " + shell_quote(a);
  std::vector<std::string> remote = remote_shell_argv(o.hosts[size_t(host)].host, o.rsh_agent, script);
  const std::string agent = find_program(remote.front());
  STRATA_CHECK(!agent.empty(), "the remote shell '", remote.front(), "' to start rank ", rank, " on host '",
               o.hosts[size_t(host)].host, "' was not found");
  return {agent, remote, env, rank, host};
}

}  // namespace detail

namespace {

// The subnets (CIDR) of the named interfaces on the hosts, comma-separated, when this host
// has an address in one of them; else empty.
std::string oob_subnets(const std::vector<std::vector<NetIface>>& ifs, const std::vector<std::string>& names) {
  std::vector<std::string> nets;
  for (const auto& host : ifs)
    for (const NetIface& f : host)
      if (std::count(names.begin(), names.end(), f.name) && !f.subnet.empty() &&
          !std::count(nets.begin(), nets.end(), f.subnet))
        nets.push_back(f.subnet);
  bool here = false;
  for (const NetIface& f : local_interfaces()) here |= std::count(nets.begin(), nets.end(), f.subnet) > 0;
  std::string out;
  for (const std::string& n : nets) out += (out.empty() ? "" : ",") + n;
  return here ? out : "";
}

// Checks the options and decides what to run; starts nothing (a failure here leaves nothing
// behind but the mpi status directory, which the caller's guard owns from then on).
LaunchPlan plan_launch(const LaunchOptions& o) {
  STRATA_CHECK(o.nproc >= 1, "the number of ranks must be at least 1, got ", o.nproc);
  STRATA_CHECK(!o.command.empty(), "no program to launch (give it after --)");
  std::string prog = find_program(o.command[0]);
  STRATA_CHECK(!prog.empty(), "program '", o.command[0], "' not found",
               o.command[0].find('/') == std::string::npos ? " in PATH" : "", " or not executable");
  LaunchPlan plan;
  plan.job_id = o.job_id.empty() ? new_job_id() : o.job_id;
  std::vector<std::pair<std::string, std::string>> common = o.extra_env;
  common.push_back({"STRATA_JOB_ID", plan.job_id});
  common.push_back({"STRATA_LAUNCHER_PID", std::to_string(getpid())});
  common.push_back({"STRATA_BACKEND", backend_name(o.backend)});
  if (o.timeout_s > 0) common.push_back({"STRATA_TIMEOUT", cat(o.timeout_s)});
  STRATA_CHECK(!o.live || o.backend != Backend::mpi,
               "live recovery (--recovery live) needs the shm backend (one host) or the tcp backend: "
               "OpenMPI cannot shrink a communicator");
  // Named like the job's shm objects, so it goes with them (remove_job_segments); across hosts
  // keys of the job's store.
  if (o.live && o.backend == Backend::shm)
    common.push_back({"STRATA_LIVE_FILE", cat("/dev/shm/strata-", plan.job_id, "-live")});
  if (o.live && o.backend == Backend::tcp) common.push_back({"STRATA_LIVE_KEY", cat(plan.job_id, "/live/")});
  STRATA_CHECK(o.hosts.empty() || o.backend != Backend::shm,
               "hosts are given, but the shm backend runs on one host (use --backend mpi or tcp)");
  STRATA_CHECK(o.ifaces.empty() || o.backend == Backend::mpi,
               "--iface ", o.ifaces.front(), " is given, but only the mpi backend uses network interfaces (use --backend mpi)");
  std::vector<std::vector<NetIface>> ifs;  // of each host, when there are hosts
  if (!o.hosts.empty()) {
    check_hosts(o.hosts, o.nproc, o.hosts_source);
    ifs = check_reachable(o.hosts, o.rsh_agent, o.reach_timeout_s);
    std::vector<std::string> names;
    for (const HostSlots& h : o.hosts) names.push_back(h.host);
    std::vector<std::string> problems = interface_problems(names, ifs, o.ifaces);
    if (!problems.empty()) fail(problems.front());
  } else if (!o.ifaces.empty()) {
    std::vector<std::string> problems = interface_problems({host_name()}, {local_interfaces()}, o.ifaces);
    if (!problems.empty()) fail(problems.front());
  }
  // tcp: the job's store, at this host's address on the hosts' subnet (the interfaces just read).
  if (o.backend == Backend::tcp && o.store)
    common.push_back({"STRATA_STORE", cat(o.hosts.empty() ? std::string("127.0.0.1") : store_host_for(ifs, o.hosts),
                                          ":", o.store->port())});
  if (o.backend == Backend::mpi) {
    std::string mpirun = find_program(o.mpirun);
    STRATA_CHECK(!mpirun.empty(), "'", o.mpirun,
                 "' not found: the mpi backend needs OpenMPI's mpirun (install openmpi-bin) or "
                 "use --backend shm");
    std::vector<std::string> argv = {mpirun, "-n", std::to_string(o.nproc), "--tag-output",
                                     "--bind-to", "none"};
    if (o.hosts.empty()) {
      argv.push_back("--oversubscribe");
    } else {
      argv.insert(argv.end(), {"--host", format_hosts(o.hosts)});
      if (!o.rsh_agent.empty()) argv.insert(argv.end(), {"--mca", "plm_rsh_agent", o.rsh_agent});
    }
    if (!o.ifaces.empty()) {
      std::string list;
      for (const std::string& i : o.ifaces) list += (list.empty() ? "" : ",") + i;
      argv.insert(argv.end(), {"--mca", "btl_tcp_if_include", list});
      // mpirun's control channel starts on this host, whose interface names need not match
      // the hosts': it is restricted to the named interfaces' subnets instead, when this
      // host has an address in one of them.
      std::string oob = oob_subnets(ifs.empty() ? std::vector<std::vector<NetIface>>{local_interfaces()} : ifs, o.ifaces);
      if (!oob.empty()) argv.insert(argv.end(), {"--mca", "oob_tcp_if_include", oob});
    }
    if (geteuid() == 0) argv.push_back("--allow-run-as-root");
    for (auto& [k, v] : common) {
      argv.push_back("-x");
      argv.push_back(k + "=" + v);
    }
    for (const std::string& k : forwarded_env(common)) argv.insert(argv.end(), {"-x", k});
    for (const std::string& a : o.mpirun_args) argv.push_back(a);
    // The ranks' exit records need a directory every host sees; across hosts mpirun's own
    // messages name the failing rank.
    if (!o.rank_exec.empty() && o.hosts.empty()) {
      char tmpl[] = "/tmp/strata-ranks-XXXXXX";
      STRATA_CHECK(mkdtemp(tmpl), "cannot create a directory for rank exit records: ",
                   std::strerror(errno));
      plan.status_dir = tmpl;
      for (const char* a : {o.rank_exec.c_str(), "rank-exec", plan.status_dir.c_str(), "--"})
        argv.push_back(a);
    }
    argv.push_back(prog);
    for (size_t i = 1; i < o.command.size(); ++i) argv.push_back(o.command[i]);
    plan.procs.push_back({mpirun, argv, common, -1});
  } else {
    // One process per rank; across hosts (tcp) the ranks fill the hosts' slots in order, as
    // mpirun's do.
    std::vector<int> host_of(size_t(o.nproc), -1), local(size_t(o.nproc), 0);
    std::vector<int> on_host(std::max<size_t>(1, o.hosts.size()), 0);
    for (int r = 0, h = 0; r < o.nproc; ++r) {
      if (!o.hosts.empty()) {
        while (on_host[size_t(h)] == o.hosts[size_t(h)].slots) ++h;
        host_of[size_t(r)] = h;
      }
      local[size_t(r)] = on_host[size_t(h)]++;
    }
    plan.prog = prog;
    for (int r = 0; r < o.nproc; ++r) {
      auto env = common;
      const int h = host_of[size_t(r)];
      env.push_back({"STRATA_RANK", std::to_string(r)});
      env.push_back({"STRATA_WORLD_SIZE", std::to_string(o.nproc)});
      env.push_back({"STRATA_LOCAL_RANK", std::to_string(local[size_t(r)])});
      env.push_back({"STRATA_LOCAL_WORLD_SIZE", std::to_string(on_host[size_t(std::max(h, 0))])});
      if (o.live) env.push_back({"STRATA_LIVE_ID", std::to_string(r + 1)});
      plan.procs.push_back(rank_proc(o, prog, env, r, h));
      if (o.live) plan.procs.back().live_id = r + 1;
    }
  }
  return plan;
}

}  // namespace

namespace detail {

JobGuard::JobGuard(std::string job_id, std::string status_dir)
    : job_id_(std::move(job_id)), status_dir_(std::move(status_dir)) {
  struct sigaction sa {};
  sa.sa_handler = on_launcher_signal;
  sigemptyset(&sa.sa_mask);
  g_stop_signal = 0;
  sigaction(SIGINT, &sa, &old_int_);
  sigaction(SIGTERM, &sa, &old_term_);
}

JobGuard::~JobGuard() {
  for (Child& c : children)
    if (c.running) {
      if (kill(-c.pid, SIGKILL) != 0) kill(c.pid, SIGKILL);
      while (waitpid(c.pid, &c.status, 0) < 0 && errno == EINTR) {}
      c.running = false;
    }
  for (int fd : fds)
    if (fd >= 0) close(fd);
  sigaction(SIGINT, &old_int_, nullptr);
  sigaction(SIGTERM, &old_term_, nullptr);
  remove_job_segments(job_id_);
  for (const std::string& job : live_jobs) remove_job_segments(job);
  if (!status_dir_.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(status_dir_, ec);
  }
}

void JobGuard::signal_all(int sig) {
  for (Child& c : children) {
    if (!c.running) continue;
    if (kill(-c.pid, sig) != 0) kill(c.pid, sig);
    if (sig == SIGTERM && kill(-c.pid, SIGCONT) != 0) kill(c.pid, SIGCONT);
  }
}

}  // namespace detail

namespace {

// Creates the pipes and starts every process of the plan; the guard owns each pid and fd
// as soon as it exists. Returns one sink per stdout/stderr stream.
std::vector<LineSink> start_children(const LaunchPlan& plan, const LaunchOptions& o, JobGuard& g) {
  std::vector<std::pair<int, int>> pipes;  // (read end, write end) per sink
  std::vector<int> read_ends;
  for (size_t i = 0; i < plan.procs.size() * 2; ++i) {
    int p[2];
    STRATA_CHECK(pipe2(p, O_CLOEXEC) == 0, "pipe failed: ", std::strerror(errno));
    g.fds.push_back(p[0]);
    g.fds.push_back(p[1]);
    pipes.push_back({p[0], p[1]});
    read_ends.push_back(p[0]);
  }
  std::vector<LineSink> sinks;
  for (size_t i = 0; i < plan.procs.size(); ++i) {
    const Proc& l = plan.procs[i];
    Child c;
    c.rank = l.rank;
    c.live_rank = l.rank;
    c.pid = spawn(l.path, l.argv, l.env, pipes[2 * i].second, pipes[2 * i + 1].second,
                  read_ends.data(), int(read_ends.size()));
    c.running = true;
    c.host = l.host;
    c.live_id = l.live_id > 0 ? l.live_id : c.pid;
    g.last_live_id = std::max(g.last_live_id, l.live_id);
    g.children.push_back(c);
    if (o.on_spawn) o.on_spawn(l.rank, int64_t(c.pid));
    for (int s = 0; s < 2; ++s) {
      LineSink sink;
      sink.fd_in = pipes[2 * i + s].first;
      sink.fd_out = s == 0 ? 1 : 2;
      sink.rank = l.rank;
      sink.prefix = o.prefix_output;
      sink.tagged = MpirunOutput(!o.prefix_output);
      sinks.push_back(sink);
    }
  }
  for (size_t i = 0; i < pipes.size(); ++i) {  // the write ends now belong to the children
    close(g.fds[2 * i + 1]);
    g.fds[2 * i + 1] = -1;
  }
  return sinks;
}

// Forwards output and reaps children until all exited and all streams closed. The first
// failure (or a signal to the launcher) stops the others: SIGTERM, then SIGKILL after
// the grace period.
void supervise(JobGuard& g, std::vector<LineSink>& sinks, const LaunchOptions& o, LaunchResult& res) {
  int64_t kill_deadline = 0;  // when survivors get SIGKILL (0: not stopping)
  int64_t all_exited_ns = 0;  // when the last child exited
  int64_t abort_deadline = 0; // mpirun said it aborts the job: when it gets SIGKILL
  size_t mpirun_lines_seen = 0;
  for (;;) {
    std::vector<pollfd> pfds;
    std::vector<size_t> idx;
    for (size_t i = 0; i < sinks.size(); ++i)
      if (sinks[i].fd_in >= 0) {
        pfds.push_back({sinks[i].fd_in, POLLIN, 0});
        idx.push_back(i);
      }
    bool any_running = false;
    for (Child& c : g.children) any_running |= c.running;
    if (pfds.empty() && !any_running) break;
    // Every child has exited, but a process it left behind may hold the pipes: mpirun's
    // daemon on a host cut off mid-run (its link down) lives on until TCP gives up. Its
    // output is drained for a moment, not waited for.
    if (!any_running && !all_exited_ns) all_exited_ns = now_ns();
    if (!any_running && now_ns() - all_exited_ns > int64_t(2e9)) break;
    int n = poll(pfds.data(), pfds.size(), 20);
    for (int i = 0; n > 0 && i < int(pfds.size()); ++i)
      if (pfds[size_t(i)].revents) {
        LineSink& s = sinks[idx[size_t(i)]];
        int fd = s.fd_in;
        if (!s.drain())  // it closed its stream
          std::replace(g.fds.begin(), g.fds.end(), fd, -1);
      }
    for (Child& c : g.children) {
      if (!c.running) continue;
      int status = 0;
      if (waitpid(c.pid, &status, WNOHANG) != c.pid) continue;
      c.running = false;
      c.status = status;
      bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
      if (!ok && c.rank >= 0 && std::count(o.may_fail.begin(), o.may_fail.end(), c.rank)) {
        if (kill_deadline) continue;  // stopping everyone anyway
        const std::string line = cat("strata launch: rank ", c.rank, " ", describe_wait_status(status),
                                     "; the job goes on without it");
        log_line(o, line);
        continue;
      }
      if (g.joining(c.pid) || (c.live_rank < 0 && o.live)) {
        // A replacement that ended before it joined (or was stopped, the job done), or a
        // rank that went with its replica: the world goes on as it was, without the rest of
        // that replacement's replica.
        if (g.joining(c.pid) && !kill_deadline && !g_stop_signal) {
          const std::string line = cat("strata launch: the replacement for rank ", c.rank, " ",
                                       describe_wait_status(status), " before it joined; the job goes on");
          log_line(o, line);
        }
        if (g.joining(c.pid)) drop_joiners(g);
        continue;
      }
      if (!ok && o.live && WIFSIGNALED(status) && !kill_deadline && !g_stop_signal &&
          reform_without(g, c, status, o))
        continue;
      if (ok && o.live && c.live_rank >= 0 && !g.training_ended) dismiss_late_replacements(g, o);
      if (!ok && res.exit_code == 0 && (!kill_deadline || abort_deadline)) {
        res.exit_code = exit_code_of(status);
        if (c.rank >= 0) {
          res.failed_rank = c.rank;
          res.message = cat("rank ", c.rank, " ", describe_wait_status(status));
        }
        kill_deadline = now_ns() + int64_t(o.grace_s * 1e9);
        g.signal_all(SIGTERM);
      }
    }
    if (o.live && !kill_deadline && !g_stop_signal) kill_members_holding_the_world(g, o);
    if (o.live) {
      // Rejoin: one replacement at a time; it joins once ready, and goes if the job is done.
      if (g.joiners.empty() && !g.replacements_due.empty() && !kill_deadline && !g_stop_signal &&
          !g.training_ended && !live_members(g).empty()) {
        const std::vector<int> due = g.replacements_due.front();
        g.replacements_due.erase(g.replacements_due.begin());
        for (size_t slot = 0; slot < due.size(); ++slot) start_replacement(g, sinks, due[slot], int(slot), o);
      }
      if (!g.joiners.empty() && live_members(g).empty()) {  // the job is done without them
        drop_joiners(g);
      } else if (joiners_ready(g)) {
        join_replacement(g, o);
      }
    }
    // mpirun that reports a failed rank but cannot reach a host's daemon to stop it (a link
    // down) waits forever: it gets the grace period plus 2 s to finish its abort.
    for (LineSink& sk : sinks)
      if (sk.captured && !kill_deadline && !sk.captured->empty() &&
          sk.captured->size() != mpirun_lines_seen) {
        for (size_t i = mpirun_lines_seen; i < sk.captured->size(); ++i)
          if ((*sk.captured)[i].find("abort is already in progress") != std::string::npos ||
              (*sk.captured)[i].find("the job has been aborted") != std::string::npos)
            abort_deadline = abort_deadline ? abort_deadline : now_ns() + int64_t((o.grace_s + 2) * 1e9);
        mpirun_lines_seen = sk.captured->size();
      }
    if (abort_deadline && !kill_deadline && now_ns() > abort_deadline) {
      kill_deadline = INT64_MAX;
      g.signal_all(SIGKILL);
    }
    if (g_stop_signal && !kill_deadline) {
      res.exit_code = 128 + g_stop_signal;
      res.interrupted = true;
      res.message = cat("stopped by signal ", int(g_stop_signal), " (", strsignal(g_stop_signal), ")");
      kill_deadline = now_ns() + int64_t(o.grace_s * 1e9);
      g.signal_all(SIGTERM);
    }
    if (kill_deadline && now_ns() > kill_deadline) {
      g.signal_all(SIGKILL);
      kill_deadline = INT64_MAX;
    }
  }
}

// A rank that timed out exits non-zero and so is the first to fail, while the rank it waited
// on (hung in compute, or stopped) says nothing: the failure names that rank first, as the
// timed-out rank's line says, and the exit after it.
void name_unanswering_rank(LaunchResult& res, const std::vector<std::pair<int, std::string>>& timeouts,
                           const LaunchOptions& o) {
  if (res.failed_rank < 0 || res.interrupted || !o.hosts.empty() ||
      res.message.rfind(cat("rank ", res.failed_rank, " exited with code "), 0) != 0)
    return;
  int hung = -1;
  const std::string said = unanswering_rank(timeouts, hung);
  if (said.empty() || hung == res.failed_rank || hung >= o.nproc) return;
  res.message = cat(said, "; ", res.message);
  res.failed_rank = hung;
}

}  // namespace

static LaunchResult launch_once(const LaunchOptions& o) {
  LaunchPlan plan = plan_launch(o);
  LaunchResult res;
  res.job_id = plan.job_id;
  JobGuard guard(plan.job_id, plan.status_dir);
  guard.plan = &plan;
  for (const auto& [k, v] : plan.procs.front().env) {
    if (k == "STRATA_LIVE_FILE") guard.board = live_board_of_files(v);
    if (k == "STRATA_LIVE_KEY" && o.store) guard.board = live_board_of_store(*o.store, v);
  }
  std::vector<LineSink> sinks = start_children(plan, o, guard);
  std::vector<std::string> mpirun_lines;
  std::vector<std::pair<int, std::string>> timeouts;
  std::vector<int> answered;
  for (LineSink& s : sinks) {
    s.timeouts = &timeouts;  // a rank's own stream, or mpirun's split by its tags
    if (s.rank < 0) {
      s.captured = &mpirun_lines;
      s.answered = &answered;
    }
  }
  supervise(guard, sinks, o, res);
  if (o.backend == Backend::mpi && res.exit_code != 0 && res.message.empty()) {
    int rank = -1;
    // The ranks' own records first; mpirun's messages do not always name the rank.
    if (!plan.status_dir.empty()) res.message = first_recorded_failure(plan.status_dir, rank);
    // The failed host comes from mpirun's report even when a surviving rank's record gives
    // the message (a rank that died with its host records nothing): --elastic drops it.
    int reported = -1;
    const std::string mpirun_says =
        parse_mpirun_failure(mpirun_lines, !o.hosts.empty(), reported, res.failed_host);
    res.message = leading_failure(res.message, rank, mpirun_says, reported, res.failed_host, o.hosts);
    res.failed_rank = rank;
    if (res.message.empty())
      res.message = cat("mpirun ", describe_wait_status(guard.children[0].status), timed_out_ranks(timeouts, o.hosts));
    if (res.failed_host.empty() && !o.hosts.empty()) {
      // A rank answered when its output said so (answers_after_failure) or its rank-exec
      // parent recorded how it ended; a host that died whole did neither (mpirun does not
      // always name the node of a daemon it lost: "unable to reliably start one or more
      // daemons").
      for (int r : recorded_ranks(plan.status_dir)) answered.push_back(r);
      const std::string host = silent_host(answered, o.hosts);
      if (!host.empty()) {
        res.failed_host = host;
        res.message = cat("host ", host, " was lost (none of its ranks answered mpirun's stop or "
                          "recorded how it ended; ", res.message, ")");
      }
    }
  }
  name_unanswering_rank(res, timeouts, o);
  if (!o.hosts.empty() && res.exit_code != 0 && !res.interrupted) {
    // What broke between the hosts (a link set down mid-run, a host gone): probed again.
    for (const std::string& p : host_network_problems(o.hosts, o.rsh_agent, std::min(5.0, o.reach_timeout_s), o.ifaces))
      res.message += "; " + p;
  }
  return res;
}

}  // namespace strata::launcher
