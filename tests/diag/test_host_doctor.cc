// The bandwidth doctor across hosts, judged on synthetic measurements (no root, no
// network): each finding is named, healthy clusters get none. The same faults injected
// into a namespace cluster: tests/comm/test_multihost.cc (MultiHost.Doctor*).
#include <gtest/gtest.h>

#include "diag/host_net.h"
#include "diag/net_doctor.h"
#include "nlohmann/json.hpp"

using namespace strata::diag;

namespace {

// H hosts of `per` ranks, every link at `gbps` raw and over MPI, MPI's bytes all on eth0.
HostNetResult cluster(int H, int per, double gbps) {
  HostNetResult r;
  for (int h = 0; h < H; ++h) {
    r.hosts.push_back("h" + std::to_string(h));
    r.ifaces.push_back({{"eth0", "10.0.0." + std::to_string(h), "10.0.0.0/24", true, "up", 0, 0},
                        {"lo", "127.0.0.1", "127.0.0.0/8", true, "unknown", 0, 0}});
  }
  for (int q = 0; q < H * per; ++q) r.host_of.push_back(q / per);
  for (int a = 0; a < H; ++a)
    for (int b = 0; b < H; ++b)
      if (a != b) r.links.push_back({a, b, gbps, {{"eth0", 4u << 20}}, {{"eth0", gbps, ""}}});
  return r;
}

std::vector<std::string> kinds(const std::vector<HostFinding>& f) {
  std::vector<std::string> out;
  for (auto& x : f) out.push_back(x.kind);
  return out;
}

std::vector<CollectiveResult> colls(double busbw) {
  return {{"allreduce", 1u << 20, 100, busbw, busbw}, {"alltoall", 1u << 20, 100, busbw, busbw / 2}};
}

}  // namespace

TEST(HostDoctor, HealthyClusterHasNoFindings) {
  HostNetResult r = cluster(3, 2, 0.12);
  // busbw bound on 3 hosts x 2 ranks at 0.12 GB/s: 0.12 x 3/2 x 5/6 = 0.15 (all-to-all / 2)
  EXPECT_TRUE(judge_hosts(r, colls(0.14), 0.5, 0).empty());
  EXPECT_EQ(kinds(judge_hosts(r, colls(0.05), 0.5, 0)), (std::vector<std::string>{"collective", "collective"}));
}

TEST(HostDoctor, WrongInterfaceNamesTheFix) {
  HostNetResult r = cluster(2, 1, 0.12);
  for (auto& l : r.links) {
    l.mpi_gbps = 0.025;
    l.tx_bytes = {{"eth0", 2u << 20}, {"eth1", 2u << 20}};
    l.raw.push_back({"eth1", 0.012, ""});
  }
  auto f = judge_hosts(r, {}, 0.5, 0);
  ASSERT_EQ(kinds(f), std::vector<std::string>{"wrong-iface"});
  EXPECT_EQ(f[0].text,
            "traffic on the wrong interface: MPI sent h0 -> h1 50% over eth0 (raw TCP 0.120 GB/s), 50% over eth1 "
            "(raw TCP 0.012 GB/s); it reached 0.025 GB/s, 0.21x what eth0 carries alone (0.120 GB/s). Fix: --iface "
            "eth0 (strata launch/train/doctor; OpenMPI: --mca btl_tcp_if_include eth0)");
  // MPI on the fast interface alone: nothing to fix.
  for (auto& l : r.links) l.tx_bytes = {{"eth0", 4u << 20}, {"eth1", 0}}, l.mpi_gbps = 0.11;
  EXPECT_TRUE(judge_hosts(r, {}, 0.5, 0).empty());
}

TEST(HostDoctor, DegradedLinkNamesTheHost) {
  HostNetResult r = cluster(3, 1, 0.12);
  for (auto& l : r.links)
    if (l.from == 2) l.mpi_gbps = l.raw[0].gbps = 0.03;
  auto f = judge_hosts(r, {}, 0.5, 0);
  ASSERT_EQ(kinds(f), std::vector<std::string>{"degraded"});
  EXPECT_EQ(f[0].text, "degraded link: host h2's uplink runs at 0.25x the reference link (0.120 GB/s): "
                       "h2 -> h0 0.030 GB/s over eth0, h2 -> h1 0.030 GB/s over eth0");
  // Both directions of h1 slow: its uplink and its downlink.
  r = cluster(3, 1, 0.12);
  for (auto& l : r.links)
    if (l.from == 1 || l.to == 1) l.mpi_gbps = l.raw[0].gbps = 0.03;
  EXPECT_EQ(kinds(judge_hosts(r, {}, 0.5, 0)), (std::vector<std::string>{"degraded", "degraded"}));
  // Two hosts: one slow direction is named once, from its sender.
  r = cluster(2, 1, 0.12);
  r.links[1].mpi_gbps = r.links[1].raw[0].gbps = 0.03;
  f = judge_hosts(r, {}, 0.5, 0);
  ASSERT_EQ(kinds(f), std::vector<std::string>{"degraded"});
  EXPECT_NE(f[0].text.find("host h1's uplink (or host h0's downlink)"), std::string::npos) << f[0].text;
  // Against an expected link speed every link is slow: each host is named.
  EXPECT_EQ(judge_hosts(cluster(2, 1, 0.12), {}, 0.5, 1.0).size(), 2u);
}

TEST(HostDoctor, DownInterfaceAndTopology) {
  HostNetResult r = cluster(2, 2, 0.12);
  r.ifaces[1][0].up = false, r.ifaces[1][0].state = "down";
  r.tp = {2, {{0, 1}, {2, 3}}, 5000, 500, 4u << 20};
  r.host_of = {0, 1, 0, 1};
  auto f = judge_hosts(r, {}, 0.5, 0);
  ASSERT_EQ(kinds(f), (std::vector<std::string>{"down", "topology"}));
  EXPECT_EQ(f[0].text, "interface down: interface eth0 of host 'h1' is down while it is up on host 'h0'");
  EXPECT_EQ(f[1].text,
            "topology strata did not choose: 2 tp group(s) of 2 span hosts (ranks 0 1 on h0, h1; ranks 2 3 on h0, "
            "h1; placement h0: 0 2; h1: 1 3). An all-reduce of 4096 KiB over a tp group takes 5.0 ms, on 2 ranks of "
            "one host 0.5 ms (10.0x), and every tensor-parallel layer pays it. Start ranks host by host (strata "
            "launch/train --hosts or --hostfile fill each host in order; mpirun --map-by slot), so tp peers share a "
            "host.");
  // The report survives its JSON.
  HostNetResult back = host_result_from_json(host_report_json(r));
  EXPECT_EQ(kinds(judge_hosts(back, {}, 0.5, 0)), kinds(f));
}
