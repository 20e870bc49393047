// PPO memory per GPU: terms in rlhf.h.
#include "plan/rlhf.h"

#include <algorithm>

#include "core/error.h"

namespace strata::plan {

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

}  // namespace

RlhfEstimate estimate_rlhf(const RlhfSetup& s) {
  STRATA_CHECK(s.gpus % s.tp == 0, "--rlhf: tp ", s.tp, " does not divide --gpus ", s.gpus);
  STRATA_CHECK(s.rollout_batch >= 1, "--rollout-batch must be at least 1");
  RlhfEstimate e;
  const int64_t data_ranks = s.gpus / s.tp;
  const StateBytesPerParam per = state_bytes_per_param(s.precision, s.fp32_grads, s.optimizer);
  const int64_t head = s.critic.hidden + 1;  // value head: h weights and a bias, replicated
  const MemoryEstimate actor = trained_memory(s, s.actor);
  const MemoryEstimate critic = trained_memory(s, s.critic);
  e.models.push_back({"actor", count_params(s.actor).total(), true, actor.states});
  ModelStateBytes critic_states = critic.states;
  critic_states += zero_model_state_bytes(head, data_ranks, 0, per);
  e.models.push_back({"critic", count_params(s.critic).total() + head, true, critic_states});
  auto frozen = [&](const char* role, const ModelSpec& m, const MemoryEstimate& trained,
                    int64_t extra) {
    const int64_t local = trained.dense_params + trained.expert_params;  // after tp sharding
    RlhfModelMemory r{role, count_params(m).total() + extra, false, {}};
    r.states.parameters =
        per.parameter * ((s.zero == 3 ? shard_elems(local, data_ranks) : local) + extra);
    return r;
  };
  e.models.push_back(frozen("reference", s.actor, actor, 0));
  e.models.push_back(frozen("reward", s.critic, critic, head));
  const ModelSpec& a = s.actor;
  const double kv_local = a.kv_heads >= s.tp ? double(a.kv_hidden()) / s.tp : double(a.head_dim());
  e.kv_cache = double(s.rollout_batch) * double(a.seq) * double(a.layers) * 2 * kv_local *
               double(per.parameter);
  e.activations =
      std::max(actor.activations + actor.comm_buffers, critic.activations + critic.comm_buffers);
  e.usable = s.gpu.memory_bytes() * (1.0 - s.headroom);
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
