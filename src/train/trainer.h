// The training loop. One Trainer runs on every rank; the step engine decides how gradients
// become updated parameters (single process here, data parallel / ZeRO elsewhere), so the
// loop itself never changes with the parallel layout:
//
//   per step:  batch = loader.next()                      (this rank's A micro-batches)
//              engine.begin_step()
//              for each micro-batch m: engine.begin_micro(m, A)
//                                      loss += model.forward(m)         (sum of token losses)
//                                      model.backward(1 / global_real_tokens)
//              engine.end_backward(); grad_norm = engine.step(lr_at(step))
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

#include "model/gpt.h"
#include "nlohmann/json.hpp"
#include "parallel/engine.h"
#include "train/schedule.h"

namespace strata::train {

struct TrainConfig {
  model::GPTConfig model;      // architecture; model.seq is the maximum sequence length
  std::string model_name;      // preset it came from (reported only)
  int seq = 0;                 // T used in training; 0 = model.seq
  std::string data = "synthetic";
  double val_fraction = 0.05;
  uint64_t seed = 1;
  int batch = 8;               // B: global batch in sequences
  int micro_batch = 0;         // b: sequences per rank per micro-step; 0 = B / world
  Schedule schedule;           // lr, min_lr, warmup, steps
  parallel::OptimConfig optim;
  int eval_every = 0;          // steps between evals; 0 = only after the last step
  int eval_batches = 8;        // micro-batches of held-out data per eval
  int sample_every = 0;        // steps between samples; 0 = only after the last step
  int sample_tokens = 64;      // 0 disables sampling
  int log_every = 1;           // progress lines every k steps (metrics.jsonl gets every step)
  std::string run_dir;         // empty: no files
  bool json = false;           // JSON records on stdout instead of human lines
  int threads = 0;             // OpenMP/BLAS threads; 0 = leave as set
  double peak_gflops = 0;      // MFU denominator; 0 = measured sgemm peak (cached)
  int prefetch = 2;            // steps the loader prepares ahead

  // Accumulation steps A = B / (b · world); throws if not integral.
  int accum(int world) const;
  int train_seq() const { return seq > 0 ? seq : model.seq; }
  // Throws one line naming the flag and numbers for any impossible setting.
  void validate(int world) const;
  nlohmann::json to_json() const;
};

// Where this process sits: rank 0 of 1 for a single process. sum_across_ranks adds a value
// over all ranks (identity when alone); the trainer uses it for the reported step loss.
struct Topology {
  int rank = 0;
  int world = 1;
  std::function<double(double)> sum_across_ranks;
};

// Builds the step engine once the model exists. model_owns_state = false asks for a model
// without flat parameter/gradient buffers (the engine binds every unit, e.g. ZeRO-3) and
// makes the engine responsible for initialising parameters from `seed`.
struct EngineFactory {
  bool model_owns_state = true;
  std::function<std::unique_ptr<parallel::StepEngine>(model::GPT&, const parallel::OptimConfig&,
                                                      uint64_t seed)>
      make;
};
EngineFactory local_engine_factory();

struct TrainResult {
  std::vector<double> losses;    // per step, mean over the global batch's real tokens
  double eval_loss = -1;         // last eval; < 0 when none ran
  double entropy_floor = -1;     // of the held-out data when known
  double median_tokens_per_s = 0;
  double median_mfu = 0;
  double wall_s = 0;
  nlohmann::json summary;        // what summary.json holds
};

class Trainer {
 public:
  Trainer(TrainConfig cfg, Topology topo = {}, EngineFactory engine = local_engine_factory());
  ~Trainer();
  // Validates the configuration, opens the data, builds model and engine, trains, evaluates
  // and writes the summary. Throws Error on bad input; never exits.
  TrainResult run();

 private:
  struct Run;
  TrainConfig cfg_;
  Topology topo_;
  EngineFactory engine_factory_;
};

}  // namespace strata::train
