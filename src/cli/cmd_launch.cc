// strata launch -n N [--backend shm|mpi|tcp] [--timeout S] [--max-restarts R] -- PROGRAM ARGS
// strata launch --backend mpi --hosts a:2,b:2 | --hostfile F | --slurm [-n N] [--rsh-agent A] [--iface IF] -- ...
// Starts N local ranks (or mpirun for mpi, across hosts with --hosts / --hostfile; -n
// defaults to all their slots), prefixes their output with "[rank R] ", and
// stops the job when a rank fails, naming it; with --max-restarts, starts the whole job again
// (STRATA_RESTART=k in the ranks' environment) up to R times.
#include <sys/resource.h>

#include <cmath>
#include <cstdio>

#include "cli/command.h"
#include "cli/flags/fault.h"
#include "cli/flags/hosts.h"
#include "cli/flags/parallel.h"
#include "core/error.h"
#include "launcher/launcher.h"
#include "launcher/rank_status.h"

namespace strata::cli {

// Forked ranks each cost the launcher a process and a few descriptors (output pipes, status
// pipe): refuse a count the limits cannot hold before the first fork, naming both, instead of
// failing halfway with "pipe failed: Too many open files" or forking for minutes.
static void check_local_limits(int nproc) {
  constexpr int kFdsPerRank = 4, kFdsSpare = 32;
  rlimit fds{}, procs{};
  if (::getrlimit(RLIMIT_NOFILE, &fds) == 0 && fds.rlim_cur != RLIM_INFINITY) {
    const rlim_t can = fds.rlim_cur > kFdsSpare ? (fds.rlim_cur - kFdsSpare) / kFdsPerRank : 0;
    STRATA_CHECK(rlim_t(nproc) <= can, "-n/--nproc ", nproc, " needs about ", int64_t(nproc) * kFdsPerRank,
                 " open files; the limit (ulimit -n) is ", fds.rlim_cur, ", enough for ", can, " ranks");
  }
  if (::getrlimit(RLIMIT_NPROC, &procs) == 0 && procs.rlim_cur != RLIM_INFINITY)
    STRATA_CHECK(rlim_t(nproc) < procs.rlim_cur, "-n/--nproc ", nproc,
                 " ranks exceed the process limit (ulimit -u) of ", procs.rlim_cur);
}

static Register reg_launch("launch", "Start N ranks of a program on this host (or through mpirun)", [](CLI::App& app) {
  struct Args {
    int nproc = 1;
    double grace = 5;
    bool no_prefix = false;
    std::vector<std::string> command;
    // The families shared with `strata train`: the backend, the timeout, restarts, hosts.
    ParallelFlags parallel;
    FaultFlags faults;
    RecoveryFlags recovery;
    HostFlags host_flags;
  };
  auto a = std::make_shared<Args>();
  a->nproc = -1;  // unset
  a->parallel.add_to(app, {"--backend"});
  a->faults.add_to(app, {"--timeout"});
  a->recovery.add_to(app, {"--max-restarts"});
  CLI::Option* nproc_opt =
      app.add_option("-n,--nproc", a->nproc, "number of ranks (default with --hosts: all slots)");
  a->host_flags.add_to(app);
  app.add_option("--grace", a->grace, "seconds between SIGTERM and SIGKILL when stopping ranks")
      ->check(finite_at_most(kMaxSeconds));
  app.add_flag("--no-prefix", a->no_prefix, "do not prefix output lines with the rank");
  app.add_option("command", a->command, "program and arguments (after --)")->required();
  app.callback([a, nproc_opt] {
    launcher::LaunchOptions o;
    HostFlags::Resolved h = a->host_flags.resolve();
    o.hosts = h.hosts;
    o.hosts_source = h.source;
    o.rsh_agent = h.rsh_agent;
    o.ifaces = h.ifaces;
    const bool nproc_given = nproc_opt->count() > 0;
    STRATA_CHECK(nproc_given || !o.hosts.empty(),
                 "-n/--nproc is required (the number of ranks) unless --hosts or --hostfile gives the slots");
    STRATA_CHECK(!nproc_given || a->nproc >= 1, "-n/--nproc must be at least 1, got ", a->nproc);
    o.nproc = nproc_given ? a->nproc : launcher::total_slots(o.hosts);
    o.backend = comm::parse_backend(a->parallel.backend);
    if (o.backend == comm::Backend::shm) check_local_limits(o.nproc);
    STRATA_CHECK(std::isfinite(a->grace) && a->grace >= 0,
                 "--grace must be a non-negative number of seconds, got ", a->grace);
    STRATA_CHECK(a->faults.timeout_s >= 0, "--timeout must not be negative, got ", a->faults.timeout_s);
    o.timeout_s = a->faults.timeout_s;
    o.grace_s = a->grace;
    STRATA_CHECK(a->recovery.max_restarts >= 0, "--max-restarts must not be negative, got ",
                 a->recovery.max_restarts);
    o.max_restarts = a->recovery.max_restarts;
    o.prefix_output = !a->no_prefix;
    o.command = a->command;
    o.rank_exec = launcher::self_executable();
    launcher::LaunchResult r = launcher::launch(o);
    if (r.exit_code != 0) {
      std::fprintf(stderr, "strata launch: %s\n", r.message.c_str());
      throw ExitCode{r.exit_code};
    }
  });
});

}  // namespace strata::cli
