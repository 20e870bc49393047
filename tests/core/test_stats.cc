#include <gtest/gtest.h>

#include "core/stats.h"

using namespace strata;

TEST(Stats, MedianOfOddAndEvenCounts) {
  EXPECT_DOUBLE_EQ(median({}), 0);
  EXPECT_DOUBLE_EQ(median({7}), 7);
  EXPECT_DOUBLE_EQ(median({3, 1, 2}), 2);
  // Even count: the mean of the two middle values, not the upper one.
  EXPECT_DOUBLE_EQ(median({4, 1, 3, 2}), 2.5);
  EXPECT_DOUBLE_EQ(median({10, 20}), 15);
}

TEST(Stats, MeanAndPercentiles) {
  EXPECT_DOUBLE_EQ(mean({}), 0);
  EXPECT_DOUBLE_EQ(mean({1, 2, 6}), 3);
  const std::vector<double> v = {5, 1, 4, 2, 3};
  EXPECT_DOUBLE_EQ(percentile(v, 0), 1);
  EXPECT_DOUBLE_EQ(percentile(v, 100), 5);
  EXPECT_DOUBLE_EQ(percentile(v, 25), 2);
  EXPECT_DOUBLE_EQ(percentile({0, 10}, 90), 9);
  EXPECT_DOUBLE_EQ(percentile(v, 150), 5);
}
