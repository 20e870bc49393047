#include <gtest/gtest.h>

#include <cstdlib>
#include <set>

#include "core/dtype.h"
#include "core/env.h"
#include "core/error.h"
#include "core/memory.h"
#include "core/rng.h"
#include "core/tensor.h"
#include "nlohmann/json.hpp"

using namespace strata;

TEST(Rng, PhiloxKnownAnswers) {
  // Known-answer vectors of Philox4x32-10 (Random123 kat_vectors).
  auto z = philox4x32(0, 0, 0);
  EXPECT_EQ(z[0], 0x6627e8d5u);
  EXPECT_EQ(z[1], 0xe169c58du);
  EXPECT_EQ(z[2], 0xbc57ac4cu);
  EXPECT_EQ(z[3], 0x9b00dbd8u);
  auto f = philox4x32(~0ull, ~0ull, ~0ull);
  EXPECT_EQ(f[0], 0x408f276du);
  EXPECT_EQ(f[1], 0x41c83b0eu);
  EXPECT_EQ(f[2], 0xa20bc7c6u);
  EXPECT_EQ(f[3], 0x6d5451fdu);
}

TEST(Rng, PureFunctionOfSeedStreamCounter) {
  Rng a(42, 7), b(42, 7), c(42, 8), d(43, 7);
  for (int i = 0; i < 100; ++i) {
    uint32_t x = a.next_u32();
    EXPECT_EQ(x, b.next_u32());
    (void)c;
    (void)d;
  }
  // Jumping to a counter reproduces the same stream without replaying it.
  Rng e(42, 7), g(42, 7, 10);
  for (int i = 0; i < 40; ++i) e.next_u32();
  EXPECT_EQ(e.next_u32(), g.next_u32());
  EXPECT_NE(Rng(42, 7).next_u64(), Rng(42, 8).next_u64());
  EXPECT_NE(Rng(42, 7).next_u64(), Rng(43, 7).next_u64());
}

TEST(Rng, DistributionsLookRight) {
  Rng r(1, 2);
  double sum = 0, sq = 0;
  const int n = 200000;
  for (int i = 0; i < n; ++i) {
    double x = r.normal();
    sum += x;
    sq += x * x;
  }
  EXPECT_NEAR(sum / n, 0.0, 0.01);
  EXPECT_NEAR(sq / n, 1.0, 0.02);
  std::set<uint64_t> seen;
  for (int i = 0; i < 1000; ++i) {
    uint64_t v = r.below(7);
    ASSERT_LT(v, 7u);
    seen.insert(v);
  }
  EXPECT_EQ(seen.size(), 7u);
  for (int i = 0; i < 1000; ++i) {
    float u = r.uniform();
    ASSERT_GE(u, 0.0f);
    ASSERT_LT(u, 1.0f);
  }
}

TEST(Error, FmtFormats) {
  EXPECT_EQ(strata::fmt("%d|%.2f|%s", 3, 1.5, "x"), "3|1.50|x");
}

TEST(Memory, TracksCurrentAndPeakPerCategory) {
  auto& t = memory_tracker();
  int64_t p0 = t.current(MemCategory::parameters), g0 = t.current(MemCategory::gradients);
  {
    Buffer a(MemCategory::parameters, 1000);
    Buffer b(MemCategory::gradients, 300);
    EXPECT_EQ(t.current(MemCategory::parameters), p0 + 1000);
    EXPECT_EQ(t.current(MemCategory::gradients), g0 + 300);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(a.data()) % 64, 0u);
    Buffer c = std::move(b);
    EXPECT_EQ(t.current(MemCategory::gradients), g0 + 300);
    EXPECT_EQ(c.bytes(), 300u);
  }
  EXPECT_EQ(t.current(MemCategory::parameters), p0);
  EXPECT_EQ(t.current(MemCategory::gradients), g0);
  EXPECT_GE(t.peak(MemCategory::parameters), p0 + 1000);
  auto j = t.to_json();
  EXPECT_TRUE(j.contains("optimizer"));
  EXPECT_TRUE(j["total"].contains("peak"));
}

TEST(DType, Bf16RoundsToNearestEven) {
  EXPECT_EQ(bf16_to_f32(f32_to_bf16(1.0f)), 1.0f);
  EXPECT_EQ(bf16_to_f32(f32_to_bf16(-3.5f)), -3.5f);
  // 1 + 2^-8 is exactly halfway between two bf16 values: ties to even (1.0).
  EXPECT_EQ(bf16_to_f32(f32_to_bf16(1.0f + 1.0f / 256)), 1.0f);
  EXPECT_EQ(bf16_to_f32(f32_to_bf16(1.0f + 3.0f / 256)), 1.0f + 4.0f / 256);
  EXPECT_EQ(dtype_size(parse_dtype("bf16")), 2u);
  EXPECT_THROW(parse_dtype("f16x"), Error);
}

TEST(Tensor, ViewsReshapeAndSlice) {
  float buf[24];
  for (int i = 0; i < 24; ++i) buf[i] = float(i);
  Tensor t(buf, {4, 6});
  EXPECT_EQ(t.size(), 24);
  auto s = t.slice(1, 3);
  EXPECT_EQ(s.dim(0), 2);
  EXPECT_EQ(s[0], 6.0f);
  EXPECT_THROW(t.reshape({5, 5}), Error);
  EXPECT_THROW(t.slice(3, 5), Error);
}

static const EnvVar kTestVar("STRATA_TEST_ONLY_VAR", "5", "used by the core tests");

TEST(Env, RegistryAndParsing) {
  unsetenv("STRATA_TEST_ONLY_VAR");
  EXPECT_EQ(kTestVar.get_int(), 5);
  setenv("STRATA_TEST_ONLY_VAR", "abc", 1);
  EXPECT_THROW(kTestVar.get_int(), Error);
  setenv("STRATA_TEST_ONLY_VAR", "yes", 1);
  EXPECT_TRUE(kTestVar.get_bool());
  bool found = false;
  for (auto* v : EnvVar::all()) found |= std::string(v->name()) == "STRATA_TEST_ONLY_VAR";
  EXPECT_TRUE(found);
  unsetenv("STRATA_TEST_ONLY_VAR");
}
