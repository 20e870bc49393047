// The pipeline's time model (parallel/pipeline/predict.h): with equal stages and no transfer
// cost its bubble is the schedule's formula; the closed forms and the extrapolation agree with
// the simulation; a transfer cost shows up in 1F1B once per P micro-batches.
#include <gtest/gtest.h>

#include "cost/bubble.h"
#include "parallel/pipeline/predict.h"

namespace strata::parallel::pipeline {
namespace {

Costs uniform(double f, double b, double w, double transfer) {
  Costs c;
  c.f = f, c.b = b, c.w = w, c.transfer = transfer;
  return c;
}

TEST(PipelineCost, BubbleIsTheFormulaWithoutTransfer) {
  for (ScheduleKind k : {ScheduleKind::gpipe, ScheduleKind::one_f_one_b})
    for (int P = 2; P <= 4; ++P)
      for (int M = 1; M <= 9; ++M) {
        const Prediction p = predict(k, P, M, 1, uniform(1.5, 3, 0, 0));
        EXPECT_NEAR(p.bubble, bubble_formula(make_schedule(k, P, M)), 1e-12)
            << schedule_name(k) << " P " << P << " M " << M;
        EXPECT_DOUBLE_EQ(p.bubble, p.bubble_ideal);
      }
  for (int P = 2; P <= 3; ++P)
    for (int M = P; M <= 4 * P; M += P) {
      const Prediction p = predict(ScheduleKind::interleaved, P, M, 2, uniform(1, 2, 0, 0));
      EXPECT_NEAR(p.bubble, bubble_formula(make_schedule(ScheduleKind::interleaved, P, M, 2)), 1e-12)
          << "interleaved P " << P << " M " << M;
    }
  for (int P = 2; P <= 4; ++P)
    for (int M = P; M <= 12; ++M) {
      const Prediction p = predict(ScheduleKind::zb, P, M, 1, uniform(1, 1, 1, 0));
      EXPECT_NEAR(p.bubble, bubble_formula(make_schedule(ScheduleKind::zb, P, M)), 1e-12)
          << "zb P " << P << " M " << M;
    }
}

// Per-virtual-stage costs: the simulation's busy time is each stage's own sum, and a dearer
// last stage leaves the first one waiting.
TEST(PipelineCost, UnequalStagesWidenTheBubble) {
  Costs c;
  c.virt = {{1, 2, 0}, {1.5, 3, 0}};
  const Prediction p = predict(ScheduleKind::one_f_one_b, 2, 8, 1, c);
  EXPECT_NEAR(p.busy_mean, 8 * (3 + 4.5) / 2, 1e-12);
  EXPECT_GT(p.bubble, 1.0 / 9);
  EXPECT_NEAR(p.makespan, simulate(make_schedule(ScheduleKind::one_f_one_b, 2, 8), c).makespan, 1e-12);
}

TEST(PipelineCost, GPipeClosedFormMatchesTheSimulation) {
  for (int P = 1; P <= 5; ++P)
    for (int M = 1; M <= 13; ++M)
      for (double t : {0.0, 0.05, 0.4, 3.0})
        EXPECT_NEAR(cost::gpipe_makespan(P, M, 1, 2.3, t),
                    simulate(make_schedule(ScheduleKind::gpipe, P, M), uniform(1, 2.3, 0, t)).makespan,
                    1e-9)
            << "P " << P << " M " << M << " transfer " << t;
}

// Beyond `exact_up_to` the makespan is extrapolated from two simulations P micro-batches
// apart: the same number as simulating the whole step.
TEST(PipelineCost, ExtrapolationMatchesTheFullSimulation) {
  const Costs c = uniform(1, 1.2, 0.9, 0.3);
  for (auto [k, P, M, V] : {std::tuple{ScheduleKind::zb, 3, 41, 1}, {ScheduleKind::zb, 2, 30, 1},
                            {ScheduleKind::interleaved, 2, 24, 2}, {ScheduleKind::interleaved, 3, 27, 2}}) {
    Costs cc = c;
    if (k != ScheduleKind::zb) cc.w = 0;
    const Prediction a = predict(k, P, M, V, cc, 0), b = predict(k, P, M, V, cc, 1000);
    EXPECT_NEAR(a.makespan, b.makespan, 1e-9 * b.makespan) << schedule_name(k) << " P " << P;
    EXPECT_NEAR(a.bubble, b.bubble, 1e-9) << schedule_name(k) << " P " << P;
  }
}

// A transfer cost at P = 2: GPipe pays 2(P−1) transfers once, 1F1B once per group of P
// micro-batches, so its exposed share does not vanish as M grows; zero-bubble stays below
// 1F1B.
TEST(PipelineCost, TransferCostIsExposedPerRoundTrip) {
  const double f = 1, b = 2, t = 0.1;
  for (int M : {2, 4, 8, 16}) {
    const Prediction g = predict(ScheduleKind::gpipe, 2, M, 1, uniform(f, b, 0, t));
    const Prediction o = predict(ScheduleKind::one_f_one_b, 2, M, 1, uniform(f, b, 0, t));
    const Prediction z = predict(ScheduleKind::zb, 2, M, 1, uniform(f, b / 2, b / 2, t));
    EXPECT_NEAR(g.makespan - g.makespan_ideal, 2 * t, 1e-12);
    EXPECT_NEAR(o.makespan - o.makespan_ideal, 2 * t * ((M + 1) / 2), 1e-12);
    EXPECT_GT(o.bubble, o.bubble_ideal);
    if (M >= 2) {
      EXPECT_LT(z.bubble, o.bubble) << M;
    }
  }
}

}  // namespace
}  // namespace strata::parallel::pipeline
