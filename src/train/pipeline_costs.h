// The layer split and the time model of a pipeline run (train/pipeline_rank.cc), decided once
// before the stages are built.
//
//   costs     what the embedding, one block and the head cost per micro-batch at the run's
//             shapes, precision and schedule (model/stage_cost.h): timed on world rank 0 and
//             broadcast over the world group, so a noisy timer cannot give two ranks two
//             splits; STRATA_PP_COSTS=estimate uses the flop estimate instead (deterministic)
//   split     --pp-split when given, else the layers balanced by those costs
//   transfer  one stage-to-stage message (the run's n·C floats) timed between stages 0 and 1
//             of the pp group: half the median of 5 round trips after one warm-up,
//             broadcast over the pp group (0 under STRATA_PP_COSTS=estimate)
//   planned   the planner's model of the step (parallel/pipeline/predict.h): the schedule run
//             with each virtual stage's costs and that transfer time; its bubble is what the
//             summary sets beside the measured one and the schedule's formula
#pragma once
#include <string>
#include <vector>

#include "comm/process_group.h"
#include "model/stage_cost.h"
#include "nlohmann/json.hpp"
#include "parallel/pipeline/predict.h"
#include "parallel/pipeline/executor.h"
#include "train/config.h"

namespace strata::train {

struct PipelineCosts {
  std::vector<model::StageChunk> chunks;  // per virtual stage
  model::LayerCosts costs;
  std::string split_from;  // "--pp-split", "measured costs" or "estimated costs"
  double transfer_s = 0;
  parallel::pipeline::Costs model;  // per virtual stage, with transfer_s: what planned ran
  parallel::pipeline::Prediction planned;
};

// The planner's model replayed with one step's measured compute: each stage's costs scaled so
// that its M micro-batches take busy_s[stage] seconds. Its bubble is what the schedule leaves
// idle given how fast the stages actually ran (a stage slowed by other work on the machine
// included); measured minus it is what the executor and transport added.
parallel::pipeline::Prediction replay(const PipelineCosts& c,
                                      const parallel::pipeline::Schedule& sched,
                                      const std::vector<double>& busy_s);

// Collective over `world` (every rank) and `pp` (the rank's pipeline group; null when P = 1).
// msg_floats: one stage-to-stage message of this rank.
PipelineCosts pipeline_costs(const TrainConfig& cfg, const ParallelConfig& pc,
                             const parallel::pipeline::Schedule& sched, int micro_batch,
                             DType compute, int64_t msg_floats, comm::ProcessGroup& world,
                             comm::ProcessGroup* pp);

// One step of the pipeline over every stage (collective over the pp group: all-gathers the
// stages' send times and timings): the metrics.jsonl fields (pp_busy_ms, pp_recv_wait_ms split
// into pp_peer_wait_ms and pp_transfer_wait_ms, pp_bubble, pp_bubble_mean, pp_bubble_replayed,
// pp_schedule_ms) and the figures the summary takes medians of.
struct PipelineStep {
  nlohmann::json record;
  double bubble_mean = 0;     // mean over stages of 1 − busy / schedule time (the longest stage's)
  double bubble_own_window = 0;  // the same over each stage's own time (first action to last send)
  double transfer_share = 0;  // mean over stages of transfer wait / schedule time
  double replayed = 0;        // replay(...)'s bubble for this step
};
PipelineStep account_step(const parallel::pipeline::Executor& ex, const PipelineCosts& c,
                          comm::ProcessGroup& pp);

// The costs, split and planned step as summary.json's pipeline fields, and one log line.
nlohmann::json pipeline_costs_json(const PipelineCosts& c);
std::string pipeline_costs_line(const PipelineCosts& c);

}  // namespace strata::train
