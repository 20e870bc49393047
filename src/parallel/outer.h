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
// With an encoded dtype (bf16, int8 or int4) each group sends its Δ encoded (parallel/outer_codec.h)
// instead of its parameters; every rank decodes all of them and averages them in fp32, in group
// order, and steps θ ← θ - lr·(Δ̄ + μ·m).
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor_layout.h"
#include "parallel/engine.h"
#include "parallel/outer_codec.h"

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
  // Streaming DiLoCo (Douillard et al. 2025, arXiv 2501.18512):
  int fragments = 1;     // F: the layers in F strided fragments (layer l in fragment l % F), the
                         // fragment p meeting at steps t with t % H == p·H/F (embeddings: fragment 0)
  int overlap = 0;       // τ: an exchange started after step t is merged after step t + τ
  double mix = 0.5;      // α: with τ > 0 the merge is x ← α·x + (1 - α)·θ
  OuterDType dtype = OuterDType::fp32;  // what crosses the groups (parallel/outer_codec.h)
  bool error_feedback = false;  // add what the last encoding rounded away to the next values sent
  static constexpr int kDefaultInnerSteps = 100;

  bool active() const { return groups > 1 || inner_steps > 0; }
  int steps_per_sync() const { return inner_steps > 0 ? inner_steps : kDefaultInnerSteps; }
  // The step offset of fragment p within each round of H steps.
  int offset_of(int fragment) const { return int(int64_t(fragment) * steps_per_sync() / fragments); }
  std::string describe() const;  // "2 replica groups, sync every 50 steps, outer lr 0.7, momentum 0.9 (Nesterov)"
  // The checks every command makes of these settings (strata train and strata plan), one line
  // naming the flag each: the outer step's numbers, and how the fragments (at most
  // `max_fragments`, `fragments_bound` saying what bounds them) and the overlap fit a round of
  // `H` steps (0: not known yet). The job's own checks (ranks, batch, hosts) stay with it.
  void check(int max_fragments, const std::string& fragments_bound, int H) const;
};

// Flat ranges [begin, end) of each of `fragments` fragments of a rank's flat space, from the
// global tensor names of its layout ("h.<l>." is layer l, in fragment l % fragments; every
// other tensor is in fragment 0).
using FlatRanges = std::vector<std::pair<int64_t, int64_t>>;
std::vector<FlatRanges> fragment_ranges(const TensorLayout& layout, int fragments);

// What an outer sync did, for the step's record.
struct OuterSyncStats {
  int64_t syncs = 0;          // fragment exchanges merged so far (one per fragment per round)
  int64_t bytes_sent = 0;     // this rank's payload across groups, over the run
  int64_t bytes_last = 0;     // ... of the last step (0 also where this rank holds none of a
                              // fragment: its shard under ZeRO)
  int started_last = 0;       // exchanges the last step started: the same on every rank
  int64_t ns_last = 0;        // the last step's time in the outer sync (starts and merges)
  int64_t wait_ns_last = 0;   // ... of it blocked in communication
};

// A step engine whose parameters meet the other groups' (see the top of this file), fragment
// by fragment, and all of them at `last_step` (the run's last, so that it ends on the global
// parameters). `across` joins the ranks of the same position in every group (null with one
// group); `fragments` are fragment_ranges() of this rank's flat space (empty: one fragment).
// `present`: the groups taking part (empty: all o.groups), which `across` holds in increasing
// group order, so that a group's place in the sums does not depend on where its ranks sit: a
// world that lost a group (live recovery) averages over the others until its replacement joins.
// Its checkpoint states are the inner engine's (named "group<g>.<name>" with several groups,
// whose inner states differ; every rank names every present group's, holding its own group's
// only), "outer.params" and "outer.momentum" (written by the first present group), with an overlap what each
// group sent in exchanges still in flight ("outer.sent", per group), from which a resume starts
// them again, and with error feedback each group's residual ("outer.residual").
class OuterSyncEngine final : public StepEngine {
 public:
  OuterSyncEngine(std::unique_ptr<StepEngine> inner, const OuterOptions& o, comm::ProcessGroup* across,
                  int group, int64_t last_step, std::vector<FlatRanges> fragments = {},
                  std::vector<int> present = {});
  ~OuterSyncEngine() override;

  void begin_step() override { inner_->begin_step(); }
  void begin_micro(int micro, int num_micro) override { inner_->begin_micro(micro, num_micro); }
  void end_backward() override { inner_->end_backward(); }
  float step(float lr) override;
  float step_if(float lr, const std::function<bool(float norm)>& accept) override;
  int64_t step_count() const override { return inner_->step_count(); }
  std::vector<StateShard> state_shards() override;
  void state_loaded(int64_t step_count) override;
  int zero_stage() const override { return inner_->zero_stage(); }
  const char* precision() const override { return inner_->precision(); }

  StepEngine& inner() { return *inner_; }
  const OuterSyncStats& stats() const { return stats_; }
  // Bytes of global parameters, outer momentum (and in-flight copies) this rank holds.
  int64_t state_bytes() const;

 private:
  struct Slice;     // one "params" state of the inner engine: the range this rank updates
  struct Exchange;  // one fragment's exchange in flight
  void after_step();
  void start(int fragment, int64_t step, bool again = false);  // again: from the kept copy (a resume)
  void finish(Exchange& x, bool replace);
  int64_t start_step_before(int fragment, int64_t step) const;  // the last t <= step it starts at (0: none)

  std::unique_ptr<StepEngine> inner_;
  OuterOptions opts_;
  comm::ProcessGroup* across_;
  int group_;
  std::vector<int> present_;  // the groups taking part, in increasing order (across_'s)
  int64_t last_step_;
  std::vector<FlatRanges> fragments_;
  std::vector<Slice> slices_;
  std::vector<std::unique_ptr<Exchange>> pending_;
  OuterSyncStats stats_;
};

}  // namespace strata::parallel
