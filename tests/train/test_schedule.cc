// Learning-rate schedule: warmup and cosine values at known points.
#include <gtest/gtest.h>

#include <cmath>

#include "core/error.h"
#include "train/schedule.h"

using strata::train::Schedule;

TEST(Schedule, LinearWarmupReachesPeak) {
  Schedule s{/*lr=*/1e-3, /*min_lr=*/1e-4, /*warmup=*/10, /*steps=*/100};
  EXPECT_DOUBLE_EQ(s.lr_at(0), 1e-4);
  EXPECT_DOUBLE_EQ(s.lr_at(4), 5e-4);
  EXPECT_DOUBLE_EQ(s.lr_at(9), 1e-3);
  for (int i = 1; i < 10; ++i) EXPECT_GT(s.lr_at(i), s.lr_at(i - 1));
}

TEST(Schedule, CosineDecaysToMinAtLastStep) {
  Schedule s{1e-3, 1e-4, 10, 101};
  EXPECT_DOUBLE_EQ(s.lr_at(10), 1e-3);              // progress 0
  EXPECT_NEAR(s.lr_at(55), (1e-3 + 1e-4) / 2, 1e-15);  // progress 1/2
  EXPECT_NEAR(s.lr_at(100), 1e-4, 1e-15);           // last step
  const double quarter = 1e-4 + 0.9e-3 * 0.5 * (1 + std::cos(M_PI * 0.25));
  EXPECT_NEAR(Schedule({1e-3, 1e-4, 0, 5}).lr_at(1), quarter, 1e-15);  // progress 1/4
  for (int i = 11; i < 101; ++i) EXPECT_LT(s.lr_at(i), s.lr_at(i - 1));
}

TEST(Schedule, NoWarmupStartsAtPeakAndConstantWhenMinEqualsPeak) {
  EXPECT_DOUBLE_EQ(Schedule({2e-3, 0, 0, 50}).lr_at(0), 2e-3);
  EXPECT_DOUBLE_EQ(Schedule({2e-3, 0, 0, 50}).lr_at(49), 0);
  Schedule flat{3e-4, 3e-4, 0, 20};
  for (int i = 0; i < 20; ++i) EXPECT_DOUBLE_EQ(flat.lr_at(i), 3e-4);
  EXPECT_DOUBLE_EQ(Schedule({1e-3, 1e-4, 0, 1}).lr_at(0), 1e-3);  // a single step
  EXPECT_DOUBLE_EQ(Schedule({1e-3, 1e-4, 4, 4}).lr_at(3), 1e-3);  // all warmup
}

TEST(Schedule, ValidateNamesTheFlag) {
  auto message = [](Schedule s) {
    try {
      s.validate();
    } catch (const strata::Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message({1e-3, 1e-4, 0, 0}).find("--steps"), std::string::npos);
  EXPECT_NE(message({-1, 0, 0, 10}).find("--lr"), std::string::npos);
  EXPECT_NE(message({1e-3, 1e-2, 0, 10}).find("--min-lr"), std::string::npos);
  EXPECT_NE(message({1e-3, 1e-4, 11, 10}).find("--warmup"), std::string::npos);
  EXPECT_EQ(message({1e-3, 1e-4, 10, 10}), "no error");
}
