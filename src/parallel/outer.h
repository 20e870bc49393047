// Replica groups synchronised every H steps (DiLoCo, Douillard et al. 2023, arXiv 2311.08105):
// the job's ranks form R groups; inside a group every step is the usual layout (its own
// collectives, its own AdamW), and every `inner_steps` steps the groups meet:
//
//   avg   = mean over groups of the group's parameters          (one all-reduce across groups)
//   Δ     = θ - avg                                              the outer gradient
//   m     = μ·m + Δ                                              outer momentum
//   θ    ← θ - lr·(Δ + μ·m)                                      Nesterov SGD, as PyTorch's
//   every group's parameters ← θ
//
// θ (the global parameters) and m are kept in fp32 for the range of the parameters this rank's
// optimizer updates: the whole model at ZeRO 0, the rank's shard under ZeRO 1-3 (so a group's
// ranks exchange disjoint shards and hold 8 bytes per parameter between them). The update is
// computed as avg + (1 - lr)·Δ - lr·μ·m, the same number in exact arithmetic, so that lr 1 and
// μ 0 give the groups' mean bit for bit (a single group then trains exactly as without groups).
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "parallel/engine.h"

namespace strata::comm {
class ProcessGroup;
}

namespace strata::parallel {

// What each group reads: its own share of every global batch (split; the batch is the job's),
// or every group the same batches (same: each group trains the whole batch, as one group would;
// a check that the outer step changes nothing when the groups agree).
enum class GroupData { split, same };
GroupData parse_group_data(const std::string& s);  // "split" | "same"; throws naming the value
const char* group_data_name(GroupData d);

struct OuterOptions {
  int groups = 1;        // R: replica groups (1: none, unless inner_steps is given)
  int inner_steps = 0;   // H: steps between syncs; 0: kDefaultInnerSteps with groups > 1, else off
  double lr = 0.7;       // the outer learning rate (the paper's 0.7)
  double momentum = 0.9; // μ, Nesterov
  GroupData data = GroupData::split;
  static constexpr int kDefaultInnerSteps = 100;

  bool active() const { return groups > 1 || inner_steps > 0; }
  int steps_per_sync() const { return inner_steps > 0 ? inner_steps : kDefaultInnerSteps; }
  std::string describe() const;  // "2 replica groups, sync every 50 steps, outer lr 0.7, momentum 0.9 (Nesterov)"
};

// What an outer sync did, for the step's record.
struct OuterSyncStats {
  int64_t syncs = 0;          // outer steps so far
  int64_t bytes_sent = 0;     // this rank's payload across groups, over the run
  int64_t bytes_last = 0;     // ... of the last step (0: it did not sync)
};

// A step engine whose parameters meet the other groups' every steps_per_sync() steps and at
// `last_step` (the run's last, so that it ends on the global parameters). `across` joins the
// ranks of the same position in every group (null with one group). Its checkpoint states are
// the inner engine's (named "group<g>.<name>" with several groups, whose inner states differ;
// every rank names every group's, holding its own group's only)
// and "outer.params" and "outer.momentum" (written by group 0).
class OuterSyncEngine final : public StepEngine {
 public:
  OuterSyncEngine(std::unique_ptr<StepEngine> inner, const OuterOptions& o, comm::ProcessGroup* across,
                  int group, int64_t last_step);
  ~OuterSyncEngine() override;

  void begin_step() override { inner_->begin_step(); }
  void begin_micro(int micro, int num_micro) override { inner_->begin_micro(micro, num_micro); }
  void end_backward() override { inner_->end_backward(); }
  float step(float lr) override;
  float step_if(float lr, const std::function<bool(float norm)>& accept) override;
  int64_t step_count() const override { return inner_->step_count(); }
  std::vector<StateShard> state_shards() override;
  void state_loaded(int64_t step_count) override { inner_->state_loaded(step_count); }
  int zero_stage() const override { return inner_->zero_stage(); }
  const char* precision() const override { return inner_->precision(); }

  StepEngine& inner() { return *inner_; }
  const OuterSyncStats& stats() const { return stats_; }
  // Whether the step that brought the count to `step` ends with an outer sync.
  bool syncs_after(int64_t step) const;
  // Bytes of global parameters and outer momentum this rank holds.
  int64_t state_bytes() const;

 private:
  struct Slice;  // one "params" state of the inner engine: the range this rank updates
  void after_step();
  void sync();

  std::unique_ptr<StepEngine> inner_;
  OuterOptions opts_;
  comm::ProcessGroup* across_;
  int group_;
  int64_t last_step_;
  std::vector<Slice> slices_;
  OuterSyncStats stats_;
};

}  // namespace strata::parallel
