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

#include "comm/process_group.h"
#include "core/error.h"
#include "diag/fault_inject.h"
#include "diag/straggler.h"
#include "model/gpt.h"
#include "nlohmann/json.hpp"
#include "parallel/engine.h"
#include "train/spike_guard.h"
#include "train/schedule.h"
#include "train/summary.h"

namespace strata::data {
struct StepBatch;
struct Split;
}

namespace strata::train {

// Checkpointing and resume (train/checkpointing.h).
struct CheckpointConfig {
  int64_t every = 0;       // --ckpt-every: save after every N steps; 0 = no checkpoints
  int keep = 2;            // --ckpt-keep: newest K kept (0: all)
  int64_t keep_every = 0;  // --ckpt-keep-every: also keep every Mth step
  std::string resume;      // --resume: "" (fresh), "auto" (latest under <run-dir>/ckpt) or PATH
  double mtbf_s = 0;       // --mtbf: > 0 prints the Young/Daly checkpoint interval
  int max_failures = 3;    // --ckpt-max-failures: stop after K saves in a row fail (0: never)
  int64_t mem_every = 0;   // --mem-ckpt-every: in-memory copy every K steps; 0 = off
  int mem_replicas = 0;    // --mem-ckpt-replicas: 1 = each copy also on the next host's peer
  double mem_replica_mbps = kDefaultReplicaMbps;  // --mem-ckpt-replica-mbps: pace, MB/s per rank; 0: unpaced
  static constexpr double kDefaultReplicaMbps = 20;
};

// The longest sample --sample-tokens may ask for.
constexpr int kMaxSampleTokens = 4096;

struct TrainConfig {
  model::GPTConfig model;      // architecture; model.seq is the maximum sequence length
  std::string model_name;      // preset it came from (reported only)
  int seq = 0;                 // T used in training; 0 = model.seq
  std::string data = "synthetic";
  double val_fraction = 0.05;
  std::string tail = "drop";   // the epoch's incomplete last global batch: drop | pad | uneven
  bool doc_mask = false;       // attention within documents, positions restarting per document
  int doc_token = -1;          // the token documents begin with; -1: the data's (its manifest)
  uint64_t seed = 1;
  int batch = 8;               // B: global batch in sequences
  int micro_batch = 0;         // b: sequences per rank per micro-step; 0 = B / world
  Schedule schedule;           // lr, min_lr, warmup, steps
  parallel::OptimConfig optim;
  int eval_every = 0;          // steps between evals; 0 = only after the last step
  int eval_batches = 8;        // held-out global batches (of `batch` sequences) per eval
  int sample_every = 0;        // steps between samples; 0 = only after the last step
  int sample_tokens = 64;      // 0 disables sampling; at most kMaxSampleTokens
  int log_every = 1;           // progress lines every k steps (metrics.jsonl gets every step)
  std::string init_from;       // --init-from: a Hugging Face directory to start from (train/init_from.h)
  std::string run_dir;         // empty: no files
  bool json = false;           // JSON records on stdout instead of human lines
  int threads = 0;             // OpenMP/BLAS threads; 0 = leave as set
  double peak_gflops = 0;      // MFU denominator; 0 = measured sgemm peak (cached)
  int prefetch = 2;            // steps the loader prepares ahead
  double max_activation_mb = 0;  // > 0: refuse a layout whose activations per rank exceed it
  diag::StragglerConfig straggler;  // every K steps, name ranks computing X% over the median
  double moe_collapse_pct = 90;  // --collapse-pct: one expert over X% of a block's assignments
  int moe_collapse_steps = 5;     // --collapse-steps: ... for K steps in a row warns
  diag::FaultSpec fault;       // --inject: a fault this run injects on purpose (tests, demos)
  GuardConfig guard;           // --skip-nonfinite, --spike-zscore: steps skipped before their update
  CheckpointConfig ckpt;

  // Accumulation steps A = B / (b · world); throws if not integral.
  int accum(int world) const;
  int train_seq() const { return seq > 0 ? seq : model.seq; }
  // Throws one line naming the flag and numbers for any impossible setting.
  void validate(int world) const;
  nlohmann::json to_json() const;
  nlohmann::json to_json_dense() const;  // to_json without the MoE settings
};

// Live recovery (--recovery live, train/distributed.cc): the world this trainer runs in
// replaces one that lost a rank; the run continues from the in-memory copies every rank of
// that world left (train/earlier_world.h).
struct LiveRecovery {
  int generation = 0;       // worlds re-formed so far; 0: the job's first world
  int old_world = 0;        // ranks of the world that failed
  int launched_world = 0;   // ranks the job was launched with
  std::string failure;      // the launcher's words: "rank 1 was killed by signal 9 (Killed)"
  int64_t failed_step = 0;  // the step this rank was in when its group broke (1-based)
  int64_t failed_ns = 0;    // when this rank saw its group break (now_ns)
  int64_t formed_ns = 0;    // when the new world's group formed (now_ns)
  // This process's re-formations (rank 0 adds each): the newest goes into metrics.jsonl,
  // whose records make summary.json's "live_recovery".
  std::shared_ptr<nlohmann::json> records = std::make_shared<nlohmann::json>(nlohmann::json::array());
  // The data sources, opened once for every world of the job (null: the trainer opens them).
  std::shared_ptr<data::Split> data;
};

// Where this process sits: rank 0 of 1 for a single process. sum_across_ranks adds a value
// over all ranks (identity when alone); the trainer uses it for the reported step loss.
struct Topology {
  int rank = 0;   // in the whole job (rank 0 writes metrics and the summary)
  int world = 1;  // processes of the whole job
  // Data-parallel coordinates (which share of each global batch this rank trains): the
  // same as rank/world unless tensor-parallel peers share their data (dp_world < world).
  int dp_rank = 0, dp_world = 0;  // dp_world 0: rank, world
  int pp = 1;  // pipeline stages of the job (recorded in checkpoints; the stage's model is its own)
  std::string schedule = "1f1b";  // the pipeline's schedule and chunks per stage (recorded in
  int virtual_stages = 1;         // checkpoints, named by the resume line)
  std::string precision;  // --precision (recorded in checkpoints); empty: the engine's states'.
  // Tensor parallelism: the model is this rank's shard (model/shard.h); its peers compute
  // the same loss, which only tp rank 0 adds into the job's sum.
  model::TensorComm* tp = nullptr;
  // Context parallelism: the model keeps this rank's chunks of each sequence and returns the
  // whole sequence's loss, like its cp peers (only cp rank 0 counts it).
  model::ContextComm* cp = nullptr;
  // The expert-parallel group the model is built for (null: every expert on this rank).
  comm::ProcessGroup* ep = nullptr;
  bool counts_loss = true;
  std::function<double(double)> sum_across_ranks;
  // The data-parallel group (null when alone): the trainer's own collectives, e.g. the
  // injected faults of diag/fault_inject.h.
  comm::ProcessGroup* group = nullptr;
  // A barrier on a communicator of its own, for the checkpoint writer thread (see
  // ckpt/checkpointer.h); empty when alone.
  std::function<void()> ckpt_barrier;
  int restart = 0;  // how many times the supervisor restarted this job (STRATA_RESTART)
  // Where this rank's flat states lie in the global tensors when the model is not the
  // trainer's GPT (a pipeline stage, model/stage.h); empty: the GPT's tensor_layout().
  std::function<TensorLayout()> layout;
  LiveRecovery live;  // generation 0 unless this world replaces one that lost a rank
  // Live recovery's rejoin: asked after each step with an in-memory copy (collective); true
  // when the job's world changes there (a replacement joins), and the trainer then throws
  // WorldChange once the step's copy is on its way. Empty: never.
  std::function<bool()> world_changes;
  // --mem-ckpt-replicas 1 across hosts: the group the in-memory writer thread exchanges
  // copies on (its own, so it never interleaves with training collectives), the rank it sends
  // its copies to (same local rank on the next host) and the rank it keeps copies of (same
  // local rank on the previous host); null / -1 when replicas are off or all ranks share one
  // host (an --elastic restart on the surviving host).
  comm::ProcessGroup* replica_group = nullptr;
  int replica_to = -1, replica_from = -1;
  // Live recovery under tp, cp or pp: whether rank q of the `old_world`-rank world before
  // held the states this rank holds (the same tp rank and pipeline stage, any cp rank: a
  // re-formed world differs in its data-parallel degree only, and ZeRO shards span dp x cp).
  // Empty: every old rank did (data parallelism).
  std::function<bool(int q, int old_world)> same_states;
};

// Thrown by Trainer::run at a step boundary where Topology::world_changes said so.
class WorldChange : public Error {
 public:
  explicit WorldChange(int64_t step) : Error(cat("the job's world changes after step ", step)), step(step) {}
  int64_t step;  // steps done
};

// Builds the step engine once the model exists. model_owns_state = false asks for a model
// without flat parameter/gradient buffers (the engine binds every unit, e.g. ZeRO-3) and
// makes the engine responsible for initialising parameters from `seed`.
struct EngineFactory {
  bool model_owns_state = true;
  std::function<std::unique_ptr<parallel::StepEngine>(model::GPT&, const parallel::OptimConfig&,
                                                      uint64_t seed)>
      make;
  // Adds the parallel dimensions' sections to summary.json (train/summary.h), after the
  // last step, on every rank together (it may run collectives), e.g. the engine's memory
  // report and the traced overlap; rank 0's sections are written. Empty: none.
  std::function<void(SummaryBuilder&)> summary_sections;
  DType compute = DType::f32;  // the model's matmul precision (bf16 under --precision bf16)
  // Pipeline parallelism (train/pipeline_rank.h): the stage keeps its own model, so the
  // trainer's GPT holds activations for model_max_batch sequences (>= 0; -1: the
  // micro-batch); run_step runs every micro-batch's forward and backward of a step and
  // returns this rank's sum of token losses; forward_sum returns this rank's sum of an eval
  // batch's token losses (counted as run_step's are: topo.counts_loss); step_metrics adds
  // keys to each step's metrics record (rank 0); samples = false skips sampling (it needs
  // the whole model on one rank).
  int model_max_batch = -1;
  std::function<double(const data::StepBatch&, float scale)> run_step;
  std::function<double(const data::StepBatch&)> forward_sum;
  std::function<nlohmann::json()> step_metrics;
  bool samples = true;
  // The MoE layer of the model run_step runs (a pipeline stage's, covering its blocks), for
  // the step's load statistics; null: the trainer's GPT's.
  model::expert::MoE* moe = nullptr;
  // The model run_step runs (a pipeline stage), for its recomputation time; null: the
  // trainer's GPT.
  const model::StageModel* stage = nullptr;
};
EngineFactory local_engine_factory();

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
