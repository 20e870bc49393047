// Where tp groups land on hosts (parallel/placement.h): host by host they stay within a
// host; round-robin over hosts they span them, and the warning names them.
#include <gtest/gtest.h>

#include "parallel/placement.h"

using namespace strata;

TEST(Placement, TpGroupsWithinAHostByDefault) {
  // Ranks fill each host in order (strata launch --hosts a:2,b:2).
  comm::HostLayout host_by_host = comm::layout_from_names({"a", "a", "b", "b"});
  EXPECT_TRUE(parallel::tp_groups_spanning_hosts(host_by_host, {2, 2}).empty());
  EXPECT_EQ(parallel::tp_placement_warning(host_by_host, {2, 2}), "");
  // tp 4 over 2 hosts cannot stay within one.
  EXPECT_EQ(parallel::tp_groups_spanning_hosts(host_by_host, {4, 1}), (std::vector<std::vector<int>>{{0, 1, 2, 3}}));
}

TEST(Placement, RoundRobinSpreadsTpOverHosts) {
  comm::HostLayout rr = comm::layout_from_names({"a", "b", "a", "b"});  // mpirun --map-by node
  EXPECT_EQ(parallel::tp_groups_spanning_hosts(rr, {2, 2}), (std::vector<std::vector<int>>{{0, 1}, {2, 3}}));
  // With context parallelism too (tp 2 x cp 2 x dp 1): tp groups are still neighbours.
  EXPECT_EQ(parallel::tp_groups_spanning_hosts(rr, {2, 1, 2}), (std::vector<std::vector<int>>{{0, 1}, {2, 3}}));
  EXPECT_EQ(parallel::tp_placement_warning(rr, {2, 2}),
            "2 of 2 tp group(s) span hosts (ranks 0 1 on a, b; ranks 2 3 on a, b; 2 hosts x 2 ranks (a: 0 2; b: 1 3)): "
            "every tensor-parallel layer waits on the link between hosts. Start the ranks host by host with a "
            "multiple of --tp 2 on each (strata train --hosts, mpirun --map-by slot); `strata doctor net --tp 2` "
            "measures the cost");
  // Uneven hosts (3 + 1) with tp 2: the second group spans.
  comm::HostLayout uneven = comm::layout_from_names({"a", "a", "a", "b"});
  EXPECT_EQ(parallel::tp_groups_spanning_hosts(uneven, {2, 2}), (std::vector<std::vector<int>>{{2, 3}}));
}
