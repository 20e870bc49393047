// The pipeline's time model, shared by the planner (plan/estimate.cc) and the training summary
// (train/pipeline_rank.cc): one step's schedule (parallel/pipeline/schedule.h) run on an ideal
// machine with each virtual stage's F, B and W times and a stage-to-stage transfer time. A
// simulation of the schedule, not a closed form, so it lives beside the schedules; its closed
// forms (the bubble of equal stages, GPipe's makespan) are cost/bubble.h's.
//
// Terms. f, b, w: seconds of one micro-batch's forward, backward (the input gradient only
// under zero-bubble) and weight-gradient pass on one virtual stage; transfer: seconds from a
// SEND to when its RECV can have the message (latency + bytes / bandwidth). Stage s's bubble
// is 1 − busy_s / makespan; the prediction's bubble is the mean over stages, what the
// training summary measures. With equal stages and transfer 0 it is the schedule's formula:
// (P−1)/(M+P−1) for gpipe and 1f1b, (P−1)/(V·M+P−1) interleaved, (P−1)/(3M+P−1) zero-bubble
// with F = B = W. A transfer lengthens gpipe by 2(P−1) transfers once; 1f1b holds only P
// micro-batches on stage 0, whose B(m) waits for m's round trip right after F(m+P−1), so
// (at P = 2 exactly) every group of P micro-batches waits 2(P−1) transfers again and the
// exposed share does not shrink as M grows.
//
// Cost: one simulation of the P·V·M·3 actions. Beyond a few P micro-batches the makespan
// grows by the same amount every P micro-batches (the steady state repeats), so for M above
// `exact_up_to` it is extrapolated from two simulations, at M1 and M1 + P (M1 ≡ M mod P).
#pragma once
#include <vector>

#include "parallel/pipeline/schedule.h"

namespace strata::parallel::pipeline {

struct Prediction {
  double makespan = 0;       // seconds of the schedule
  double makespan_ideal = 0; // the same with transfer 0
  double busy_mean = 0;      // compute seconds per stage, mean over stages
  double bubble = 0;         // mean over stages of 1 − busy / makespan
  double bubble_ideal = 0;   // the same with transfer 0: the schedule's own bubble
};

// c: the costs (Costs::virt per virtual stage, or f, b, w for all), c.transfer per message.
// Throws like make_schedule for impossible (kind, P, M, V).
Prediction predict(ScheduleKind kind, int stages, int micro, int virt, const Costs& c,
                   int exact_up_to = 64);

// Activation slots of each chunk of `stage` (chunk_slots, at least 1: what the executor sizes)
// under (kind, P, M, V), for the planner's memory model. GPipe holds all M; the other
// schedules' peak stops growing in the steady state, so beyond 4P micro-batches it is read off
// the schedule of 4P + M mod P micro-batches (the one predict extrapolates from, generated
// once; tests/plan check it against the whole schedule).
std::vector<int> predicted_slots(ScheduleKind kind, int stages, int micro, int virt, int stage);

}  // namespace strata::parallel::pipeline
