// Runs one stage's action list (parallel/pipeline/schedule.h) for one optimizer step.
//
// Communication: activations on one process group of the pipeline's stages, gradients on a
// second one (two channels, so neither's message order constrains the other's). A RECV posts
// an asynchronous receive into the stage model's slot and the compute that consumes it waits
// for it; a SEND posts an asynchronous send from the slot and the stage goes on. A slot's
// buffers are reused only once the send that read them has completed; every send is complete
// when run() returns. Tags carry (virtual stage, micro-batch), so a message taken out of
// order fails loudly in the transport.
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

struct StepTiming {
  double step_s = 0;  // wall time of the schedule (first action to last send completed)
  double busy_s = 0;  // sum of this stage's compute actions
  double recv_wait_s = 0;  // time blocked waiting for a message (schedule bubble + latency)
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

 private:
  Schedule s_;
  int stage_;
  comm::ProcessGroup *act_, *grad_;
  StepTiming last_;
};

// Activation slots per chunk that the schedule needs on `stage` (model::StageModel's slots).
std::vector<int> slots_for(const Schedule& s, int stage);

}  // namespace strata::parallel::pipeline
