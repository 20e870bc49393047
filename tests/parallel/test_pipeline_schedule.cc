// Pipeline schedules (parallel/pipeline/schedule.h): every generated schedule validates, has
// the in-flight bound of its kind and the bubble of its formula; the validator rejects
// hand-made schedules with a deadlock, an unmatched send or messages out of order.
#include <gtest/gtest.h>

#include "core/error.h"
#include "parallel/pipeline/schedule.h"
#include "support/error_of.h"

namespace strata::parallel::pipeline {
namespace {

std::string error_of(const Schedule& s) {
  try {
    validate(s);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(PipelineSchedule, EveryKindValidatesWithItsBoundAndBubble) {
  for (int P : {1, 2, 3, 4})
    for (int M : {1, 2, 3, 4, 8, 16}) {
      const Schedule g = make_schedule(ScheduleKind::gpipe, P, M);
      const Schedule f = make_schedule(ScheduleKind::one_f_one_b, P, M);
      const Schedule z = make_schedule(ScheduleKind::zb, P, M);
      EXPECT_EQ(max_in_flight(g, 0), M);
      EXPECT_EQ(max_in_flight(f, 0), std::min(P, M)) << "P " << P << " M " << M;
      for (int s = 0; s < P; ++s) EXPECT_LE(max_in_flight(f, s), P - s);
      EXPECT_LE(max_in_flight(z, 0), std::min(P, M));
      const double want = double(P - 1) / (M + P - 1);
      EXPECT_NEAR(simulate(g, default_costs(g)).bubble(0), want, 1e-9);
      EXPECT_NEAR(simulate(f, default_costs(f)).bubble(0), want, 1e-9);
      EXPECT_NEAR(bubble_formula(f), want, 1e-12);
      const double zb = simulate(z, default_costs(z)).bubble(0);
      if (M >= P) {
        EXPECT_NEAR(zb, double(P - 1) / (3 * M + P - 1), 1e-9) << P << " " << M;
      }
      if (P > 1 && M >= P) {
        EXPECT_LT(zb, want);
      }
    }
}

TEST(PipelineSchedule, InterleavedMatchesMegatronsBubble) {
  for (int P : {2, 3, 4})
    for (int V : {2, 3})
      for (int M : {P, 2 * P, 4 * P}) {
        const Schedule s = make_schedule(ScheduleKind::interleaved, P, M, V);
        const Timeline t = simulate(s, default_costs(s));
        EXPECT_NEAR(t.bubble(0), double(P - 1) / (V * M + P - 1), 1e-9)
            << "P " << P << " V " << V << " M " << M;
        for (int c = 0; c < V; ++c) EXPECT_GE(chunk_slots(s, 0, c), 1);
      }
}

TEST(PipelineSchedule, BadShapesNameTheFlag) {
  auto msg = [](ScheduleKind k, int P, int M, int V) {
    return test::error_of([&] { make_schedule(k, P, M, V); });
  };
  EXPECT_NE(msg(ScheduleKind::interleaved, 4, 2, 2).find("--micro-batches >= --pp: 2 < 4"),
            std::string::npos);
  EXPECT_NE(msg(ScheduleKind::interleaved, 2, 3, 2).find("multiple of --pp"), std::string::npos);
  EXPECT_NE(msg(ScheduleKind::one_f_one_b, 2, 4, 2).find("--virtual-stages 2"), std::string::npos);
  EXPECT_NE(msg(ScheduleKind::gpipe, 2, 0, 1).find("--micro-batches"), std::string::npos);
  EXPECT_THROW(parse_schedule("pipedream"), Error);
}

TEST(PipelineSchedule, ValidatorRejectsADeadlock) {
  // Both stages wait for each other's message before sending their own: stage 0 receives
  // the gradient of micro-batch 0 before its forward ran and sent the activation.
  Schedule s = make_schedule(ScheduleKind::one_f_one_b, 2, 1);
  auto& a0 = s.actions[0];  // F0, SEND act, RECV grad, B0
  ASSERT_EQ(a0.size(), 4u);
  std::swap(a0[0], a0[2]);  // RECV grad, SEND act, F0, B0
  std::swap(a0[1], a0[2]);  // RECV grad, F0, SEND act, B0
  const std::string e = error_of(s);
  EXPECT_NE(e.find("deadlock"), std::string::npos) << e;
  EXPECT_NE(e.find("stage 0 action 0 (RECV gradient micro-batch 0 from stage 1) waits"),
            std::string::npos)
      << e;
  EXPECT_NE(e.find("stage 1 action 0 (RECV activation"), std::string::npos) << e;
}

TEST(PipelineSchedule, ValidatorRejectsAnUnmatchedSend) {
  Schedule s = make_schedule(ScheduleKind::gpipe, 2, 2);
  auto& a1 = s.actions[1];
  // Stage 1 no longer receives micro-batch 1's activation (and so its F1 has no input).
  for (size_t i = 0; i < a1.size(); ++i)
    if (a1[i].op == Op::recv_act && a1[i].micro == 1) a1.erase(a1.begin() + long(i));
  const std::string e = error_of(s);
  EXPECT_NE(e.find("unmatched send"), std::string::npos) << e;
  EXPECT_NE(e.find("SEND activation micro-batch 1 to stage 1"), std::string::npos) << e;
}

TEST(PipelineSchedule, ValidatorRejectsMessagesOutOfOrder) {
  Schedule s = make_schedule(ScheduleKind::gpipe, 2, 2);
  auto& a1 = s.actions[1];  // RECV 0, F0, RECV 1, F1, ...: receive 1 before 0
  ASSERT_EQ(a1[0].op, Op::recv_act);
  std::swap(a1[0], a1[2]);
  std::swap(a1[1], a1[3]);
  const std::string e = error_of(s);
  EXPECT_NE(e.find("arrive in send order"), std::string::npos) << e;
}

TEST(PipelineSchedule, ValidatorRejectsAStageSendingToItself) {
  Schedule s = make_schedule(ScheduleKind::gpipe, 2, 1);
  s.actions[0][1].peer = 0;
  EXPECT_NE(error_of(s).find("never waits on itself"), std::string::npos) << error_of(s);
}

TEST(PipelineSchedule, RenderDrawsEveryStage) {
  const std::string r = render(make_schedule(ScheduleKind::one_f_one_b, 2, 2));
  EXPECT_NE(r.find("stage 0 |F0 F1 .  .  B0--- .  B1---"), std::string::npos) << r;
  EXPECT_NE(r.find("stage 1 |.  F0 B0--- F1 B1---"), std::string::npos) << r;
  EXPECT_NE(r.find("vs formula 0.333"), std::string::npos) << r;
}

}  // namespace
}  // namespace strata::parallel::pipeline
