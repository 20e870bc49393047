// The MoE load of a training step as metrics.jsonl reports it, and the router-collapse
// watch (docs/moe.md).
//
// From a step's model::expert::LoadStats summed over every rank (the sums of all groups):
//   aux_loss, z_loss        the two router losses per token (as added to the loss)
//   per MoE block:          tokens_per_expert (assignments served), wanted_per_expert
//                           (chosen before capacity), max_over_mean (of served), dropped
//                           fraction (of the N·K assignments), router_entropy (mean nats)
// Collapse: one expert receiving more than `pct`% of a block's chosen assignments for
// `steps` consecutive steps gives one warning line (again after the next healthy step).
#pragma once
#include <string>
#include <vector>

#include "diag/straggler.h"
#include "model/expert/moe.h"
#include "nlohmann/json_fwd.hpp"

namespace strata::train {

nlohmann::json moe_load_json(const model::expert::LoadStats& s, int top_k, double tokens);

// For a straggler line: how many rows each slow rank's experts processed in the window
// against the mean over ranks ("; expert load: rank 3 2.10x the mean (4096 rows)").
std::string expert_load_text(const diag::StragglerCheck& check, const std::vector<double>& rows);

class CollapseWatch {
 public:
  CollapseWatch(double pct, int steps) : pct_(pct), steps_(steps) {}
  // The warning line for this step ("" when none).
  std::string update(const model::expert::LoadStats& s, int64_t step);

 private:
  double pct_;
  int steps_;
  std::vector<int> run_;  // consecutive collapsed steps per block
};

}  // namespace strata::train
