// Replica groups (DiLoCo, parallel/outer.h) on a planned cluster: the best layout split into R
// groups that each train B / R sequences per step with their own collectives, and meet every H
// steps across the inter-node network. What crosses per sync and per step, how long the
// exchange takes, the smallest H that keeps it within a share of the training time, the step
// and memory with the groups' outer state (cost::outer_state_bytes, what `strata train`
// holds), and whether the groups beat the layout's data parallelism when the inter-node link
// is what bounds its step.
#pragma once
#include <optional>
#include <string>

#include "parallel/outer.h"
#include "plan/estimate.h"
#include "plan/search.h"

namespace strata::plan {

struct OuterRequest {
  bool asked = false;   // groups asked for: the section is printed whatever it finds
  int groups = 0;       // R; 0: one group per node
  int inner_steps = 0;  // H; 0: the smallest H within link_share
  int fragments = 1, overlap = 0;
  parallel::OuterDType dtype = parallel::OuterDType::fp32;
  bool error_feedback = false;
  double link_share = 0.1;  // the share of training time the exchange may take
};

struct OuterEstimate {
  int groups = 1, inner_steps = 1, min_inner_steps = 1;
  Estimate group;        // one group: its layout (the best one's, dp / R), B / R, gpus / R
  Estimate ddp;          // the best layout of the whole cluster, for comparison
  bool inter_node = true;
  double sync_bytes = 0;  // what each GPU sends per full sync (all fragments)
  double sync_s = 0;      // one full exchange
  double exposed_per_step_s = 0;  // the exchange's time per step not hidden by the overlap
  double step_s = 0, tokens_per_s = 0;
  double bytes_per_step = 0, ddp_bytes_per_step = 0;  // per GPU across the groups / over dp
  double ddp_inter_share = 0;  // the share of DDP's step its inter-node data-parallel traffic takes
  int64_t state_bytes = 0;     // the outer state per GPU
  bool fits = false, recommended = false;
};

// Empty (and *problem says why) when no ranked layout splits into the groups.
std::optional<OuterEstimate> plan_outer(const TrainSetup& s, const SearchResult& r, const OuterRequest& o,
                                        std::string* problem);

}  // namespace strata::plan
