// The training loop. One Trainer runs on every rank; its step runner (train/step_runner.h)
// decides how this rank's passes run and the step engine how gradients become updated
// parameters (single process here, data parallel / ZeRO / a pipeline stage elsewhere), so
// the loop itself never changes with the parallel layout. A step is named parts:
//
//   begin:     faults due at the step's start; batch = loader.next() (this rank's micro-batches)
//   passes:    engine.begin_step(); loss = runner.forward_backward(batch, 1 / global_real_tokens)
//              engine.end_backward()
//   update:    the guard judges loss and gradient norm; grad_norm = engine.step(lr_at(step))
//   settle:    a skipped or rolled-back step, or the loss joins the run's curve
//   record:    throughput, MFU, MoE load, stragglers: metrics.jsonl and the progress line
//
// Dividing by the *global* real-token count makes the accumulated gradient the mean over
// every real token of the global batch, whatever the split into ranks and micro-batches.
// Only rank 0 writes metrics, the summary and progress lines.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "comm/process_group.h"
#include "core/error.h"
#include "diag/fault_inject.h"
#include "diag/straggler.h"
#include "model/gpt.h"
#include "nlohmann/json.hpp"
#include "parallel/engine.h"
#include "train/config.h"
#include "train/step_runner.h"
#include "train/summary.h"

namespace strata::data {
struct StepBatch;
}

namespace strata::train {

// Thrown by Trainer::run at a step boundary where Topology::world_changes said so.
class WorldChange : public Error {
 public:
  explicit WorldChange(int64_t step) : Error(cat("the job's world changes after step ", step)), step(step) {}
  int64_t step;  // steps done
};

struct TrainResult {
  std::vector<double> losses;    // per step, mean over the global batch's real tokens
  double eval_loss = -1;         // last eval; < 0 when none ran
  int64_t eval_sequences = 0;    // held-out sequences the last eval covered (whole job)
  double entropy_floor = -1;     // of the held-out data when known
  double median_tokens_per_s = 0;
  double median_mfu = 0;
  double wall_s = 0;
  nlohmann::json summary;        // what summary.json holds
};

class Trainer {
 public:
  Trainer(TrainConfig cfg, Topology topo = {}, std::unique_ptr<StepRunner> runner = one_process_runner());
  ~Trainer();
  // Validates the configuration, opens the data, builds model and engine, trains, evaluates
  // and writes the summary. Throws Error on bad input; never exits.
  TrainResult run();

 private:
  struct Run;
  TrainConfig cfg_;
  Topology topo_;
  std::unique_ptr<StepRunner> runner_;
};

}  // namespace strata::train
