#include "model/expert/router.h"

#include <algorithm>
#include <cmath>

#include "comm/process_group.h"
#include "core/error.h"

namespace strata::model::expert {

namespace {

// Serves the assignments k-major, then in token order, each expert up to `cap`: this rank's
// alone, or (group) in the order of the whole group's, from every rank's (order, expert).
void serve(Routing& r, int64_t cap, const RouteGroup* group) {
  const int64_t N = r.N;
  const int E = r.E, K = r.K;
  if (!group) {
    for (int k = 0; k < K; ++k)
      for (int64_t t = 0; t < N; ++t) {
        const int e = r.choice[size_t(t * K + k)];
        int64_t& n = r.kept[size_t(e)];
        r.slot[size_t(t * K + k)] = n < cap ? n++ : -1;
        r.dropped += r.slot[size_t(t * K + k)] < 0;
      }
    return;
  }
  // keys[k · N + t] = order(t) · E + expert of (t, k), gathered rank-major (every rank the same N).
  const int P = group->ranks->size();
  std::vector<int64_t> mine(size_t(N * K)), all(size_t(P) * size_t(N * K));
  for (int k = 0; k < K; ++k)
    for (int64_t t = 0; t < N; ++t)
      mine[size_t(k * N + t)] = group->order[t] * E + r.choice[size_t(t * K + k)];
  group->ranks->all_gather(mine.data(), all.data(), mine.size(), DType::i64);
  std::vector<int64_t> before(static_cast<size_t>(E), 0);  // the group's assignments to e of earlier k
  std::vector<std::vector<int64_t>> orders(static_cast<size_t>(E));
  for (int k = 0; k < K; ++k) {
    for (auto& o : orders) o.clear();
    for (int q = 0; q < P; ++q)
      for (int64_t t = 0; t < N; ++t) {
        const int64_t key = all[size_t(q) * size_t(N * K) + size_t(k * N + t)];
        orders[size_t(key % E)].push_back(key / E);
      }
    for (auto& o : orders) std::sort(o.begin(), o.end());
    for (int64_t t = 0; t < N; ++t) {
      const int e = r.choice[size_t(t * K + k)];
      const auto& o = orders[size_t(e)];
      const int64_t at = before[size_t(e)] + (std::lower_bound(o.begin(), o.end(), group->order[t]) - o.begin());
      r.slot[size_t(t * K + k)] = at < cap ? r.kept[size_t(e)]++ : -1;
      r.dropped += at >= cap;
    }
    for (int e = 0; e < E; ++e) before[size_t(e)] += int64_t(orders[size_t(e)].size());
  }
}

}  // namespace

void route(Routing& r, const float* logits, int64_t N, const MoEConfig& cfg, const RouteGroup* group,
           const float* bias) {
  const int E = cfg.experts, K = cfg.top_k;
  r.N = N;
  r.E = E;
  r.K = K;
  r.probs.resize(size_t(N * E));
  r.lse.resize(size_t(N));
  r.choice.resize(size_t(N * K));
  r.gate.resize(size_t(N * K));
  r.slot.resize(size_t(N * K));
  r.wanted.assign(size_t(E), 0);
  r.kept.assign(size_t(E), 0);
  r.dropped = 0;
  double zsum = 0, entropy = 0;
  std::vector<double> mean_p(size_t(E), 0.0);
  for (int64_t t = 0; t < N; ++t) {
    const float* z = logits + t * E;
    float* p = r.probs.data() + t * E;
    const float mx = *std::max_element(z, z + E);
    double s = 0;
    for (int e = 0; e < E; ++e) s += std::exp(double(z[e]) - mx);
    const double lse = mx + std::log(s);
    r.lse[size_t(t)] = float(lse);
    zsum += lse * lse;
    for (int e = 0; e < E; ++e) {
      p[e] = float(std::exp(double(z[e]) - lse));
      mean_p[size_t(e)] += p[e];
      if (p[e] > 0) entropy -= double(p[e]) * std::log(double(p[e]));
    }
    // Top-k by decreasing probability (plus the balancing bias), ties to the lower id (a
    // stable selection).
    int32_t* c = r.choice.data() + t * K;
    double denom = 0;
    auto score = [&](int e) { return bias ? p[e] + bias[e] : p[e]; };
    for (int k = 0; k < K; ++k) {
      int best = -1;
      for (int e = 0; e < E; ++e) {
        if (std::find(c, c + k, e) != c + k) continue;
        if (best < 0 || score(e) > score(best)) best = e;
      }
      c[k] = best;
      denom += p[best];
      ++r.wanted[size_t(best)];
    }
    for (int k = 0; k < K; ++k) r.gate[size_t(t * K + k)] = float(p[c[k]] / denom);
  }
  // The group's sums: wanted, the probabilities' sums and N.
  std::vector<double> sums(size_t(2 * E + 1));
  for (int e = 0; e < E; ++e) sums[size_t(e)] = double(r.wanted[size_t(e)]), sums[size_t(E + e)] = mean_p[size_t(e)];
  sums[size_t(2 * E)] = double(N);
  if (group) group->ranks->all_reduce(sums.data(), sums.size());
  const int64_t G = int64_t(sums[size_t(2 * E)]);
  r.group_N = G;
  r.group_wanted.resize(size_t(E));
  for (int e = 0; e < E; ++e) r.group_wanted[size_t(e)] = int64_t(sums[size_t(e)]);
  // k-major, then token order: every first choice is served before any second choice. A
  // capacity no expert can reach (dropless) needs no group order.
  const int64_t cap = cfg.capacity(G);
  serve(r, cap, group && cap < G * K ? group : nullptr);
  double balance = 0;
  for (int e = 0; e < E; ++e)
    balance += sums[size_t(e)] / double(G * K) * (sums[size_t(E + e)] / double(G));
  // This rank's share N / G of the group's aux, a · G · E · balance.
  r.aux = G > 0 ? double(cfg.aux_coef) * double(N) * E * balance : 0.0;
  r.zsum = double(cfg.z_coef) * zsum;
  r.entropy_sum = entropy;
}

void route_backward(const Routing& r, const float* dgate, float scale, const MoEConfig& cfg,
                    float* dlogits) {
  const int E = r.E, K = r.K;
  const int64_t N = r.N;
  // d aux / d p[t][e] = a · E · f_e (the N of the sum cancels the mean's 1/N), the group's f.
  std::vector<double> daux(static_cast<size_t>(E));
  for (int e = 0; e < E; ++e)
    daux[size_t(e)] = double(cfg.aux_coef) * E * double(r.group_wanted[size_t(e)]) / double(r.group_N * K);
  std::vector<double> dp(static_cast<size_t>(E));
  for (int64_t t = 0; t < N; ++t) {
    const float* p = r.probs.data() + t * E;
    const int32_t* c = r.choice.data() + t * K;
    const float* g = r.gate.data() + t * K;
    const float* dg = dgate + t * K;
    for (int e = 0; e < E; ++e) dp[size_t(e)] = scale * daux[size_t(e)];
    // g_k = p_{c_k} / S: d p_{c_j} = dg_j / S - sum_k dg_k g_k / S.
    double S = 0, dot = 0;
    for (int k = 0; k < K; ++k) {
      S += p[c[k]];
      dot += double(dg[k]) * g[k];
    }
    for (int k = 0; k < K; ++k) dp[size_t(c[k])] += (double(dg[k]) - dot) / S;
    double pdp = 0;
    for (int e = 0; e < E; ++e) pdp += double(p[e]) * dp[size_t(e)];
    // z-loss: d (z · lse^2) / d logit_e = 2 z · lse · p_e.
    const double dz = 2.0 * cfg.z_coef * scale * r.lse[size_t(t)];
    for (int e = 0; e < E; ++e)
      dlogits[t * E + e] = float(double(p[e]) * (dp[size_t(e)] - pdp) + dz * p[e]);
  }
}

}  // namespace strata::model::expert
