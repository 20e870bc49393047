// Bad input: impossible options fail with one line naming the problem, before any work
// (no allocation, no collective).
#include <cmath>
#include <functional>
#include <string>

#include "comm/process_group.h"
#include "core/memory.h"
#include "gtest/gtest.h"
#include "harness.h"
#include "parallel/options.h"
#include "support/error_of.h"

namespace strata::parallel {
namespace {

using test::error_of;

TEST(ZeroOptions, RejectsStagesPrecisionsAndBucketsThatDoNotExist) {
  DataParallelOptions o;
  o.stage = 4;
  EXPECT_NE(error_of([&] { o.validate(); }).find("--zero 4"), std::string::npos);
  o.stage = -1;
  EXPECT_NE(error_of([&] { o.validate(); }).find("ZeRO stage must be 0, 1, 2 or 3"),
            std::string::npos);
  o = {};
  o.bucket_mb = 0;
  EXPECT_NE(error_of([&] { o.validate(); }).find("--bucket-mb 0"), std::string::npos);
  o.bucket_mb = -3;
  EXPECT_THROW(o.validate(), Error);
  o.bucket_mb = std::nan("");
  EXPECT_THROW(o.validate(), Error);
  o = {};
  o.prefetch = -1;
  EXPECT_NE(error_of([&] { o.validate(); }).find("--prefetch -1"), std::string::npos);
  EXPECT_NE(error_of([] { parse_precision("fp16"); }).find("unknown precision 'fp16'"),
            std::string::npos);
  EXPECT_EQ(parse_precision("bf16"), Precision::bf16);
  EXPECT_EQ(parse_zero_stage("3"), 3);
  EXPECT_NE(error_of([] { parse_zero_stage("5"); }).find("--zero 5"), std::string::npos);
  EXPECT_THROW(parse_zero_stage("1x"), Error);
  EXPECT_NO_THROW(DataParallelOptions{}.validate());
}

TEST(ZeroOptions, RejectsMoreRanksThanMemoryOrDataAllow) {
  DataParallelOptions o;
  // 100M parameters at stage 0 need 1.6 GB per rank: 8 ranks do not fit in 4 GiB.
  const std::string msg =
      error_of([&] { check_memory_fits(100'000'000, 8, 8, o, 0, int64_t(4) << 30); });
  EXPECT_NE(msg.find("8 ranks of 100000000 parameters at ZeRO stage 0"), std::string::npos) << msg;
  EXPECT_NE(msg.find("4096 MiB are available"), std::string::npos) << msg;
  o.stage = 3;  // 16Ψ/N = 200 MB per rank: fits
  EXPECT_NO_THROW(check_memory_fits(100'000'000, 8, 8, o, 0, int64_t(4) << 30));
  EXPECT_NE(error_of([] { check_batch_split(4, 0, 8); }).find("--batch 4 is smaller than the 8"),
            std::string::npos);
  EXPECT_NE(error_of([] { check_batch_split(12, 4, 2); }).find("does not split"),
            std::string::npos);
  EXPECT_NO_THROW(check_batch_split(12, 3, 2));
}

// An MoE rank holds its E/ep experts sharded over dp / ep ranks: 10M dense + 80M expert
// parameters on 8 ranks at stage 0 need 16 · 90M = 1.44 GB per rank when every rank holds
// every expert (ep 1: 11.5 GB in all), 16 · (10M + 10M) = 320 MB at ep 8 (2.6 GB in all).
TEST(ZeroOptions, MemoryCheckCountsExpertsOverTheirGroup) {
  DataParallelOptions o;
  const int64_t avail = int64_t(4) << 30;
  const std::string msg =
      error_of([&] { check_memory_fits(10'000'000, 8, 8, o, 0, avail, 80'000'000, 8); });
  EXPECT_NE(msg.find("8 ranks of 10000000 dense + 80000000 expert parameters"), std::string::npos)
      << msg;
  EXPECT_NO_THROW(check_memory_fits(10'000'000, 8, 8, o, 0, avail, 10'000'000, 1));
}

TEST(ZeroOptions, EngineRejectsBadOptionsBeforeAnyCollective) {
  // A world of 2 where only rank 0 builds an engine: if the engine issued any collective
  // before validating, rank 0 would hang instead of failing at once.
  DataParallelOptions bad;
  bad.bucket_mb = 0;
  comm::Options copt;
  copt.timeout_s = 20;
  const int64_t before = memory_tracker().current(MemCategory::optimizer);
  std::string msg;
  comm::run_threads(
      2,
      [&](comm::ProcessGroup& pg) {
        if (pg.rank() != 0) return;
        model::GPT gpt(ptest::small_config(), 1, false);
        msg = error_of([&] { DataParallelEngine(gpt, pg, bad, {}, 1); });
      },
      copt);
  EXPECT_NE(msg.find("--bucket-mb 0"), std::string::npos) << msg;
  EXPECT_EQ(memory_tracker().current(MemCategory::optimizer), before);
}

TEST(ZeroOptions, EngineRejectsAModelThatOwnsItsState) {
  std::string msg;
  comm::run_threads(1, [&](comm::ProcessGroup& pg) {
    model::GPT gpt(ptest::small_config(), 1, /*allocate_state=*/true);
    msg = error_of([&] { DataParallelEngine(gpt, pg, {}, {}, 1); });
  });
  EXPECT_NE(msg.find("allocate_state = false"), std::string::npos) << msg;
}

}  // namespace
}  // namespace strata::parallel
