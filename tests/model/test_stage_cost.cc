// The pipeline's layer costs and the split that balances them (model/stage_cost.h).
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>

#include "model/stage_cost.h"

namespace strata::model {
namespace {

GPTConfig small() {
  GPTConfig c;
  c.layers = 4;
  c.dim = 64;
  c.heads = 2;
  c.seq = 32;
  c.vocab = 256;
  c.padded_vocab = 256;
  return c;
}

LayerCosts costs(double embed, double block, double head) {
  LayerCosts c;
  c.embed = {embed, 0, 0};
  c.block = {block / 3, 2 * block / 3, 0};
  c.head = {head / 3, 2 * head / 3, 0};
  return c;
}

int sum(const std::vector<int>& v) { return std::accumulate(v.begin(), v.end(), 0); }

// The most expensive stage is as cheap as it can be: a heavy head pushes blocks forward, a
// heavy embedding pushes them back, and equal layers split evenly.
TEST(StageCost, BalanceMinimisesTheMostExpensiveStage) {
  EXPECT_EQ(balance_layers(costs(0, 1, 0), 8, 2), (std::vector<int>{4, 4}));
  EXPECT_EQ(balance_layers(costs(0, 1, 0), 8, 4), (std::vector<int>{2, 2, 2, 2}));
  EXPECT_EQ(balance_layers(costs(0, 1, 2), 8, 2), (std::vector<int>{5, 3}));
  EXPECT_EQ(balance_layers(costs(2, 1, 0), 8, 2), (std::vector<int>{3, 5}));
  EXPECT_EQ(balance_layers(costs(0.1, 1, 0.2), 4, 3), (std::vector<int>{1, 2, 1}));
  // Every stage keeps a block, whatever the head costs.
  const std::vector<int> v = balance_layers(costs(0, 1, 100), 6, 3);
  EXPECT_EQ(v, (std::vector<int>{3, 2, 1}));
  for (int L = 1; L <= 9; ++L)
    for (int VP = 1; VP <= L; ++VP) {
      const std::vector<int> s = balance_layers(costs(0.3, 1, 1.7), L, VP);
      ASSERT_EQ(int(s.size()), VP);
      EXPECT_EQ(sum(s), L);
      for (int n : s) EXPECT_GE(n, 1);
    }
}

TEST(StageCost, SplitLayersTakesTheGivenSplitOrTheBalancedOne) {
  GPTConfig c = small();
  c.layers = 8;
  const auto by_cost = split_layers(c, 2, 1, {}, costs(0, 1, 2));
  ASSERT_EQ(by_cost.size(), 2u);
  EXPECT_EQ(by_cost[0].end, 5);
  EXPECT_TRUE(by_cost[0].embed && !by_cost[0].head && by_cost[1].head && !by_cost[1].embed);
  const auto given = split_layers(c, 2, 1, {2, 6}, costs(0, 1, 2));
  EXPECT_EQ(given[0].end, 2);
  EXPECT_THROW(split_layers(c, 2, 1, {2, 5}, costs(0, 1, 2)), Error);
  // The estimate: a block of 24·C² + 4·T·C flops per token against a head of 2·C·Vp.
  const LayerCosts e = estimate_layer_costs(c, 32, false);
  EXPECT_DOUBLE_EQ(e.block.f, 24.0 * 64 * 64 + 4.0 * 32 * 64);
  EXPECT_DOUBLE_EQ(e.block.b, 2 * e.block.f);
  EXPECT_DOUBLE_EQ(e.head.f, 2.0 * 64 * 256);
  const LayerCosts z = estimate_layer_costs(c, 32, true);
  EXPECT_DOUBLE_EQ(z.block.b, z.block.w);
  EXPECT_EQ(chunk_cost(e, by_cost[1]).f, 3 * e.block.f + e.head.f);
}

// The probe times real passes: positive, finite, a block's backward dearer than its forward,
// and the split backward's weight pass measured only when asked for.
TEST(StageCost, MeasuredCostsArePositiveAndSplitTheBackward) {
  const GPTConfig c = small();
  const LayerCosts m = measure_layer_costs(c, 2, 32, DType::f32, false, 2);
  EXPECT_TRUE(m.measured);
  EXPECT_GT(m.block.f, 0);
  EXPECT_GT(m.block.b, m.block.f);
  EXPECT_EQ(m.block.w, 0);
  for (const PassCost* p : {&m.embed, &m.block, &m.head})
    for (double x : {p->f, p->b, p->w}) EXPECT_TRUE(std::isfinite(x) && x >= 0);
  const LayerCosts z = measure_layer_costs(c, 2, 32, DType::f32, true, 2);
  EXPECT_GT(z.block.w, 0);
  std::printf("block f %.3f b %.3f ms; head f %.3f b %.3f ms; embedding f %.3f b %.3f ms\n",
              1e3 * m.block.f, 1e3 * m.block.b, 1e3 * m.head.f, 1e3 * m.head.b, 1e3 * m.embed.f,
              1e3 * m.embed.b);
  EXPECT_THROW(measure_layer_costs(c, 2, 64, DType::f32, false), Error);
}

}  // namespace
}  // namespace strata::model
