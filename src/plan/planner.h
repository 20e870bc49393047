// `strata plan` end to end: search the layouts of a setup, then add the compute, reliability
// and RLHF views of the best one, and render the whole answer as a table or as JSON.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "cost/reliability.h"
#include "nlohmann/json_fwd.hpp"
#include "plan/outer.h"
#include "plan/rlhf.h"
#include "plan/search.h"

namespace strata::plan {

struct PlanRequest {
  TrainSetup setup;
  FixedLayout fixed;
  double train_tokens = 0;  // 0: no days-to-train
  int top = 10;             // ranking rows shown
  // Reliability.
  double gpu_mtbf_hours = 50000;
  double job_mtbf_hours = 0;  // overrides gpu_mtbf_hours when set
  double storage_gbps = 50;
  double restart_minutes = 10;
  double ckpt_stall_s = -1;  // async checkpointing: stall per checkpoint
  // RLHF: when set, the plan is the memory and time split of rlhf and nothing else.
  std::optional<RlhfSetup> rlhf;
  std::vector<std::string> notes;  // e.g. where measured link figures came from
  // Replica groups (DiLoCo): asked for, or considered on several nodes (plan/outer.h).
  OuterRequest outer;
};

struct PlanResult {
  SearchResult search;
  std::vector<std::string> explanation;
  std::optional<ClusterFit> smallest_cluster;  // when nothing fits
  CheckpointPlan checkpoint;
  double checkpoint_bytes = 0;
  std::optional<RlhfEstimate> rlhf;
  int64_t rlhf_smallest_cluster = 0;  // when RLHF does not fit (0: none found)
  // Replica groups: when asked for, or when they are recommended; else why not (asked only).
  std::optional<OuterEstimate> outer;
  std::string outer_problem;
  bool fits() const { return rlhf ? rlhf->fits() : !search.ranked.empty(); }
};

PlanResult run_plan(const PlanRequest& req);
nlohmann::json plan_to_json(const PlanRequest& req, const PlanResult& res);
std::string plan_to_text(const PlanRequest& req, const PlanResult& res);
nlohmann::json estimate_to_json(const Estimate& e);

}  // namespace strata::plan
