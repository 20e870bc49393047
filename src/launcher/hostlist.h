// Hosts of a multi-host job and their slots: `--hosts a:2,b:2`, or a hostfile in OpenMPI's
// format ("a slots=2" per line; '#' starts a comment; a host without slots= has 1).
// Checks run before anything starts: a host named twice, zero slots, more ranks than
// slots, and hosts that cannot be reached through the remote shell mpirun will use.
#pragma once
#include <string>
#include <string_view>
#include <vector>

#include "launcher/netif.h"

namespace strata::launcher {

struct HostSlots {
  std::string host;
  int slots = 1;
};

// "a:2,b:2" (":N" optional, default 1). Throws Error naming --hosts and the bad entry.
std::vector<HostSlots> parse_hosts(std::string_view spec);
// Throws Error naming the file and line.
std::vector<HostSlots> parse_hostfile(const std::string& path);
// "a:2,b:2", as mpirun's --host takes it.
std::string format_hosts(const std::vector<HostSlots>& hosts);
int total_slots(const std::vector<HostSlots>& hosts);
// Throws Error when a host appears twice or nproc exceeds the slots; `what` names the source
// ("--hosts" or "hostfile PATH").
void check_hosts(const std::vector<HostSlots>& hosts, int nproc, const std::string& what);
// This machine under one of its names (its host name, localhost, 127.0.0.1).
bool is_this_host(const std::string& host);
// Runs the sh `script` on `host` through the remote shell (AGENT: rsh_agent, else
// $OMPI_MCA_plm_rsh_agent, else ssh in batch mode), at most timeout_s; returns what it printed.
// When it does not exit 0, `problem` says so in one line ("host 'b' is unreachable: ...").
std::string run_on_host(const std::string& host, const std::string& rsh_agent, double timeout_s,
                        const std::string& script, std::string& problem);
// The command that runs the sh `script` on `host` through the remote shell (as run_on_host
// does), for exec: AGENT HOST SCRIPT.
std::vector<std::string> remote_shell_argv(const std::string& host, const std::string& rsh_agent,
                                           const std::string& script);
// `s` as one word of sh: 'it'\''s'.
std::string shell_quote(const std::string& s);
// Runs `AGENT HOST <interface probe>` (AGENT: rsh_agent, else $OMPI_MCA_plm_rsh_agent, else
// ssh in batch mode; launcher/netif.h) for every host that is not this machine, at most
// timeout_s each; throws Error naming the first host that does not answer and what the
// agent said. Returns each host's interfaces (this machine's read locally).
std::vector<std::vector<NetIface>> check_reachable(const std::vector<HostSlots>& hosts,
                                                   const std::string& rsh_agent, double timeout_s);
// The same, but a host that does not answer gives a problem line instead of an Error; the
// lines of launcher/netif.h's interface_problems follow (after a job failed: what broke).
std::vector<std::string> host_network_problems(const std::vector<HostSlots>& hosts,
                                               const std::string& rsh_agent, double timeout_s,
                                               const std::vector<std::string>& wanted_ifaces);

}  // namespace strata::launcher
