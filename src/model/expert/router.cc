#include "model/expert/router.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <utility>

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

namespace {

// Which experts token t may choose: all, or under node-limited routing those of the M groups
// whose best ceil(K / M) scores sum highest (ties to the lower group id).
void allowed_experts(const MoEConfig& cfg, const float* score, std::vector<char>& allowed) {
  const int E = cfg.experts;
  allowed.assign(size_t(E), 1);
  if (!cfg.limits_groups()) return;
  const int G = cfg.route_groups, M = cfg.route_max_groups, per = E / G;
  const int best = std::min(per, (cfg.top_k + M - 1) / M);
  std::vector<float> top(static_cast<size_t>(per));
  std::vector<std::pair<double, int>> groups(static_cast<size_t>(G));
  for (int q = 0; q < G; ++q) {
    std::copy(score + q * per, score + (q + 1) * per, top.begin());
    std::partial_sort(top.begin(), top.begin() + best, top.end(), std::greater<float>());
    double sum = 0;
    for (int i = 0; i < best; ++i) sum += top[size_t(i)];
    groups[size_t(q)] = {-sum, q};  // ascending: the highest sums, then the lower ids, first
  }
  std::sort(groups.begin(), groups.end());
  std::fill(allowed.begin(), allowed.end(), 0);
  for (int i = 0; i < M; ++i) {
    const int q = groups[size_t(i)].second;
    std::fill(allowed.begin() + q * per, allowed.begin() + (q + 1) * per, 1);
  }
}

}  // namespace

// Token t's scores (p: softmax or sigmoid), its top-k among the allowed experts and their
// gates; adds to its balance segment `seg` (wanted E | balance source E | rows 1) and returns
// the entropy of its balance source and its logits' log-sum-exp.
static std::pair<double, double> route_token(Routing& r, int64_t t, const float* z, const MoEConfig& cfg, const float* bias,
                          double* seg, std::vector<float>& score, std::vector<char>& allowed) {
  const int E = cfg.experts, K = cfg.top_k;
  const bool sigmoid = cfg.score == RouterScore::sigmoid;
  float* p = r.probs.data() + t * E;
  const float mx = *std::max_element(z, z + E);
  double s = 0;
  for (int e = 0; e < E; ++e) s += std::exp(double(z[e]) - mx);
  const double lse = mx + std::log(s);
  r.lse[size_t(t)] = float(lse);
  double total = 0, entropy = 0;  // sigmoid: the scores' sum, which normalises the balance source
  for (int e = 0; e < E; ++e) {
    p[e] = sigmoid ? float(1.0 / (1.0 + std::exp(-double(z[e])))) : float(std::exp(double(z[e]) - lse));
    total += p[e];
  }
  for (int e = 0; e < E; ++e) {
    const double q = sigmoid ? p[e] / total : p[e];  // the balance source: p, or s / sum s
    seg[E + e] += q;
    if (q > 0) entropy -= q * std::log(q);
  }
  seg[2 * E] += 1;
  // Top-k by decreasing score (plus the balancing bias) among the allowed experts, ties to the
  // lower id (a stable selection).
  for (int e = 0; e < E; ++e) score[size_t(e)] = bias ? p[e] + bias[e] : p[e];
  allowed_experts(cfg, score.data(), allowed);
  int32_t* c = r.choice.data() + t * K;
  double denom = 0;
  for (int k = 0; k < K; ++k) {
    int best = -1;
    for (int e = 0; e < E; ++e) {
      if (!allowed[size_t(e)] || std::find(c, c + k, e) != c + k) continue;
      if (best < 0 || score[size_t(e)] > score[size_t(best)]) best = e;
    }
    c[k] = best;
    denom += p[best];
    ++r.wanted[size_t(best)];
    seg[best] += 1;
  }
  for (int k = 0; k < K; ++k) r.gate[size_t(t * K + k)] = float(p[c[k]] / denom);
  return {entropy, lse};
}

// The balance loss from the segments' sums (already over the group's ranks): this rank's share
// of each segment's a · G · E · sum_e f_e P_e (n / G of it for its n rows), and per segment
// d aux / d (balance source of a row) = a · E · f_e; the group's N and wanted on the way.
static double balance_loss(Routing& r, const std::vector<double>& sums, int64_t segs, int64_t N,
                           const MoEConfig& cfg) {
  const int E = r.E, K = r.K;
  const int64_t W = 2 * E + 1;
  r.group_N = 0;
  r.group_wanted.assign(size_t(E), 0);
  r.seg_daux.assign(size_t(segs * E), 0.0);
  double aux = 0;
  for (int64_t q = 0; q < segs; ++q) {
    const double* seg = sums.data() + q * W;
    const double G = seg[2 * E];
    r.group_N += int64_t(G);
    for (int e = 0; e < E; ++e) r.group_wanted[size_t(e)] += int64_t(seg[e]);
    if (G == 0) continue;
    const double n = double(std::min<int64_t>(r.seg_rows, N - q * r.seg_rows));
    double balance = 0;
    for (int e = 0; e < E; ++e) {
      const double f = seg[e] / (G * K);
      balance += f * (seg[E + e] / G);
      r.seg_daux[size_t(q * E + e)] = double(cfg.aux_coef) * E * f;
    }
    aux += double(cfg.aux_coef) * n * E * balance;
  }
  return aux;
}

void route(Routing& r, const float* logits, int64_t N, const MoEConfig& cfg, const RouteGroup* group,
           const float* bias, int64_t seq_rows) {
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
  // Balance segments: the whole group, or each sequence (seq_rows local rows each).
  const bool per_seq = cfg.aux_scope == AuxScope::sequence && seq_rows > 0;
  STRATA_CHECK(!per_seq || N % seq_rows == 0, "router: ", N, " rows are not whole sequences of ", seq_rows);
  const int64_t segs = per_seq ? N / seq_rows : 1;
  r.seg_rows = per_seq ? seq_rows : N;
  // sums: per segment wanted (E), the balance source's sums (E) and rows (1).
  const int64_t W = 2 * E + 1;
  std::vector<double> sums(size_t(segs * W), 0.0);
  double zsum = 0, entropy = 0;
  std::vector<char> allowed;
  std::vector<float> score(static_cast<size_t>(E));
  for (int64_t t = 0; t < N; ++t) {
    const auto [h, lse] = route_token(r, t, logits + t * E, cfg, bias, sums.data() + (t / r.seg_rows) * W, score,
                                      allowed);
    entropy += h;
    zsum += lse * lse;
  }
  // The group's sums (each segment's over the ranks holding parts of it).
  if (group) group->ranks->all_reduce(sums.data(), sums.size());
  r.aux = balance_loss(r, sums, segs, N, cfg);
  // k-major, then token order: every first choice is served before any second choice. A
  // capacity no expert can reach (dropless) needs no group order.
  const int64_t G = r.group_N;
  const int64_t cap = cfg.capacity(G);
  serve(r, cap, group && cap < G * K ? group : nullptr);
  r.zsum = double(cfg.z_coef) * zsum;
  r.entropy_sum = entropy;
}

void route_backward(const Routing& r, const float* logits, const float* dgate, float scale, const MoEConfig& cfg,
                    float* dlogits) {
  const int E = r.E, K = r.K;
  const int64_t N = r.N;
  const bool sigmoid = cfg.score == RouterScore::sigmoid;
  std::vector<double> dp(static_cast<size_t>(E));
  for (int64_t t = 0; t < N; ++t) {
    const float* p = r.probs.data() + t * E;
    const int32_t* c = r.choice.data() + t * K;
    const float* g = r.gate.data() + t * K;
    const float* dg = dgate + t * K;
    const double* daux = r.seg_daux.data() + (t / r.seg_rows) * E;
    // The balance loss's: on p (softmax), or on s / sum s (sigmoid), through the normalisation.
    double total = 0, sdq = 0;
    for (int e = 0; e < E; ++e) total += p[e];
    for (int e = 0; e < E; ++e) sdq += double(p[e]) / total * scale * daux[e];
    for (int e = 0; e < E; ++e)
      dp[size_t(e)] = sigmoid ? (scale * daux[e] - sdq) / total : scale * daux[e];
    // g_k = p_{c_k} / S: d p_{c_j} = dg_j / S - sum_k dg_k g_k / S.
    double S = 0, dot = 0;
    for (int k = 0; k < K; ++k) {
      S += p[c[k]];
      dot += double(dg[k]) * g[k];
    }
    for (int k = 0; k < K; ++k) dp[size_t(c[k])] += (double(dg[k]) - dot) / S;
    // z-loss: d (z · lse^2) / d logit_e = 2 z · lse · softmax_e.
    const double dz = 2.0 * cfg.z_coef * scale * r.lse[size_t(t)];
    if (sigmoid) {  // s_e = sigmoid(z_e): d s_e / d z_e = s_e (1 - s_e)
      for (int e = 0; e < E; ++e) {
        const double soft = std::exp(double(logits[t * E + e]) - r.lse[size_t(t)]);
        dlogits[t * E + e] = float(dp[size_t(e)] * p[e] * (1.0 - p[e]) + dz * soft);
      }
      continue;
    }
    double pdp = 0;
    for (int e = 0; e < E; ++e) pdp += double(p[e]) * dp[size_t(e)];
    for (int e = 0; e < E; ++e)
      dlogits[t * E + e] = float(double(p[e]) * (dp[size_t(e)] - pdp) + dz * p[e]);
  }
}

}  // namespace strata::model::expert
