// The multi-host flag family, for `strata launch`, `strata train` and `strata doctor net`:
//   --hosts a:2,b:2 | --hostfile FILE | --slurm   [--rsh-agent AGENT] [--iface IF[,IF]]
// (launcher/hostlist.h, launcher/slurm_hosts.h, launcher/netif.h).
#pragma once
#include <string>
#include <vector>

#include "cli/flags/family.h"
#include "launcher/hostlist.h"

namespace CLI {
class App;
}

namespace strata::cli {

struct HostFlags {
  std::string hosts, hostfile, rsh_agent, iface;
  bool slurm = false;

  void add_to(CLI::App& app, const Only& only = {});
  // After parsing: the hosts (empty: this host only) and where they came from ("--hosts",
  // "hostfile F", "Slurm"), the interfaces. Throws one line for bad or conflicting flags.
  struct Resolved {
    std::vector<launcher::HostSlots> hosts;
    std::string source = "--hosts";
    std::string rsh_agent;
    std::vector<std::string> ifaces;
  };
  Resolved resolve() const;
};

}  // namespace strata::cli
