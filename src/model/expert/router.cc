#include "model/expert/router.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace strata::model::expert {

void route(Routing& r, const float* logits, int64_t N, const MoEConfig& cfg) {
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
    // Top-k by decreasing probability, ties to the lower id (a stable selection).
    int32_t* c = r.choice.data() + t * K;
    double denom = 0;
    for (int k = 0; k < K; ++k) {
      int best = -1;
      for (int e = 0; e < E; ++e) {
        if (std::find(c, c + k, e) != c + k) continue;
        if (best < 0 || p[e] > p[best]) best = e;
      }
      c[k] = best;
      denom += p[best];
      ++r.wanted[size_t(best)];
    }
    for (int k = 0; k < K; ++k) r.gate[size_t(t * K + k)] = float(p[c[k]] / denom);
  }
  // k-major, then token order: every first choice is served before any second choice.
  const int64_t cap = cfg.capacity(N);
  for (int k = 0; k < K; ++k)
    for (int64_t t = 0; t < N; ++t) {
      const int e = r.choice[size_t(t * K + k)];
      int64_t& n = r.kept[size_t(e)];
      if (n < cap) {
        r.slot[size_t(t * K + k)] = n++;
      } else {
        r.slot[size_t(t * K + k)] = -1;
        ++r.dropped;
      }
    }
  double balance = 0;
  for (int e = 0; e < E; ++e)
    balance += double(r.wanted[size_t(e)]) / double(N * K) * (mean_p[size_t(e)] / double(N));
  r.aux = N > 0 ? double(cfg.aux_coef) * double(N) * E * balance : 0.0;
  r.zsum = double(cfg.z_coef) * zsum;
  r.entropy_sum = entropy;
}

void route_backward(const Routing& r, const float* dgate, float scale, const MoEConfig& cfg,
                    float* dlogits) {
  const int E = r.E, K = r.K;
  const int64_t N = r.N;
  // d aux / d p[t][e] = a · E · f_e (the N of the sum cancels the mean's 1/N).
  std::vector<double> daux(static_cast<size_t>(E));
  for (int e = 0; e < E; ++e)
    daux[size_t(e)] = double(cfg.aux_coef) * E * double(r.wanted[size_t(e)]) / double(N * K);
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
