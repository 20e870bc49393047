// The planner's inputs as a person gives them: `strata plan`'s flags, strata.plan's keywords.
// A field left unset (nullopt) takes what the model preset, the GPU or the search supplies,
// exactly as an absent flag does; errors name the flag ("--gpus must be in [1, 2^24] ...").
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include "plan/planner.h"

namespace strata::plan {

struct PlanArgs {
  std::string model;  // preset; "" for an explicit shape (layers, hidden, heads, seq, vocab)
  std::optional<std::string> arch;  // "gpt" (default for explicit shapes) or "llama"
  std::optional<int64_t> layers, hidden, heads, kv_heads, ffn, seq, vocab, experts, top_k;
  std::optional<int64_t> expert_ffn, shared_experts;  // fine-grained and shared experts
  std::optional<int64_t> route_groups, route_max_groups;  // node-limited routing
  std::string gpu = "h100-80g", intra_bench, inter_bench;
  std::optional<int64_t> gpus, gpus_per_node, global_batch, micro_batches;
  std::optional<double> efficiency;
  std::optional<int> tp, pp, dp, cp, ep, zero, micro_batch;
  std::optional<std::string> recompute, tokens;
  std::string precision = "bf16", grad_precision, optimizer = "adamw";
  std::string cp_mode = "ring", schedule = "1f1b";
  int virtual_stages = 1;
  bool no_sp = false, rlhf = false;
  double headroom = 0.10, bucket_mb = 25, overlap = 1.0;
  double gpu_mtbf_h = 50000, job_mtbf_h = 0, storage_gbps = 50, restart_min = 10;
  std::optional<double> stall_s;
  std::optional<int64_t> rollout_batch, prompt_len, response_len;
  std::optional<std::string> algo;  // --rlhf's RL algorithm: ppo (default), grpo, rloo, dpo
  std::optional<int> epochs;
  std::string critic;
  int top = 10;
};

// "2T", "300B", "15.6e12", "4M" -> a count; errors name `flag`.
double parse_count(const std::string& flag, const std::string& s);

// Checks every argument and builds the request run_plan takes. Throws a one-line Error.
PlanRequest build_plan_request(const PlanArgs& a);

}  // namespace strata::plan
