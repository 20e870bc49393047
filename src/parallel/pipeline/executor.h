// Runs one stage's action list (parallel/pipeline/schedule.h) for one optimizer step.
//
// Communication: activations on one process group of the pipeline's stages, gradients on a
// second one (two channels, so neither's message order constrains the other's). Receives are
// posted ahead: each channel's RECVs, in schedule order, go into `recv_depth` staging buffers
// of one message each as soon as a buffer is free (at the start of the step, and whenever a
// message is consumed), so a message is moved while the stage computes instead of when the
// stage needs it. At the RECV's place in the schedule the stage waits for its message (if it
// has not arrived) and copies it into the stage model's slot (one memcpy of n·C floats). A
// SEND posts an asynchronous send from the slot and the stage goes on; a slot's buffers are
// reused only once the send that read them has completed; every send is complete when run()
// returns. Tags carry (virtual stage, micro-batch), so a message taken out of order fails
// loudly in the transport. Memory: 2 · recv_depth messages of staging.
//
// Measured per step: the wall time of run(), each compute action's time (busy), and so each
// stage's bubble fraction 1 − busy / step; with tracing on, every F/B/W is a span named by its
// micro-batch (and chunk) on the rank's compute track, the schedule's diagonal in Perfetto.
#pragma once
#include <cstdint>
#include <vector>

#include "comm/process_group.h"
#include "model/stage.h"
#include "parallel/pipeline/schedule.h"

namespace strata::parallel::pipeline {

// When each message of a step was sent and waited for, to split a stage's waiting into the
// time its peer had not yet sent (the schedule's bubble, uneven stages, a peer slowed down)
// and the time after the peer had sent (the transport: hand-offs between threads, copies).
// Clock: steady_clock, which every process on one host shares.
struct MessageTimes {
  std::vector<int64_t> sent_ns;  // per (channel, tag) this stage sent: when it posted the send
  struct Wait {
    int channel, tag, peer;
    int64_t begin_ns, end_ns;  // the wait for the message (begin = end: it was there)
  };
  std::vector<Wait> waits;
};
// Index of (channel, tag) in MessageTimes::sent_ns: channel 0 activations, 1 gradients.
inline size_t message_index(const Schedule& s, int channel, int tag) {
  return size_t(channel) * size_t(s.virtual_stages() * s.micro) + size_t(tag);
}

// A stage's waits split by its peers' send times. sent_ns: every stage's MessageTimes::sent_ns
// concatenated in stage order.
struct WaitSplit {
  double peer_s = 0;      // waiting before the peer posted the send
  double transfer_s = 0;  // waiting after it: the message in flight
};
WaitSplit split_waits(const Schedule& s, const MessageTimes& mine,
                      const std::vector<int64_t>& sent_ns);

struct StepTiming {
  double step_s = 0;  // wall time of the schedule (first action to last send completed)
  double busy_s = 0;  // sum of this stage's compute actions
  double recv_wait_s = 0;  // time blocked waiting for a message (schedule bubble + latency)
  double send_wait_s = 0;  // time blocked until a send that read a slot to reuse completed
  double copy_s = 0;       // copying received messages from staging into the slots
  double bubble() const { return step_s > 0 ? 1 - busy_s / step_s : 0; }
};

class Executor {
 public:
  // act and grad: the two channels, groups of the same P ranks in stage order (may be null
  // when P = 1).
  Executor(Schedule schedule, int stage, comm::ProcessGroup* act, comm::ProcessGroup* grad);
  const Schedule& schedule() const { return s_; }
  int stage() const { return stage_; }

  // Runs the stage's actions over the model's current inputs; returns the head's sum of
  // token losses (0 on other stages). scale: the backward's loss scale.
  double run(model::StageModel& m, float scale);
  const StepTiming& last() const { return last_; }
  const MessageTimes& messages() const { return msgs_; }

 private:
  Schedule s_;
  int stage_;
  comm::ProcessGroup *act_, *grad_;
  StepTiming last_;
  MessageTimes msgs_;
  // Receives posted ahead per channel: two keep one message landing while the previous is consumed.
  static constexpr size_t kRecvDepth = 2;
  std::vector<float> staging_;
};

// Activation slots per chunk that the schedule needs on `stage` (model::StageModel's slots).
std::vector<int> slots_for(const Schedule& s, int stage);

}  // namespace strata::parallel::pipeline
