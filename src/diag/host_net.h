// The bandwidth doctor across hosts: what `strata doctor net` (and `strata train
// --preflight`) adds when the ranks span several hosts.
//
// Terms. A host link a -> b is measured one direction at a time between the first rank of
// host a and the first rank of host b, the other ranks waiting at a barrier:
//   mpi   bytes MPI moved a -> b / time of the best repetition (messages then a 1-byte ack),
//         and the bytes each of a's interfaces sent meanwhile (/proc/net/dev), which shows
//         the interface(s) MPI's traffic took;
//   raw   one repetition's bytes over a plain TCP connection to b's address on each interface the
//         two hosts share (the expectation for that link: what the wire carries without MPI).
// The best raw rate of a link is its capacity; the reference is the fastest link's capacity,
// or --expect-link-gbps when given.
// Findings, each one sentence naming hosts, interfaces and numbers:
//   down          an interface down on a host while up on another (or an --iface down);
//   wrong-iface   MPI sent part of a link's bytes over an interface slower than the best one
//                 and ran below threshold x the best one's raw rate: names the fix (--iface);
//   degraded      every link out of (or into) one host below threshold x the reference;
//   collective    a collective's busbw below threshold x what the slowest host uplink allows
//                 (busbw bound: B x H/(H-1) x (N-1)/N for all-reduce, all-gather and
//                 reduce-scatter on H hosts of N ranks in all, over R for all-to-all);
//   topology      with --tp T: a tp group (T consecutive ranks, parallel/mesh.h) spread over
//                 hosts, with its cost: the tp group's all-reduce time vs the same on T ranks
//                 of one host.
// Cost: H(H-1) directed links x (reps x messages x bytes + interfaces x raw bytes), plus two
// all-reduces per --tp check.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "launcher/netif.h"
#include "nlohmann/json_fwd.hpp"

namespace strata::comm {
class ProcessGroup;
}

namespace strata::diag {

struct HostNetConfig {
  size_t bytes = size_t(1) << 20;      // per MPI message; also each raw TCP transfer
  int messages = 4;
  int reps = 3;
  double connect_timeout_s = 2;        // raw TCP connect / accept
  int tp = 0;                          // > 1: check the placement of tp groups of this size
  size_t tp_bytes = size_t(4) << 20;   // all-reduce size of the tp cost measurement
  std::vector<std::string> wanted_ifaces;  // --iface (for the down check)
};

struct RawProbe {
  std::string iface;
  double gbps = 0;     // 0: failed
  std::string error;   // why it failed
};

struct HostLink {
  int from = 0, to = 0;   // host indices
  double mpi_gbps = 0;
  std::vector<std::pair<std::string, uint64_t>> tx_bytes;  // sender's interfaces (not lo)
  std::vector<RawProbe> raw;
  // The best raw probe (empty name: none succeeded).
  const RawProbe* best_raw() const;
};

struct TpPlacement {
  int tp = 0;
  std::vector<std::vector<int>> spanning;  // tp groups (world ranks) that span hosts
  double group_us = 0, local_us = 0;       // all-reduce of tp_bytes: over a tp group; on one host
  size_t bytes = 0;
};

struct HostNetResult {
  std::vector<std::string> hosts;                   // by host index
  std::vector<int> host_of;                         // world rank -> host index
  std::vector<std::vector<launcher::NetIface>> ifaces;  // per host
  std::vector<HostLink> links;                      // every ordered pair of hosts
  TpPlacement tp;
  std::vector<std::string> wanted_ifaces;
};

// Collective over every rank of `world`; every rank returns the full result. One host:
// hosts/host_of filled, nothing measured.
HostNetResult measure_hosts(comm::ProcessGroup& world, const HostNetConfig& cfg);

struct HostFinding {
  std::string kind;  // "down", "wrong-iface", "degraded", "collective", "topology"
  std::string text;
};

struct CollectiveResult;
// Pure. expect_link_gbps <= 0: the reference is the fastest link's capacity.
std::vector<HostFinding> judge_hosts(const HostNetResult& r, const std::vector<CollectiveResult>& colls,
                                     double threshold, double expect_link_gbps);

std::string format_host_report(const HostNetResult& r);
nlohmann::json host_report_json(const HostNetResult& r);
HostNetResult host_result_from_json(const nlohmann::json& j);

}  // namespace strata::diag
