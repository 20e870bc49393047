// Pipeline schedules as data: for each of P stages, the ordered list of actions it runs in one
// optimizer step over M micro-batches.
//
// Terms. P stages (the ranks of one pp group), M micro-batches, V model chunks per stage
// (virtual stages; V = 1 except for the interleaved schedule). Virtual stage v = c·P + s is
// chunk c of stage s; the model's layers go to the P·V virtual stages in order, so a
// micro-batch's forward visits v = 0, 1, .., PV−1 (stage 0, 1, .., P−1, 0, 1, ..) and its
// backward the reverse.
//
// Actions: F (forward of one chunk and micro-batch), B (its backward: input and weight
// gradients; under zero-bubble only the input gradient), W (zero-bubble only: the weight
// gradient of a B done before), and the point-to-point messages between stages:
//   SEND_ACT / RECV_ACT   a chunk's output activation to the next virtual stage
//   SEND_GRAD / RECV_GRAD the gradient of a chunk's input back to the previous one
// A SEND follows the action that produced the message; a RECV stands right before the
// action that consumes it. Sends are asynchronous (the stage goes on); a RECV waits for its
// message. Activations and gradients travel on two channels (process groups), and on each
// channel and each ordered pair of stages messages arrive in send order (comm/process_group.h),
// so the validator checks that every RECV sequence matches its peer's SEND sequence.
//
// Schedules (each stage's compute order; in flight = micro-batches whose forward ran and
// whose backward has not):
//   gpipe        all forwards, then all backwards; M in flight
//   1f1b         P−s−1 warm-up forwards, then one forward / one backward, then the
//                remaining backwards (PipeDream-flush, Narayanan et al. 2021); stage s holds
//                at most P−s in flight
//   interleaved  Megatron's virtual pipeline: micro-batches in groups of P per chunk, the
//                1F1B pattern over V·M chunk-steps; needs M a multiple of P
//   zb           ZB-H1 (Qi et al. 2023): B computes only the input gradient, and the weight
//                gradients W fill what would be bubble (list scheduling under unit costs
//                F = B = W, schedule.cc); stage 0 holds at most P micro-batches from F to W
// Bubble of gpipe and 1f1b with B = 2F: (P−1)/(M+P−1) of the step; interleaved
// (P−1)/(V·M+P−1); zb with F = B = W: (P−1)/(3M+P−1) (for M >= P).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace strata::parallel::pipeline {

enum class ScheduleKind : uint8_t { gpipe, one_f_one_b, interleaved, zb };
// "gpipe", "1f1b", "interleaved", "zb"; throws naming --schedule and the known names.
ScheduleKind parse_schedule(const std::string& name);
const char* schedule_name(ScheduleKind k);

enum class Op : uint8_t { F, B, W, send_act, recv_act, send_grad, recv_grad };
const char* op_name(Op op);
inline bool is_compute(Op op) { return op == Op::F || op == Op::B || op == Op::W; }

struct Action {
  Op op = Op::F;
  int micro = 0;
  int chunk = 0;  // this stage's chunk (of V)
  int peer = -1;  // SEND/RECV: the other stage
};

struct Schedule {
  ScheduleKind kind = ScheduleKind::one_f_one_b;
  int stages = 1, micro = 1, virt = 1;
  bool split_backward = false;  // zb: B is the input gradient only, W the weight gradient
  bool forward_only = false;    // evaluation: F and the activations only
  std::vector<std::vector<Action>> actions;  // per stage

  int virtual_stages() const { return stages * virt; }
  int virtual_stage(int stage, int chunk) const { return chunk * stages + stage; }
};

// Generates the schedule (compute order and messages). Throws one line naming the flag and
// numbers when it cannot exist: P < 1, M < 1, V < 1, V > 1 outside interleaved, interleaved
// with M < P or M not a multiple of P.
// checked = false skips validate() (the generators' output is validated by the tests over
// every kind and a range of shapes; the time model asks for many large ones).
Schedule make_schedule(ScheduleKind kind, int stages, int micro, int virt = 1, bool checked = true);
// Only forwards (and their activation messages), in micro-batch order: evaluation.
Schedule make_forward_only(int stages, int micro, int virt = 1);

// Throws one Error naming the stage, action index and message when the schedule is not
// runnable: a compute missing or twice, a B before its F (or W before its B), a SEND without
// its RECV (or the reverse), messages on a channel received in another order than sent, a
// stage sending to itself, or a deadlock (found by simulating the stages).
void validate(const Schedule& s);

// Relative costs of the actions for simulation and drawing (per chunk).
struct Costs {
  double f = 1, b = 2, w = 0;  // split backward: b = 1, w = 1
  // Per virtual stage (P·V entries) when not empty: its own F, B and W costs, overriding
  // f, b, w (stages of unequal cost: the embedding on the first, the head on the last).
  struct Virtual {
    double f = 1, b = 2, w = 0;
  };
  std::vector<Virtual> virt;
  double transfer = 0;  // a stage-to-stage message: from its SEND to when its RECV can have it
};
Costs default_costs(const Schedule& s);

struct Timed {
  Action action;
  double start = 0, end = 0;
};
// Runs the schedule on an ideal machine (messages take c.transfer, nothing else waits): each
// stage's compute actions with their start and end, and the makespan. Throws like validate on
// a deadlock.
struct Timeline {
  std::vector<std::vector<Timed>> stages;  // compute actions only
  double makespan = 0;
  double busy(int stage) const;
  double bubble(int stage) const { return makespan > 0 ? 1 - busy(stage) / makespan : 0; }
};
Timeline simulate(const Schedule& s, const Costs& c);

// Most micro-batches whose activations a stage holds at once (per chunk, summed over chunks):
// counted from F to B, or to W under split backward.
int max_in_flight(const Schedule& s, int stage);
// The most weight passes (W) a stage of a split-backward schedule has pending at once (their
// B done): over all stages. 0 for the fused schedules.
int max_deferred_weight_passes(const Schedule& s);
// Activation slots a chunk needs: its most micro-batches in flight at once.
int chunk_slots(const Schedule& s, int stage, int chunk);

// The bubble fraction of the schedule's formula (cost/bubble.h): (P−1)/(M+P−1), interleaved
// (P−1)/(V·M+P−1), zero-bubble (P−1)/(3M+P−1), ZB-H1's with F = B = W.
double bubble_formula(const Schedule& s);
double bubble_formula(ScheduleKind kind, int stages, int micro, int virt);

// Per-stage text timeline ("stage 0 |F0 F1 B0-- ..."), one column per unit of cost, and a
// line with each stage's in-flight peak and the simulated bubble against the formula.
std::string render(const Schedule& s);

// Message tag of an action's message (unique per kind, micro-batch and virtual stage).
int message_tag(const Schedule& s, int stage, const Action& a);

}  // namespace strata::parallel::pipeline
