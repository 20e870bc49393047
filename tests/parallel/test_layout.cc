// Shard layout (any Ψ over any N, padding), bucket plans and the overlap arithmetic.
#include <numeric>

#include "core/error.h"
#include "gtest/gtest.h"
#include "parallel/layout.h"
#include "parallel/overlap.h"

namespace strata::parallel {
namespace {

TEST(ShardLayout, ShardsCoverEveryElementOnceForAnyPsiAndN) {
  for (int64_t psi : {0, 1, 2, 7, 10, 64, 1000, 1001})
    for (int n : {1, 2, 3, 4, 5, 8, 13}) {
      std::vector<int> owner(size_t(psi), -1);
      for (int r = 0; r < n; ++r) {
        ShardLayout l(psi, n, r);
        EXPECT_EQ(l.shard_elems(), (psi + n - 1) / n);
        EXPECT_LE(l.own().size(), l.shard_elems());
        for (int64_t i = l.own().begin; i < l.own().end; ++i) {
          EXPECT_EQ(owner[i], -1) << "element " << i << " owned twice";
          owner[i] = r;
        }
      }
      for (int64_t i = 0; i < psi; ++i) EXPECT_NE(owner[i], -1) << "psi " << psi << " n " << n;
    }
}

TEST(ShardLayout, SplitCountsOfARangeFollowTheOwners) {
  ShardLayout l(10, 4, 2);  // S = 3: [0,3) [3,6) [6,9) [9,10)
  EXPECT_EQ(l.split_counts({2, 7}), (std::vector<size_t>{1, 3, 1, 0}));
  EXPECT_EQ(l.own_offset_in({2, 7}), 4);
  EXPECT_EQ(l.own_part({2, 7}).begin, 6);
  EXPECT_EQ(l.own_part({2, 7}).end, 7);
  EXPECT_EQ(l.split_counts({9, 10}), (std::vector<size_t>{0, 0, 0, 1}));
  ShardLayout more_ranks_than_elements(2, 5, 4);  // S = 1; ranks 2..4 hold padding only
  EXPECT_TRUE(more_ranks_than_elements.own().empty());
  EXPECT_EQ(more_ranks_than_elements.split_counts({0, 2}), (std::vector<size_t>{1, 1, 0, 0, 0}));
}

TEST(ShardLayout, RejectsImpossiblePositions) {
  EXPECT_THROW(ShardLayout(10, 0, 0), Error);
  EXPECT_THROW(ShardLayout(10, 2, 2), Error);
  EXPECT_THROW(ShardLayout(-1, 2, 0), Error);
}

TEST(Buckets, ReverseUnitOrderUnderTheCap) {
  // units: 0:[0,50) 1:[50,80) 2:[80,110) 3:[110,115)
  std::vector<Range> units = {{0, 50}, {50, 80}, {80, 110}, {110, 115}};
  auto b = plan_buckets(units, 40);
  ASSERT_EQ(b.size(), 3u);
  EXPECT_EQ(b[0].first_unit, 3);
  EXPECT_EQ(b[0].last_unit, 2);  // 5 + 30 <= 40
  EXPECT_EQ(b[0].range.begin, 80);
  EXPECT_EQ(b[0].range.end, 115);
  EXPECT_EQ(b[1].first_unit, 1);
  EXPECT_EQ(b[2].first_unit, 0);  // over the cap: alone
  EXPECT_EQ(b[2].range.size(), 50);
  auto big = plan_buckets(units, 1000);  // everything fits, but unit 0 stays alone
  ASSERT_EQ(big.size(), 2u);
  EXPECT_EQ(big[0].first_unit, 3);
  EXPECT_EQ(big[0].last_unit, 1);
  EXPECT_EQ(big[1].first_unit, 0);
  EXPECT_EQ(big[1].last_unit, 0);
  EXPECT_EQ(plan_buckets(units, 1).size(), 4u);
  EXPECT_THROW(plan_buckets(units, 0), Error);
  EXPECT_EQ(bucket_cap_elems(1.0, 4), 262144);
  EXPECT_EQ(bucket_cap_elems(1e-9, 4), 1);
}

TEST(Overlap, HiddenShareFromIntervals) {
  // comm [0,10) and [20,30); compute [5,25): hidden 5 + 5 of 20.
  OverlapStats s = overlap_intervals({{0, 10}, {20, 30}}, {{5, 15}, {10, 25}});
  EXPECT_EQ(s.comm_ns, 20);
  EXPECT_EQ(s.hidden_ns, 10);
  EXPECT_EQ(s.compute_ns, 20);
  EXPECT_DOUBLE_EQ(s.hidden_share(), 0.5);
  EXPECT_DOUBLE_EQ(overlap_intervals({}, {{0, 5}}).hidden_share(), 1.0);
  EXPECT_EQ(overlap_intervals({{0, 10}, {2, 4}}, {}).comm_ns, 10);  // nested comm counted once
}

TEST(Overlap, SelectsSpansFromTraceEvents) {
  std::vector<TraceEvent> ev = {
      {"backward L1", "compute", 0, 100, 0, ""},
      {"allreduce world #3", "comm", 50, 100, 1, ""},  // 50 hidden of 100
      {"allgather world #4", "comm", 300, 10, 1, ""},  // not gradient communication
      {"issue allreduce #3", "comm_issue", 50, 0, 0, ""},
  };
  OverlapStats g = overlap(ev, gradient_comm_filter());
  EXPECT_EQ(g.comm_spans, 1);
  EXPECT_EQ(g.comm_ns, 100);
  EXPECT_EQ(g.hidden_ns, 50);
  OverlapStats all = overlap(ev);
  EXPECT_EQ(all.comm_ns, 110);
}

}  // namespace
}  // namespace strata::parallel
