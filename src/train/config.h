// The settings of a training run, as the trainer and the launcher receive them (the command
// line, a run config, or the Python package fill them; train/run_spec.h checks them together):
// TrainConfig (the model, data, schedule, optimizer and what a run records), ParallelConfig
// (the layout, the backend, hosts and recovery), and the run's place in the job (Topology,
// LiveRecovery). One header that the trainer, the checkpointing, the pipeline ranks and the
// launcher all include, so none of them includes another for its configuration.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "comm/process_group.h"
#include "comm/types.h"
#include "core/tensor_layout.h"
#include "diag/fault_inject.h"
#include "diag/straggler.h"
#include "launcher/hostlist.h"
#include "model/context/layout.h"
#include "model/model_part.h"
#include "nlohmann/json.hpp"
#include "parallel/engine.h"
#include "parallel/mesh.h"
#include "parallel/options.h"
#include "parallel/outer.h"
#include "parallel/pipeline/options.h"
#include "train/schedule.h"
#include "train/spike_guard.h"

namespace strata::data {
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
// that world left (recovery/earlier_world.h).
struct LiveRecovery {
  int generation = 0;       // worlds re-formed so far; 0: the job's first world
  int old_world = 0;        // ranks of the world that failed
  // Its id (STRATA_JOB_ID), which its in-memory copies carry (recovery/mem_checkpoints.h); ""
  // on a replacement, which learns it from the survivors (recovery/earlier_world.h).
  std::string old_world_id;
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
  // --replica-groups: the rank this process was launched as (a replacement: the one it stands
  // for), which names its group; and the groups of the last world that formed, in rank order
  // (kept across worlds: a re-formed world's copies are read in the one before's layout).
  int launched_rank = -1;
  std::shared_ptr<std::vector<int>> groups = std::make_shared<std::vector<int>>();
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
  bool counts_loss_of_group = true;  // false: a replica group whose losses group 0 counts
  bool counts_group_loss = true;     // the rank that counts its replica group's own loss
  bool counts_tokens = true;         // ... and its real tokens (one rank of the sequences' cp ranks)
  std::function<double(double)> sum_across_ranks;
  // The data-parallel group (null when alone): the trainer's own collectives, e.g. the
  // injected faults of diag/fault_inject.h.
  comm::ProcessGroup* group = nullptr;
  // A barrier on a communicator of its own, for the checkpoint writer thread (see
  // ckpt/checkpointer.h); empty when alone.
  std::function<void()> ckpt_barrier;
  int restart = 0;  // how many times the supervisor restarted this job (STRATA_RESTART)
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
  // --replica-groups (parallel/outer.h): the outer sync's settings, the group joining the
  // ranks of this rank's position in every group, and this rank's group. Inactive: none.
  // Under live recovery a world may hold fewer groups than options.groups: `present` lists
  // those it holds in rank order (a group lost is left out of the outer syncs until its
  // replacement joins), and `before` those of the world it re-formed from (empty: none).
  struct Outer {
    parallel::OuterOptions options;
    comm::ProcessGroup* across = nullptr;
    int group = 0;
    std::vector<int> present, before;
    int group_ranks = 0;  // ranks per group
  } outer;
};

// What the job does when a rank dies (--recovery): restart every rank (the supervisor,
// --max-restarts); continue on the survivors (shrink); or continue on the survivors while a
// replacement starts, which joins them at a step boundary (live). Data-parallel layouts on
// one host (docs/checkpoints.md, "Live recovery").
enum class Recovery { restart, shrink, live };
Recovery parse_recovery(const std::string& name);  // throws one line naming --recovery
const char* recovery_name(Recovery r);

struct ParallelConfig {
  int nproc = 1;                             // ranks to start on this host
  parallel::MeshDims mesh;                   // --tp, --dp, --pp (parallel/mesh.h)
  parallel::pipeline::PipelineOptions pipeline;  // --schedule, --virtual-stages, --pp-split
  bool sequence_parallel = true;             // --sp / --no-sp, with --tp > 1
  model::CpOptions cp;                       // --cp-mode, --cp-chunks, with --cp > 1
  comm::Backend backend = comm::Backend::shm;
  parallel::DataParallelOptions dp;          // --zero, --precision, --bucket-mb, --prefetch
  bool data_parallel = false;                // use the ZeRO engine even on one rank
  bool trace = false;                        // Chrome trace per rank in the run dir
  int max_restarts = 0;                      // supervisor: restarts from the latest checkpoint
  double timeout_s = 0;                      // communication timeout (0: STRATA_TIMEOUT/default)
  // Several hosts (mpi; --hosts, --hostfile, --slurm): ranks fill each host in order, so tp
  // peers (adjacent ranks) share a host; launcher/launcher.h checks hosts and interfaces.
  std::vector<launcher::HostSlots> hosts;
  std::string hosts_source = "--hosts", rsh_agent;
  std::vector<std::string> ifaces;           // --iface
  bool preflight = false;                    // --preflight: the bandwidth doctor before step 1
  bool elastic = false;                      // --elastic: restarts leave out the failed host
  Recovery recovery = Recovery::restart;     // --recovery
  parallel::OuterOptions outer;              // --replica-groups, --inner-steps, ... (DiLoCo)

  // Ranks of the job: the launcher's world when this process is already a rank (started by
  // `strata launch`, mpirun, torchrun or SLURM), else nproc.
  int world() const;
  // Its checks are the run specification's (train/run_spec.h), with the rest of the run.
  // The mesh degrees for world() ranks (throws naming --tp, --dp and the numbers).
  // Under --replica-groups R they are each group's, over world() / R ranks.
  parallel::MeshDims mesh_dims() const { return mesh.resolved(group_world()); }
  int group_world() const { return group_ranks > 0 ? group_ranks : world() / (outer.groups >= 1 ? outer.groups : 1); }
  // Ranks per replica group when a live world keeps the launch's groups, whatever its size
  // (one that lost a group); 0: world() / outer.groups.
  int group_ranks = 0;
  // The ranks that share each global batch: dp, times the replica groups that split it.
  int data_ranks() const {
    return mesh_dims().dp * (outer.groups > 1 && outer.data == parallel::GroupData::split ? outer.groups : 1);
  }
};

}  // namespace strata::train
