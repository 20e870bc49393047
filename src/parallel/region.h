// A region of the data-parallel engine: a contiguous range of units of the model's flat
// space whose gradients reduce, and whose ZeRO shards spread, over one group.
//
// A dense model has one region, every unit over the data-parallel group (dp, or dp x cp).
// A Mixture-of-Experts model (model/gpt.h: [dense units 0 .. L+1 | expert units]) has two:
//   dense   units 0 .. L+1 (embeddings, blocks with their routers, final norm) over dp x cp;
//   experts units L+2 .. (this rank's experts of each MoE block) over the expert-data-parallel
//           group edp: the ranks that hold the same experts, one per expert-parallel group.
// Each region has its own ShardLayout (Ψ_region over its group), buckets, gradient reducer,
// stage-3 gatherer, model states and optimizer range; coordinates inside a region are
// relative to its first element (`base` in the flat space).
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "comm/process_group.h"
#include "core/dtype.h"
#include "core/memory.h"
#include "model/gpt.h"
#include "parallel/layout.h"
#include "parallel/muon.h"
#include "parallel/options.h"

namespace strata::parallel {

class GradReducer;
class ParamGatherer;

struct Region {
  Region(comm::ProcessGroup& group, int64_t psi, int64_t base, int first_unit, bool tied_unit0);
  ~Region();
  Region(const Region&) = delete;
  Region& operator=(const Region&) = delete;

  comm::ProcessGroup& pg;
  ShardLayout layout;     // Ψ_region over pg
  int64_t base;           // flat offset of the region's element 0
  int first_unit;         // model unit of the region's unit 0
  bool tied_unit0;        // unit 0 is used at both ends of a pass (the tied embeddings)
  const char* tag = "";   // prefix of its collectives' trace names ("expert ", "embed ")
  bool experts = false;   // the expert region (its norm squares and groups differ)
  const DataParallelOptions* opts = nullptr;
  DType wdtype = DType::f32;  // working dtype of parameters and gradients
  int wbytes = 4;
  std::vector<Range> units;    // region coordinates
  std::vector<Bucket> buckets;
  Range opt_range;             // what the optimizer updates here: [0, Ψ) at stage 0, else own
  std::vector<model::DecayRange> decay;  // decay runs of opt_range (region coordinates)
  // AdamW's runs of opt_range (region coordinates; all of it without Muon), each with the
  // offset of its second moment in exp_avg_sq (Muon's matrices have none).
  struct AdamRun {
    int64_t begin, end;
    bool decay;
    int64_t v_at;
  };
  std::vector<AdamRun> adam;
  std::vector<MuonMatrix> muon;  // region coordinates, whole matrices of this region
  std::vector<int> muon_owner;   // the rank of pg that orthogonalises each (stages 1-3)
  std::vector<Range> replicated;  // replicated views whose squares another tp rank counts
                                  // (ParamView::primary false here)
  // Model states (categories parameters, gradients, optimizer), as in data_parallel.h.
  Buffer params, grads, master, exp_avg, exp_avg_sq;
  std::unique_ptr<GradReducer> reducer;
  std::unique_ptr<ParamGatherer> gatherer;  // stage 3 only

  int stage() const { return opts->stage; }
  int num_units() const { return int(units.size()); }
  bool has_unit(int model_unit) const {
    return model_unit >= first_unit && model_unit < first_unit + num_units();
  }
};

}  // namespace strata::parallel
