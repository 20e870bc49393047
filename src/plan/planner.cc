// run_plan: search, explain, size the cluster when nothing fits, plan checkpoints and RLHF.
#include "plan/planner.h"

namespace strata::plan {

PlanResult run_plan(const PlanRequest& req) {
  const TrainSetup& s = req.setup;
  s.model.validate();
  s.gpu.validate("--gpu");
  PlanResult r;
  if (req.rlhf) {  // a mode of its own: RLHF memory and time, no pre-training layout search
    r.rlhf = estimate_rlhf(*req.rlhf);
    if (!r.rlhf->fits()) r.rlhf_smallest_cluster = smallest_rlhf_cluster(*req.rlhf);
    return r;
  }
  check_fixed(s, req.fixed);
  r.search = search_layouts(s, req.fixed);
  r.explanation = explain(r.search, s);
  if (!r.fits()) r.smallest_cluster = smallest_fitting_cluster(s, req.fixed);

  const StateBytesPerParam per = s.state_bytes();
  r.checkpoint_bytes =
      double(count_params(s.model).total()) * double(per.parameter + per.optimizer);
  if (s.optimizer == Optimizer::muon) {  // one moment for the blocks' matrices
    const StageParams whole = stage_params(s.model, Layout{1, 1, 1, 1, 1, 0, 1, Recompute::none}, true, true);
    r.checkpoint_bytes -= 4.0 * double(whole.muon_dense + whole.muon_expert);
  }
  CheckpointPlanInput ck;
  ck.gpus = double(s.gpus);
  ck.gpu_mtbf_s = req.gpu_mtbf_hours * 3600;
  ck.job_mtbf_s = req.job_mtbf_hours * 3600;
  ck.checkpoint_bytes = r.checkpoint_bytes;
  ck.storage_gbps = req.storage_gbps;
  ck.stall_s = req.ckpt_stall_s;
  ck.restart_s = req.restart_minutes * 60;
  // In-memory copies every step: lost work in steps of the best layout (none fits: unknown).
  if (r.fits()) ck.step_s = r.search.ranked[0].time.step_s;
  r.checkpoint = plan_checkpoints(ck);
  // Replica groups: computed when asked, or on several nodes; shown when asked or recommended.
  if (req.outer.asked || s.gpus > s.gpu.gpus_per_node) {
    std::string problem;
    r.outer = plan_outer(s, r.search, req.outer, &problem);
    if (r.outer && !req.outer.asked && !r.outer->recommended) r.outer.reset();
    if (req.outer.asked) r.outer_problem = problem;
  }
  return r;
}

}  // namespace strata::plan
