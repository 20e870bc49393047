// PPO memory against the planner's RLHF estimate (plan_check.h).
#include "rlhf/plan_check.h"

#include "model/shard.h"
#include "plan/hardware.h"
#include "plan/model_spec.h"
#include "plan/rlhf.h"

namespace strata::rlhf {

using nlohmann::json;

static plan::ModelSpec spec_of(const model::GPTConfig& c, const char* name) {
  plan::ModelSpec m = plan::model_spec(model::gpt_shape(c));
  m.name = name;
  return m;
}

json planned_memory(plan::RlAlgo algo, const model::GPTConfig& actor, const model::GPTConfig& critic,
                    int rollout_per_rank, int minibatch, int ranks, int zero) {
  plan::RlhfSetup s;
  s.algo = algo;
  s.actor = spec_of(actor, "actor");
  s.critic = spec_of(critic, "critic");
  s.gpu = plan::gpu_preset("a100-80g");  // only the capacity depends on it, not compared
  s.gpus = ranks;
  s.tp = 1;
  s.zero = zero;
  s.precision = plan::Precision::fp32;
  s.micro_batch = minibatch;
  s.rollout_batch = rollout_per_rank;
  const plan::RlhfEstimate e = plan::estimate_rlhf(s);
  json out = json::object();
  for (const plan::RlhfModelMemory& m : e.models)
    out[m.role] = {{"parameters", m.states.parameters},
                   {"gradients", m.states.gradients},
                   {"optimizer", m.states.optimizer}};
  out["kv_cache"] = int64_t(e.kv_cache);
  add_model_states_total(out);
  return out;
}

static const char* const kRoles[] = {"actor", "critic", "reference", "reward"};

void add_model_states_total(json& memory) {
  int64_t total = 0;
  for (const char* role : kRoles)
    if (memory.contains(role))
      for (const char* k : {"parameters", "gradients", "optimizer"}) total += memory[role][k].get<int64_t>();
  memory["model_states"] = total;
}

void compare_with_plan(json& measured, plan::RlAlgo algo, const model::GPTConfig& actor,
                       const model::GPTConfig& critic, int rollout_per_rank, int minibatch, int ranks, int zero) {
  const json plan = planned_memory(algo, actor, critic, rollout_per_rank, minibatch, ranks, zero);
  bool same = measured["actor"].value("kv_cache", int64_t(0)) == plan["kv_cache"].get<int64_t>() &&
              measured["model_states"] == plan["model_states"];
  for (const char* role : kRoles) {
    same = same && measured.contains(role) == plan.contains(role);
    if (plan.contains(role))
      for (const char* k : {"parameters", "gradients", "optimizer"})
        same = same && measured.contains(role) && measured[role][k] == plan[role][k];
  }
  measured["plan"] = plan;
  measured["model_states_match_plan"] = same;
}

}  // namespace strata::rlhf
