// The run specification of `strata train`: everything one run is (the model, its parallel
// layout, the optimizer, the data, checkpoints, observability), filled by the command from its
// flags and checked in one place, validate(), before any rank starts.
//
//   RunSpec spec{train_config, parallel_config};
//   spec.validate();   // throws one line naming the flags as typed, with their numbers
//
// Which checks run where (docs/config.md): validate() refuses every layout the engine cannot
// run: degrees that do not multiply to the world, heads, tokens or experts that do not split
// over tp, cp or ep, pipelines the model or the schedule cannot hold, and the compositions
// not supported yet, in the flags' words ("--seq 32 / --cp 2 = 16 tokens per cp rank is not
// divisible by 3"). The model, the mesh and the pipeline keep their own checks on what they
// are built with; they are the second line of defence and should never be the first to fire.
// The planner's --local mode (`strata plan --local`) runs check_layout() on the same
// parallel::ParallelLayout, and the planner's search the same rules (parallel/parallel_layout.h).
#pragma once
#include "parallel/parallel_layout.h"
#include "train/config.h"

namespace strata::train {

// A refusal in the command line's words: a lower layer's SettingError with each setting it names
// written as the flag ("tp 3 x dp 2" -> "--tp 3 x --dp 2"), any other error as it is. Every
// command's error line (cli/main.cc) and every check here that adds context to a lower layer's
// refusal goes through it.
std::string in_flags(const std::exception& e);

struct RunSpec {
  TrainConfig train;        // model, optimizer, data, schedule, checkpoints, metrics
  ParallelConfig parallel;  // degrees, ZeRO, precision, pipeline, backend, hosts, restarts
  // Layout flags that were given (on the command line or in a config): refused where the
  // layout would ignore them or read them as "unset", so a typo does not run another job
  // than the one asked for.
  struct Given {
    bool dp = false, schedule = false, cp_mode = false, cp_chunks = false, micro_batches = false;
    bool inner_steps = false;
  } given;

  // The layout on parallel.world() ranks: dp resolved from the world, b = --micro-batch or
  // --batch / dp. Throws naming the degree flags when they do not multiply to the world.
  parallel::ParallelLayout layout() const;
  // Every check of the run, before any rank starts; throws one line naming the flags.
  void validate() const;

 private:
  void check_all() const;  // validate()'s checks, a lower layer's refusal as it says it
  void check_live_recovery(const parallel::ParallelLayout& l) const;
  void check_replica_groups() const;
  // The sequences each replica group trains per step: --batch, or its share of it.
  int64_t group_batch() const;
};

// The layout checks `strata train` and `strata plan --local` share: throws one line naming the
// flags and the numbers when `model` at training sequence `seq` and global batch `batch`
// cannot run on layout `l`. `micro_batches_given`: --micro-batches was typed (else M is the
// accumulation count, named through --batch and --micro-batch).
void check_layout(const model::GPTConfig& model, int seq, int64_t batch,
                  const parallel::ParallelLayout& l, bool micro_batches_given = false);

}  // namespace strata::train
