// RLHF memory and time per GPU, by algorithm: terms in rlhf.h.
#include "plan/rlhf.h"

#include <algorithm>
#include <utility>

#include "core/error.h"
#include "cost/shapes.h"

namespace strata::plan {

namespace {

constexpr std::pair<RlAlgo, const char*> kAlgos[] = {
    {RlAlgo::ppo, "ppo"}, {RlAlgo::grpo, "grpo"}, {RlAlgo::rloo, "rloo"}, {RlAlgo::dpo, "dpo"}};

}  // namespace

const std::string& rl_algo_choices() {
  static const std::string choices = [] {
    std::string s;
    for (const auto& [a, name] : kAlgos) s += (s.empty() ? "" : ", ") + std::string(name);
    return s;
  }();
  return choices;
}

RlAlgo parse_rl_algo(const std::string& name) {
  for (const auto& [a, n] : kAlgos)
    if (name == n) return a;
  fail("--algo '", name, "' is not known (", rl_algo_choices(), ")");
}

const char* rl_algo_name(RlAlgo a) {
  for (const auto& [x, n] : kAlgos)
    if (x == a) return n;
  return "?";
}

double RlhfEstimate::total() const {
  double t = kv_cache + activations;
  for (const RlhfModelMemory& m : models) t += double(m.states.total());
  return t;
}

namespace {

// A trained model as a one-stage layout: tp inside the node, data parallel over the rest.
MemoryEstimate trained_memory(const RlhfSetup& s, const ModelSpec& m) {
  TrainSetup t;
  t.model = m;
  t.gpu = s.gpu;
  t.gpus = s.gpus;
  t.precision = s.precision;
  t.fp32_grads = s.fp32_grads;
  t.optimizer = s.optimizer;
  t.seq_parallel = s.seq_parallel;
  t.headroom = s.headroom;
  Layout l;
  l.tp = s.tp;
  l.dp = int(s.gpus / s.tp);
  l.zero = s.zero;
  l.micro_batch = s.micro_batch;
  l.recompute = s.recompute;
  t.global_batch = int64_t(l.dp) * l.micro_batch;
  const std::string problem = layout_problem(t, l);
  STRATA_CHECK(problem.empty(), "--rlhf with ", m.name, ": ", problem);
  return estimate_memory(t, l);
}

// KV-cache bytes of one position of one sequence on one GPU: K and V of every layer, the
// GPU's kv-hidden/tp (one head when the key/value heads are fewer than tp).
double kv_bytes_per_token(const RlhfSetup& s, int64_t bytes_per_value) {
  const ModelSpec& a = s.actor;
  const double kv_local = a.kv_heads >= s.tp ? double(a.kv_hidden()) / s.tp : double(a.head_dim());
  return double(a.layers) * 2 * kv_local * double(bytes_per_value);
}

// The generate/score/train seconds of rlhf.h's first-order model.
void estimate_time(const RlhfSetup& s, int64_t actor_local_params, int64_t bytes_per_value,
                   RlhfEstimate& e) {
  const double F = s.gpu.peak_flops() * s.gpu.efficiency;  // the planner's sustained rate
  const double W = s.gpu.hbm_gbps * 1e9;
  const double B = double(s.rollout_batch), P = double(s.prompt_len), R = double(s.response_len);
  const double T = P + R;
  auto n_local = [&](const ModelSpec& m) {
    m.validate();
    return double(cost::active_matmul_params(gpt_shape(m))) / s.tp;
  };
  const double actor = n_local(s.actor);
  const bool dpo = s.algo == RlAlgo::dpo;
  if (!dpo) {
    const double prefill = 2 * actor * B * P / F;
    const double step_bytes = double(actor_local_params) * double(bytes_per_value) +
                              B * (P + R / 2) * kv_bytes_per_token(s, bytes_per_value);
    e.generate_s = prefill + R * std::max(2 * actor * B / F, step_bytes / W);
  }
  const double critic = dpo ? 0 : n_local(s.critic);
  const double seqs = dpo ? 2 * B : B;  // dpo: chosen and rejected of each pair
  // Forward weights that score: ppo actor, reference, critic, reward; grpo/rloo no critic;
  // dpo the reference alone. Trained weights: ppo actor and critic, the others the actor.
  double scored = 2 * actor + critic, trained = actor;  // grpo, rloo
  if (s.algo == RlAlgo::ppo) scored += critic, trained += critic;
  if (dpo) scored = actor;
  const double train_factor = s.recompute == Recompute::full ? 8 : 6;  // + a recomputed forward
  e.score_s = 2 * scored * seqs * T / F;
  e.train_s = double(s.epochs) * train_factor * trained * seqs * T / F;
}

}  // namespace

RlhfEstimate estimate_rlhf(const RlhfSetup& s) {
  STRATA_CHECK(s.gpus % s.tp == 0, "--rlhf: tp ", s.tp, " does not divide --gpus ", s.gpus);
  STRATA_CHECK(s.rollout_batch >= 1, "--rollout-batch must be at least 1");
  STRATA_CHECK(s.prompt_len >= 1 && s.response_len >= 1,
               "--prompt-len and --response-len must be at least 1 (got ", s.prompt_len, " and ",
               s.response_len, ")");
  STRATA_CHECK(s.epochs >= 1, "--epochs must be at least 1 (got ", s.epochs, ")");
  RlhfEstimate e;
  const bool ppo = s.algo == RlAlgo::ppo, dpo = s.algo == RlAlgo::dpo;
  const int64_t data_ranks = s.gpus / s.tp;
  const StateBytesPerParam per = state_bytes_per_param(s.precision, s.fp32_grads, s.optimizer);
  const int64_t head = s.critic.hidden + 1;  // value head: h weights and a bias, replicated
  const MemoryEstimate actor = trained_memory(s, s.actor);
  e.models.push_back({"actor", count_params(s.actor).total(), true, actor.states});
  auto frozen = [&](const char* role, const ModelSpec& m, const MemoryEstimate& trained,
                    int64_t extra) {
    const int64_t local = trained.dense_params + trained.expert_params;  // after tp sharding
    RlhfModelMemory r{role, count_params(m).total() + extra, false, {}};
    r.states.parameters =
        per.parameter * ((s.zero == 3 ? shard_elems(local, data_ranks) : local) + extra);
    return r;
  };
  e.activations = actor.activations + actor.comm_buffers;
  if (dpo) {
    e.models.push_back(frozen("reference", s.actor, actor, 0));
  } else {
    // The critic's shape is the reward model's: its memory as a trained model gives the
    // reward model's local parameters under every algorithm.
    const MemoryEstimate critic = trained_memory(s, s.critic);
    if (ppo) {
      ModelStateBytes critic_states = critic.states;
      critic_states += zero_model_state_bytes(head, data_ranks, 0, per);
      e.models.push_back({"critic", count_params(s.critic).total() + head, true, critic_states});
      e.activations = std::max(e.activations, critic.activations + critic.comm_buffers);
    }
    e.models.push_back(frozen("reference", s.actor, actor, 0));
    e.models.push_back(frozen("reward", s.critic, critic, head));
    e.kv_cache =
        double(s.rollout_batch) * double(s.actor.seq) * kv_bytes_per_token(s, per.parameter);
  }
  e.usable = s.gpu.memory_bytes() * (1.0 - s.headroom);
  estimate_time(s, actor.dense_params + actor.expert_params, per.parameter, e);
  return e;
}

int64_t smallest_rlhf_cluster(const RlhfSetup& base, int64_t max_gpus) {
  RlhfSetup s = base;
  const int64_t G = base.gpu.gpus_per_node;
  auto fits = [&](int64_t n) {
    if (n % s.tp) return false;
    s.gpus = n;
    return estimate_rlhf(s).fits();
  };
  for (int64_t d = base.gpus + 1; d < G; ++d)
    if (G % d == 0 && fits(d)) return d;
  // Memory falls as N grows (ZeRO shards more), so the first node count that fits is found by
  // doubling and then bisection.
  int64_t lo = base.gpus / G, k = lo + 1, hi = 0;
  while (k * G <= max_gpus) {
    if (fits(k * G)) {
      hi = k;
      break;
    }
    lo = k;
    k *= 2;
  }
  if (!hi) return 0;
  while (hi - lo > 1) {
    int64_t mid = (lo + hi) / 2;
    (fits(mid * G) ? hi : lo) = mid;
  }
  return hi * G;
}

}  // namespace strata::plan
