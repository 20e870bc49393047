// An RLHF run's model states next to what `strata plan --rlhf --algo` predicts for the same models
// and rollout batch per rank (plan/rlhf.h) on `ranks` GPUs in fp32 at ZeRO `zero` (actor and
// critic sharded by the engine as the stage says, the frozen models sharded under ZeRO-3,
// as rlhf/ppo.h keeps them): parameters, gradients and optimizer state per model, and the
// KV cache, byte for byte.
#pragma once
#include "model/gpt.h"
#include "nlohmann/json.hpp"
#include "plan/rlhf.h"

namespace strata::rlhf {

// {"actor": {"parameters", "gradients", "optimizer"}, and as the algorithm has them "critic",
//  "reference", "reward", "kv_cache", "model_states"} as the planner estimates them. critic:
// the shape of the value models (critic and reward model; unused by DPO).
nlohmann::json planned_memory(plan::RlAlgo algo, const model::GPTConfig& actor, const model::GPTConfig& critic,
                              int rollout_per_rank, int minibatch, int ranks = 1, int zero = 0);

// "model_states": the sum of every model's parameters, gradients and optimizer bytes.
void add_model_states_total(nlohmann::json& memory);

// measured: the "memory" object of a run's summary. Adds "plan" (planned_memory) and
// "model_states_match_plan" (every model's three states and the KV cache equal).
void compare_with_plan(nlohmann::json& measured, plan::RlAlgo algo, const model::GPTConfig& actor,
                       const model::GPTConfig& critic, int rollout_per_rank, int minibatch, int ranks,
                       int zero);

}  // namespace strata::rlhf
