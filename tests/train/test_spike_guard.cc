// The step guard (train/spike_guard.h): which steps it skips, and `strata train` end to end
// with injected NaN and spiked gradients.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "cli_util.h"
#include "train/spike_guard.h"

namespace strata::test {
namespace {

using nlohmann::json;
using train::GuardConfig;
using train::SpikeGuard;

TEST(SpikeGuard, NonFiniteIsSkippedOnlyWhenAsked) {
  GuardConfig c;
  c.skip_nonfinite = true;
  SpikeGuard g(c);
  EXPECT_EQ(g.verdict(2.0, 1.0), "");
  EXPECT_NE(g.verdict(2.0, std::nan("")).find("gradient norm is nan"), std::string::npos);
  EXPECT_NE(g.verdict(INFINITY, 1.0).find("loss is inf"), std::string::npos);
  c.skip_nonfinite = false;
  EXPECT_EQ(SpikeGuard(c).verdict(2.0, std::nan("")), "");  // the trainer stops the run instead
}

TEST(SpikeGuard, SpikeAgainstTheWindowOfAcceptedSteps) {
  GuardConfig c;
  c.zscore = 4;
  c.window = 10;
  c.min_history = 8;
  SpikeGuard g(c);
  for (int i = 0; i < 7; ++i) {
    EXPECT_EQ(g.verdict(3.0 - 0.01 * i, 1.0 + 0.05 * (i % 2)), "") << "too little history";
    g.accepted(3.0 - 0.01 * i, 1.0 + 0.05 * (i % 2));
  }
  EXPECT_EQ(g.verdict(100.0, 1.0), "") << "7 steps are fewer than min_history";
  g.accepted(2.93, 1.05);
  const std::string why = g.verdict(2.92, 40.0);
  EXPECT_NE(why.find("gradient norm 40 is"), std::string::npos) << why;
  EXPECT_NE(why.find("--spike-zscore 4"), std::string::npos) << why;
  EXPECT_NE(g.verdict(10.0, 1.0).find("loss 10 is"), std::string::npos);
  EXPECT_EQ(g.verdict(2.5, 0.5), "") << "a drop is not a spike";
  EXPECT_EQ(g.verdict(2.92, 1.06), "") << "within the spread";
}

TEST(SpikeGuard, FlatHistoryHasAFloorOnTheDeviation) {
  GuardConfig c;
  c.zscore = 3;
  SpikeGuard g(c);
  for (int i = 0; i < 10; ++i) g.accepted(2.0, 1.0);
  EXPECT_EQ(g.verdict(2.001, 1.001), "");          // 0.05% above a flat history: not a spike
  EXPECT_NE(g.verdict(2.0, 1.01), "");             // 1%: 10 floored deviations
}

TEST(SpikeGuard, TooManySkipsStopTheRun) {
  GuardConfig c;
  c.skip_nonfinite = true;
  c.max_skipped = 1;
  SpikeGuard g(c);
  g.skipped(3, "gradient norm is nan");
  try {
    g.skipped(5, "gradient norm is nan");
    FAIL() << "a second skip past --max-skipped-steps 1 must stop the run";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("stopping at step 5: 2 steps skipped, more than "
                                         "--max-skipped-steps 1"),
              std::string::npos)
        << e.what();
  }
}

const std::string kRun =
    "train --layers 2 --dim 32 --heads 2 --seq 16 --vocab 256 --data synthetic --batch 8 "
    "--steps 16 --lr 3e-3 --eval-every 0 --eval-batches 1 --sample-tokens 0 --peak-gflops 100 "
    "--threads 1 ";

// A NaN gradient at step 3 (injected on one rank): without a guard the run stops there in
// one line; with --skip-nonfinite step 3 is skipped on every rank, the run trains on, and its
// parameters after step 3 are those after step 2 (its step-4 loss equals that of a run whose
// step 3 was skipped for a spike).
TEST(SpikeGuardTrain, NanGradientIsSkippedOnEveryRank) {
  const std::string nan = kRun + "--nproc 2 --inject nan-grad --inject-rank 1 --inject-step 3 ";
  const TrainRun stops = train_run(nan, "guard_stop");
  EXPECT_NE(stops.cli.status, 0);
  EXPECT_NE(stops.cli.err.find("the gradient norm became nan at step 3"), std::string::npos)
      << stops.cli.err;
  EXPECT_NE(stops.cli.err.find("--skip-nonfinite"), std::string::npos) << stops.cli.err;

  const TrainRun skip = train_run(nan + "--skip-nonfinite", "guard_skip");
  ASSERT_EQ(skip.cli.status, 0) << skip.cli.err;
  ASSERT_EQ(skip.records.size(), 16u);
  EXPECT_EQ(skip.records[2].value("skipped", false), true);
  EXPECT_NE(skip.records[2]["skip_reason"].get<std::string>().find("gradient norm is nan"),
            std::string::npos);
  for (size_t i = 0; i < skip.records.size(); ++i) {
    if (i != 2) {
      EXPECT_FALSE(skip.records[i].contains("skipped")) << i;
    }
  }
  EXPECT_EQ(skip.summary["skipped_steps"], 1);
  EXPECT_TRUE(std::isfinite(skip.losses.back()));
  const std::string said = skip.cli.out + skip.cli.err;
  EXPECT_NE(said.find("step 3 skipped (parameters and optimizer state unchanged)"),
            std::string::npos)
      << said;

  // The same step skipped as a spike (its gradient 1000x): the same parameters afterwards.
  const TrainRun spike =
      train_run(kRun + "--nproc 2 --inject spike-grad --inject-rank 0 --inject-step 3 "
                       "--spike-zscore 1e-9 --spike-window 2",
                "guard_spike");
  ASSERT_EQ(spike.cli.status, 0) << spike.cli.err;
  ASSERT_EQ(spike.records.size(), 16u);
  EXPECT_EQ(spike.records[2].value("skipped", false), true);
  EXPECT_NEAR(spike.records[3]["loss"].get<double>(), skip.records[3]["loss"].get<double>(), 1e-6);

  const TrainRun limit = train_run(nan + "--skip-nonfinite --max-skipped-steps 0", "guard_limit");
  EXPECT_NE(limit.cli.status, 0);
  EXPECT_NE(limit.cli.err.find("stopping at step 3: 1 steps skipped, more than --max-skipped-steps 0"),
            std::string::npos)
      << limit.cli.err;
}

// A spiked gradient late in a run with a real history is found by the z-score and skipped;
// the steps before it are the unguarded run's, bit for bit.
TEST(SpikeGuardTrain, SpikeIsFoundAgainstTheHistory) {
  const TrainRun plain = train_run(kRun, "guard_plain");
  const TrainRun r = train_run(kRun + "--inject spike-grad --inject-step 12 --spike-zscore 6",
                               "guard_z");
  ASSERT_EQ(plain.cli.status, 0) << plain.cli.err;
  ASSERT_EQ(r.cli.status, 0) << r.cli.err;
  ASSERT_EQ(r.records.size(), 16u);
  for (size_t i = 0; i < 16; ++i) {
    EXPECT_EQ(r.records[i].contains("skipped"), i == 11) << "step " << i + 1;
    if (i < 12) {
      EXPECT_EQ(r.records[i]["loss"].get<double>(), plain.records[i]["loss"].get<double>());
    }
  }
  EXPECT_NE(r.records[11]["skip_reason"].get<std::string>().find("gradient norm"), std::string::npos);
}

TEST(SpikeGuardTrain, BadFlagsAreOneLine) {
  const std::pair<std::string, std::string> cases[] = {
      {"--spike-zscore -1", "--spike-zscore must be 0 (off) or a positive number"},
      {"--spike-window 1", "--spike-window must be in [2, 100000], got 1"},
      {"--max-skipped-steps -2", "--max-skipped-steps must not be negative, got -2"},
      {"--spike-action undo", "--spike-action undo is not skip or rollback"},
      {"--spike-action rollback", "--spike-action rollback needs in-memory checkpoints"},
  };
  expect_one_line_errors(kRun, {std::begin(cases), std::end(cases)});
}

}  // namespace
}  // namespace strata::test
