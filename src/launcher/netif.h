// Network interfaces of a host: names, IPv4 addresses, state and byte counters, read on this
// host (its network namespace) or on another through the remote shell mpirun uses (which
// needs iproute2's `ip` there for the addresses). The
// launcher checks them before a multi-host job starts (`--iface` names that do not exist or
// are down, an interface down on one host but up on the others) and again after a job
// failed (a link set down mid-run); the bandwidth doctor counts the bytes each interface
// carried to see which one MPI used.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace strata::launcher {

struct NetIface {
  std::string name;
  std::string ipv4;           // the first IPv4 address; empty if none
  std::string subnet;         // its network in CIDR form ("10.77.37.0/24"); empty if none
  bool up = false;            // administratively up and with a carrier
  std::string state;          // operstate: "up", "down", "lowerlayerdown", "unknown" (lo), ...
  uint64_t tx_bytes = 0, rx_bytes = 0;
  bool loopback() const { return name == "lo"; }
};

// This process's interfaces (getifaddrs and /proc/net/dev), sorted by name.
std::vector<NetIface> local_interfaces();

// The shell snippet another host runs (through ssh or the rsh agent) to print its
// interfaces, and the parser of what it printed ("NAME OPERSTATE FLAGS [ADDR/PREFIX]" per
// line).
extern const char* const kIfaceProbeScript;
std::vector<NetIface> parse_iface_probe(std::string_view text);

// "eth0" or "eth0,ib0" (--iface): names of 1-15 characters of [A-Za-z0-9_.:-]; throws Error
// naming --iface and the bad name.
std::vector<std::string> parse_iface_list(std::string_view spec);

// "10.77.37.10/24" -> "10.77.37.0/24"; empty for anything else.
std::string subnet_of(const std::string& addr_prefix);

// What is wrong with the interfaces of `hosts` (ifs[i] belongs to hosts[i]), one sentence
// each naming the host and the interface: with `wanted` (--iface), a wanted interface that
// a host lacks or that is down there; without, an interface (not lo) that is down on a host
// but up on another. Empty: nothing wrong.
std::vector<std::string> interface_problems(const std::vector<std::string>& hosts,
                                            const std::vector<std::vector<NetIface>>& ifs,
                                            const std::vector<std::string>& wanted);

}  // namespace strata::launcher
