#include "cli/flags/hosts.h"

#include <CLI/CLI.hpp>

#include "core/error.h"
#include "core/files.h"
#include "launcher/slurm_hosts.h"

namespace strata::cli {

void HostFlags::add_to(CLI::App& app, const Only& only) {
  FamilyScope family(app, "Hosts", "parallelism", only);
  // An empty value would read as "not given" below and silently run on this host alone.
  const auto not_empty = [](const std::string& v) { return v.empty() ? std::string("needs a value, got ''") : std::string(); };
  app.add_option("--hosts", hosts, "mpi across hosts: host:slots,... (e.g. a:2,b:2); ranks fill each host in order")
      ->check(not_empty);
  app.add_option("--hostfile", hostfile, "mpi across hosts: OpenMPI hostfile (\"a slots=2\" lines)")->check(not_empty);
  app.add_flag("--slurm", slurm,
               "mpi across the hosts of this Slurm allocation (SLURM_JOB_NODELIST, SLURM_TASKS_PER_NODE)");
  app.add_option("--rsh-agent", rsh_agent, "remote shell mpirun starts ranks with (plm_rsh_agent; default ssh)");
  app.add_option("--iface", iface,
                 "network interface(s) MPI uses between hosts, e.g. eth0 (btl_tcp_if_include, oob_tcp_if_include)");
}

HostFlags::Resolved HostFlags::resolve() const {
  Resolved r;
  STRATA_CHECK(int(!hosts.empty()) + int(!hostfile.empty()) + int(slurm) <= 1,
               "give one of --hosts, --hostfile and --slurm");
  if (!hosts.empty()) r.hosts = launcher::parse_hosts(hosts);
  if (!hostfile.empty()) {
    require_regular_file(hostfile, "--hostfile");  // a FIFO would block the read forever
    r.hosts = launcher::parse_hostfile(hostfile);
    r.source = "hostfile " + hostfile;
  }
  if (slurm) {
    r.hosts = launcher::hosts_from_slurm_env();
    r.source = "Slurm (SLURM_JOB_NODELIST)";
  }
  r.rsh_agent = rsh_agent;
  if (!iface.empty()) r.ifaces = launcher::parse_iface_list(iface);
  return r;
}

}  // namespace strata::cli
