// `strata train`: GPT training on one process or N data-parallel ranks (ZeRO stages 0-3).
//
//   strata train --model tiny --data synthetic --steps 300 --run-dir runs/demo
//   strata train --layers 2 --dim 64 --heads 4 --seq 32 --data input.txt --json
//   strata train --nproc 4 --zero 3 --precision bf16 --trace --run-dir runs/z3
//   strata train --nproc 4 --tp 2 --dp 2 --zero 1 --run-dir runs/tp2   (docs/tensor_parallel.md)
//   strata train --nproc 2 --cp 2 --cp-mode ring --seq 1024 ...        (docs/context_parallel.md)
//   strata train --init-from hf/TinyLlama --seq 512 --data DIR ...      (docs/checkpoints.md)
//
// The model is a preset (--model) with optional overrides of its architecture; --seq is the
// training sequence length and may not exceed the model's position table (--max-seq).
#include <iostream>
#include <string>

#include "ckpt/fsutil.h"
#include "cli/command.h"
#include "cli/flags/checkpoint.h"
#include "cli/flags/data.h"
#include "cli/flags/fault.h"
#include "cli/flags/hosts.h"
#include "cli/flags/metrics.h"
#include "cli/flags/model.h"
#include "cli/flags/optimizer.h"
#include "cli/flags/outer.h"
#include "cli/flags/parallel.h"
#include "cli/flags/training.h"
#include "cli/run_config.h"
#include "comm/bootstrap.h"
#include "comm/runtime.h"
#include "comm/types.h"
#include "core/error.h"
#include "parallel/options.h"
#include "train/distributed.h"
#include "train/kernel_paths.h"
#include "train/run_spec.h"

namespace strata::cli::cmd_train {
namespace {

// The families `strata train` takes: every setting of a run (cli/flags/).
struct TrainArgs {
  ModelFlags model;
  DataFlags data;
  TrainingFlags training;
  OptimizerFlags optimizer;
  ParallelFlags parallel;
  HostFlags hosts;
  OuterFlags outer;
  CheckpointFlags checkpoint;
  MetricsFlags metrics;
  FaultFlags faults;
  RecoveryFlags recovery;
};

// The run's settings across families: the model, schedule and what the run records, with
// the checks that involve more than one family. `pc` is the layout with its hosts.
train::TrainConfig resolve(const CLI::App& app, const TrainArgs& a, const train::ParallelConfig& pc) {
  train::TrainConfig cfg;
  const ModelFlags::Resolved model = a.model.resolve(app);
  cfg.model = model.config;
  cfg.model_name = model.name;
  cfg.init_from = a.model.init_from;
  const TrainingFlags& t = a.training;
  cfg.model.recompute = t.recompute_policy();
  if (app.count("--seq")) STRATA_CHECK(t.seq > 0, "--seq must be positive (got ", t.seq, ")");
  // CLI11 clamps a number past int64 to its maximum; no run has 2^40 steps, and below that
  // every token count (steps x batch x seq) stays exact.
  STRATA_CHECK(t.steps > 0 && t.steps <= (int64_t(1) << 40), "--steps must be in [1, 2^40] (got ", t.steps, ")");
  if (app.count("--micro-batch"))
    STRATA_CHECK(t.micro_batch > 0, "--micro-batch must be positive (got ", t.micro_batch, ")");
  cfg.seq = t.seq;
  cfg.seed = t.seed;
  cfg.batch = t.batch;
  cfg.micro_batch = t.micro_batch;
  cfg.eval_every = t.eval_every;
  cfg.eval_batches = t.eval_batches;
  cfg.sample_every = t.sample_every;
  cfg.sample_tokens = t.sample_tokens;
  cfg.guard = t.resolved_guard();
  cfg.data = a.data.data;
  cfg.tail = a.data.tail;
  cfg.doc_mask = a.data.doc_mask;
  cfg.doc_token = a.data.doc_token;
  cfg.schedule.steps = t.steps;
  cfg.schedule.lr = a.optimizer.lr;
  cfg.schedule.min_lr = a.optimizer.resolved_min_lr(app);
  cfg.schedule.warmup = a.optimizer.resolved_warmup(app, t.steps);
  cfg.optim = a.optimizer.optim;
  const MetricsFlags& m = a.metrics;
  cfg.log_every = m.log_every;
  cfg.run_dir = m.run_dir;
  cfg.json = m.json;
  cfg.peak_gflops = m.peak_gflops;
  cfg.straggler = m.straggler;
  cfg.moe_collapse_pct = m.collapse_pct;
  cfg.moe_collapse_steps = m.collapse_steps;
  if (app.count("--threads"))
    STRATA_CHECK(a.parallel.threads >= 1, "--threads must be at least 1 (got ", a.parallel.threads, ")");
  cfg.threads = a.parallel.threads;
  cfg.max_activation_mb = a.parallel.max_activation_mb;
  cfg.ckpt = a.checkpoint.resolve(app);
  const train::CheckpointConfig& ck = cfg.ckpt;
  // R replicas need R hosts besides the rank's own; one replica (the next host's peer) is
  // what is built.
  const int hosts = int(pc.hosts.size()), replicas = ck.mem_replicas;
  STRATA_CHECK(replicas == 0 || hosts > replicas, "--mem-ckpt-replicas ", replicas, " needs ",
               replicas == 1 ? "a second host" : cat(replicas + 1, " hosts"), " to copy to, and ",
               hosts == 0 ? std::string("this job names none (no --hosts, --hostfile or --slurm)")
                          : cat(pc.hosts_source, " names ", hosts),
               "; use --mem-ckpt-replicas 0 (disk checkpoints stay the copy that survives a host)");
  STRATA_CHECK(replicas <= 1, "--mem-ckpt-replicas ", replicas,
               ": one replica per copy (on the next host) is supported, not more; use "
               "--mem-ckpt-replicas 1");
  STRATA_CHECK(replicas == 0 || ck.mem_every > 0, "--mem-ckpt-replicas ", replicas,
               " needs --mem-ckpt-every (it replicates the in-memory copies)");
  STRATA_CHECK(!app.count("--mem-ckpt-replica-mbps") || replicas > 0, "--mem-ckpt-replica-mbps ",
               ck.mem_replica_mbps, " paces the replicas of --mem-ckpt-replicas 1, which this run does not make");
  STRATA_CHECK(ck.mem_every == 0 || !cfg.run_dir.empty(),
               "--mem-ckpt-every needs --run-dir (the in-memory copies are named after it)");
  STRATA_CHECK(!cfg.guard.rollback || ck.mem_every > 0,
               "--spike-action rollback needs in-memory checkpoints to roll back to: add "
               "--mem-ckpt-every K (1: the step before the spike)");
  // A rollback retrains the steps after the copy: none of them may already be on disk
  // (a committed step is never overwritten), which holds when disk saves fall on copies.
  STRATA_CHECK(!cfg.guard.rollback || ck.every % ck.mem_every == 0, "--spike-action rollback "
               "with --mem-ckpt-every ", ck.mem_every, " needs --ckpt-every a multiple of it (got ",
               ck.every, "): a rollback must not train again a step saved to disk");
  // Steps count from 1, as the progress lines print them: --inject-step S fires in step S.
  cfg.fault = a.faults.resolve(pc.world(), cfg.schedule.steps + 1);
  STRATA_CHECK(!cfg.fault.active() || cfg.fault.step >= 1,
               "--inject-step counts steps from 1 (got ", cfg.fault.step, ")");
  return cfg;
}

// --micro-batches M (pipeline): the micro-batch that makes the accumulation count M.
void apply_micro_batches(const CLI::App& app, const train::ParallelConfig& pc, train::TrainConfig& cfg) {
  const int M = pc.pipeline.micro;
  if (!app.count("--micro-batches")) return;
  STRATA_CHECK(M >= 1, "--micro-batches must be at least 1 (got ", M, ")");
  const int dp = pc.data_ranks();
  STRATA_CHECK(cfg.batch % (int64_t(dp) * M) == 0, "--batch ", cfg.batch,
               " does not split into --micro-batches ", M, " x ", dp, " data-parallel rank(s)");
  const int64_t micro = cfg.batch / (int64_t(dp) * M);
  // Both given: they must say the same thing.
  STRATA_CHECK(!app.count("--micro-batch") || cfg.micro_batch == micro, "--micro-batch ",
               cfg.micro_batch, " and --micro-batches ", M, " disagree: --batch ", cfg.batch, " over ", dp,
               " data-parallel rank(s) in ", M, " micro-batches is --micro-batch ", micro,
               "; give one of them");
  cfg.micro_batch = int(micro);
}

// The layout's settings that other families give: precision, recovery, the timeout.
void finish_parallel(const CLI::App& app, const TrainArgs& a, train::ParallelConfig& pc) {
  a.training.apply_precision(app, pc.dp);
  pc.recovery = train::parse_recovery(a.recovery.recovery);
  pc.max_restarts = a.recovery.max_restarts;
  pc.elastic = a.recovery.elastic;
  pc.preflight = a.recovery.preflight;
  pc.trace = a.metrics.trace;
  pc.outer = a.outer.outer;
  STRATA_CHECK(!pc.preflight || pc.world() > 1, "--preflight measures links between ranks; it needs 2 or more");
  pc.data_parallel = app.count("--zero") || app.count("--precision") || app.count("--reduce-dtype") || pc.world() > 1;
  pc.timeout_s = a.faults.timeout_s;
  if (pc.timeout_s == 0) comm::detail::default_timeout_s();  // a bad STRATA_TIMEOUT: one line now
}

void setup(CLI::App& app) {
  auto a = std::make_shared<TrainArgs>();
  // A repeated flag takes its last value, so scripts can append overrides.
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  a->model.add_to(app);
  a->data.add_to(app);
  a->training.add_to(app);
  a->optimizer.add_to(app);
  a->parallel.add_to(app);
  a->hosts.add_to(app);
  a->outer.add_to(app);
  a->checkpoint.add_to(app);
  a->metrics.add_to(app);
  a->faults.add_to(app);
  a->recovery.add_to(app);
  RunConfigFlags& config = add_run_config(app, "training");
  app.callback([&app, a, &config] {
    // One run specification, checked once before any rank starts (train/run_spec.h).
    train::RunSpec spec;
    spec.parallel = a->parallel.resolve(app, a->hosts.resolve());
    spec.train = resolve(app, *a, spec.parallel);
    finish_parallel(app, *a, spec.parallel);
    apply_micro_batches(app, spec.parallel, spec.train);
    spec.given = {app.count("--dp") > 0, app.count("--schedule") > 0, app.count("--cp-mode") > 0,
                  app.count("--cp-chunks") > 0, app.count("--micro-batches") > 0,
                  app.count("--inner-steps") > 0};
    spec.validate();
    // A printed config is one that runs: it is checked as the run would be, then printed.
    if (config.print) {
      std::cout << resolved_config(app, "training");
      return;
    }
    const train::TrainConfig& cfg = spec.train;
    const train::ParallelConfig& pc = spec.parallel;
    // Flags that act only in another layout: accepted, and said once (not per rank).
    if (!comm::launched_as_rank()) {
      if (app.count("--no-sp") && pc.mesh_dims().tp == 1)
        std::cerr << "note: --no-sp does nothing without --tp (sequence parallelism splits the "
                     "tensor-parallel ranks' activations)\n";
      if (app.count("--prefetch") && pc.dp.stage < 3)
        std::cerr << "note: --prefetch does nothing below --zero 3 (it gathers ZeRO-3's sharded "
                     "layers ahead of their use)\n";
    }
    // The run dir keeps the resolved config: --config RUN/config.toml runs it again.
    if (!cfg.run_dir.empty() && !comm::launched_as_rank()) {
      ckpt::make_dirs(cfg.run_dir);
      ckpt::atomic_write_file(cfg.run_dir + "/config.toml", resolved_config(app, "training"));
    }
    // The kernel paths (STRATA_ISA, STRATA_KERNELS) are settled before any rank starts on
    // this host: a bad value, or a forced path that the CPU lacks or that fails its
    // self-check, is one line here. Ranks on other hosts choose (and refuse) on their own.
    if (!comm::launched_as_rank() && pc.hosts.empty())
      train::chosen_kernel_paths(pc.dp.precision == parallel::Precision::bf16);
    if (std::optional<int> code = train::launch_ranks_if_needed(cfg, pc)) {
      if (*code != 0) throw ExitCode{*code};
      return;
    }
    train::train_as_rank(cfg, pc);
  });
}

static Register reg_train("train", "Train a GPT model on one process or N data-parallel ranks", setup);

}  // namespace
}  // namespace strata::cli::cmd_train
