// Checkpoints of a training run: when to save, what a save holds, and how a run resumes.
//
//   save    after every `--ckpt-every N` steps, into <run-dir>/ckpt/step-NNNNNN through
//           ckpt::Checkpointer (asynchronous: the step pays only for copying its shard into a
//           host buffer; a writer thread writes, fsyncs and commits). The training state
//           recorded beside the flat states is everything the loop needs to continue bit for
//           bit: steps done (= schedule position), the loader position (epoch, samples
//           consumed globally, independent of the world size), tokens seen, the seeds, the
//           configuration, world size, ZeRO stage and precision.
//   resume  `--resume auto|PATH`, or automatically when the supervisor restarted the job
//           (STRATA_RESTART > 0) and checkpoints are on: every rank names the flat ranges its
//           engine holds, and its TensorLayout maps them onto the global tensors, so it reads
//           them from whatever layout wrote them (ckpt/load.h): N ranks at tp t and stage s
//           load into M ranks at tp t' and stage s'. A damaged latest checkpoint is
//           reported and the previous good one used; a checkpoint of another model is one
//           line of error.
//   memory  with `--mem-ckpt-every K`, a copy of every rank's state in shared memory every K
//           steps (recovery/mem_checkpoints.h); a restart or --resume auto continues from it
//           when every rank holds a complete copy of a step newer than the disk's newest
//           (the newest such step; its line says so), else from disk as above.
//   metrics rank 0 keeps metrics.jsonl of the resumed run continuous: records after the
//           checkpoint's step (work lost by the failure) are dropped, and the steps lost are
//           logged; each save adds {"step", "ckpt": {stall_ms, write_ms, ...}}.
// Cost of a save: one memcpy of this rank's shard (16 bytes per parameter at ZeRO 0 / N
// ranks, fp32) on the training thread; the rest overlaps the following steps.
#pragma once
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ckpt/checkpointer.h"
#include "data/dataset.h"
#include "model/stage.h"
#include "nlohmann/json.hpp"
#include "parallel/engine.h"
#include "recovery/earlier_world.h"
#include "recovery/mem_checkpoints.h"
#include "train/config.h"
#include "train/metrics.h"

namespace strata::train {

// Where a run continues from.
struct ResumePoint {
  int64_t step = 0;          // steps already done; 0 = a fresh start
  data::LoaderState loader;  // position after the last batch of those steps
  int64_t tokens_seen = 0;
  std::string dir;             // the checkpoint loaded, empty when fresh
  bool from_memory = false;    // an in-memory copy (dir then says which step)
  int64_t steps_lost = -1;     // last step reached before the failure minus `step`; -1 unknown
  std::vector<double> losses;  // steps 1..step from metrics.jsonl (rank 0), when complete
};

class RunCheckpoints {
 public:
  // `restart` is the supervisor's attempt number (0: first run). Throws one line for an
  // impossible setting (checkpoints without a run directory, a fault that cannot fire).
  RunCheckpoints(const TrainConfig& cfg, const Topology& topo, int restart, const model::StageModel& model,
                 parallel::StepEngine& engine);
  ~RunCheckpoints();

  // Loads the checkpoint to continue from, when asked (--resume, or a restart with saves on),
  // into the engine, and prepares metrics.jsonl (rank 0; call before opening the writer).
  // Collective when world > 1. Progress and warnings go to stderr.
  ResumePoint resume();
  // After `done` steps (1-based count), with the loader's position after that step's batch:
  // saves when due. Records a save into `out` (rank 0; may be null) on the first step after
  // it finished, so its line follows its completion, not the next save. Throws when the
  // last --ckpt-max-failures saves all failed (the run stops; the error names the last one).
  void after_step(int64_t done, const data::LoaderState& loader, int64_t step_tokens,
                  MetricsWriter* out);
  // --spike-action rollback: restores the newest in-memory copy into the engine (every rank
  // together: the guard's verdict is the job's) and returns its step; -1 when there is no
  // copy yet (the step stays a plain skip).
  int64_t roll_back();
  // Before the step's optimizer update: the in-memory copy in flight must have read the states.
  void before_update() {
    if (mem_) mem_->before_update();
  }
  // Waits for the save in flight; returns summary.json's "ckpt" object (null when checkpoints
  // are off) and prints the interval advice of --mtbf. step_s: median seconds per step.
  nlohmann::json finish(double step_s, MetricsWriter* out);
  // Bytes of this rank's two in-memory slots (0 when --mem-ckpt-every is off).
  uint64_t mem_bytes() const { return mem_ ? mem_->bytes() : 0; }
  // summary.json's "mem_ckpt" object (null when off); waits for the copy in flight.
  nlohmann::json mem_summary();
  // After finish(): throws when checkpoints were asked for and the run has no good one (every
  // save failed, none resumed from), so the run ends non-zero saying so.
  void require_good_checkpoint() const;

 private:
  ckpt::SaveRequest request(int64_t done, const data::LoaderState& loader) const;
  // after_failure: as after a supervised restart (a live world whose old ranks hold no common
  // in-memory copy): the run's own checkpoints when it has any.
  ResumePoint resume_from_disk(bool after_failure = false);
  // The in-memory copy every rank holds, when newer than the disk's newest step (collective);
  // nullopt: the disk decides. `prefix` starts the lines ("restart 1: ").
  std::optional<ResumePoint> resume_from_memory(const std::string& prefix);
  // Live recovery (topo.live): loads the newest step every rank of the world that failed
  // holds a copy of, resharded onto this world (collective); when there is none (a rank died
  // before its first copy was committed), the run's disk checkpoint, else step 0.
  ResumePoint resume_live();
  // The newest step every old rank of `old` left a good copy of on this world's hosts
  // (collective); -1 when there is none.
  static int64_t common_step(recovery::EarlierWorld& old);
  // EarlierWorld::load's `same_states` for a world of `old_world` ranks before this one
  // (Topology::same_states; empty in a data-parallel layout).
  std::function<bool(int)> same_states_in(int old_world) const;
  // The states a live world loads from the copies, and which old ranks hold them: under
  // --replica-groups the survivors' (`needed`), at this rank's position (`same`); empty
  // functions: every old rank, same_states_in's.
  struct GroupCopies {
    std::vector<parallel::StateShard> shards;
    std::function<bool(int)> needed, same;
  };
  GroupCopies group_copies();
  // An --elastic restart with --mem-ckpt-replicas on another world size (a host lost): the
  // newest step every rank of the world that failed holds a copy of on this world's hosts,
  // resharded onto this world (collective), when newer than the disk checkpoint; nullopt:
  // the disk decides (one line says why).
  std::optional<ResumePoint> resume_other_world();
  // The layout as the in-memory copies' fingerprint and messages name it.
  std::string mem_layout_text() const;
  // Fills a resume point (and trims metrics.jsonl on rank 0) for a load of `step`.
  ResumePoint resume_point(int64_t step, const data::LoaderState& loader, int64_t tokens_seen,
                           const std::string& dir, const nlohmann::json& extra = nlohmann::json::object());
  nlohmann::json run_state() const;
  void set_run_state(const nlohmann::json& j, const std::string& where) const;
  // This run's layout and precision into `t`'s fields, as checkpoints record them.
  void record_layout(ckpt::TrainState& t, int tp) const;
  void record_finished(MetricsWriter* out);
  // "the newest good checkpoint is DIR" or "there is no good checkpoint"
  std::string good_checkpoint_text() const;
  void log(const std::string& line) const;

  const TrainConfig& cfg_;
  const Topology& topo_;
  int restart_;
  const model::StageModel& model_;
  parallel::StepEngine& engine_;
  std::unique_ptr<ckpt::Checkpointer> saver_;
  std::unique_ptr<recovery::MemCheckpoints> mem_;
  std::shared_ptr<std::atomic<bool>> die_in_save_;  // kill-during-save armed for this save
  int64_t tokens_seen_ = 0;
  size_t recorded_ = 0;  // saves already written to metrics.jsonl
  ResumePoint resumed_;
  std::optional<ResumePoint> live_;  // what resume_live loaded, before the segments were replaced
};

// The checkpoint flags of a run and the faults that need them (--inject kill-during-save needs
// --ckpt-every, the in-memory kinds --mem-ckpt-every): RunSpec::validate checks them before any
// rank starts, one line for the job.
void check_checkpoint_flags(const TrainConfig& cfg);

// metrics.jsonl of a resumed run: keeps the records of steps <= `step`, drops the rest.
// Returns the largest step that had a loss record before (-1 when none or no file) and, when
// steps 1..step all have one, their losses in *losses.
int64_t trim_metrics(const std::string& run_dir, int64_t step, std::vector<double>* losses);

}  // namespace strata::train
