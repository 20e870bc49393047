// strata launch -n N [--backend shm|mpi] [--timeout S] [--max-restarts R] -- PROGRAM ARGS
// strata launch --backend mpi --hosts a:2,b:2 | --hostfile F | --slurm [-n N] [--rsh-agent A] [--iface IF] -- ...
// Starts N local ranks (or mpirun for mpi, across hosts with --hosts / --hostfile; -n
// defaults to all their slots), prefixes their output with "[rank R] ", and
// stops the job when a rank fails, naming it; with --max-restarts, starts the whole job again
// (STRATA_RESTART=k in the ranks' environment) up to R times.
#include <cstdio>

#include "cli/command.h"
#include "cli/host_flags.h"
#include "comm/launcher.h"
#include "comm/rank_status.h"
#include "core/error.h"

namespace strata::cli {

static Register reg("launch", "Start N ranks of a program on this host (or through mpirun)", [](CLI::App& app) {
  struct Args {
    int nproc = 1;
    std::string backend = "shm";
    double timeout = 0;
    double grace = 5;
    int max_restarts = 0;
    bool no_prefix = false;
    std::vector<std::string> command;
    HostFlags host_flags;
  };
  auto a = std::make_shared<Args>();
  a->nproc = -1;  // unset
  app.add_option("-n,--nproc", a->nproc, "number of ranks (default with --hosts: all slots)");
  a->host_flags.add_to(app);
  app.add_option("--backend", a->backend, "communication backend: shm (this host) or mpi (mpirun)");
  app.add_option("--timeout", a->timeout,
                 "seconds a communication operation may wait for its peers (sets STRATA_TIMEOUT)");
  app.add_option("--grace", a->grace, "seconds between SIGTERM and SIGKILL when stopping ranks");
  app.add_option("--max-restarts", a->max_restarts,
                 "restart the whole job after a failure, up to R times (sets STRATA_RESTART)");
  app.add_flag("--no-prefix", a->no_prefix, "do not prefix output lines with the rank");
  app.add_option("command", a->command, "program and arguments (after --)")->required();
  app.callback([a] {
    comm::LaunchOptions o;
    HostFlags::Resolved h = a->host_flags.resolve();
    o.hosts = h.hosts;
    o.hosts_source = h.source;
    o.rsh_agent = h.rsh_agent;
    o.ifaces = h.ifaces;
    STRATA_CHECK(a->nproc != -1 || !o.hosts.empty(),
                 "-n/--nproc is required (the number of ranks) unless --hosts or --hostfile gives the slots");
    o.nproc = a->nproc != -1 ? a->nproc : comm::total_slots(o.hosts);
    o.backend = comm::parse_backend(a->backend);
    STRATA_CHECK(a->timeout >= 0, "--timeout must not be negative, got ", a->timeout);
    o.timeout_s = a->timeout;
    o.grace_s = a->grace;
    STRATA_CHECK(a->max_restarts >= 0, "--max-restarts must not be negative, got ", a->max_restarts);
    o.max_restarts = a->max_restarts;
    o.prefix_output = !a->no_prefix;
    o.command = a->command;
    o.rank_exec = comm::self_executable();
    comm::LaunchResult r = comm::launch(o);
    if (r.exit_code != 0) {
      std::fprintf(stderr, "strata launch: %s\n", r.message.c_str());
      throw ExitCode{r.exit_code};
    }
  });
});

}  // namespace strata::cli
