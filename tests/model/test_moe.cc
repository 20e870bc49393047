// MoE blocks (model/expert/): gradients of the router, the experts, the load-balancing
// loss and the z-loss against central finite differences of an independent
// double-precision implementation; the capacity's drop order; the MoE GPT's table.
#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "core/rng.h"
#include "gtest/gtest.h"
#include "model/expert/moe.h"
#include "model/gpt.h"

namespace strata::model::expert {
namespace {

constexpr int C = 8, E = 4;
constexpr int64_t N = 12;

// Parameters of one MoE block in double: router (E, C), then per expert W1 (H, C), b1 (H),
// W2 (C, H), b2 (C) (H = 4C unless fine-grained), the shared experts' MLP of Hs units (empty:
// none); plus the input x (N, C) and the output weights c (N, C).
struct Params {
  std::vector<double> router, x, c;
  std::vector<std::vector<double>> w1, b1, w2, b2;
  std::vector<double> s1, sb1, s2, sb2;
};

Params random_params(uint64_t seed, int H = 4 * C, int Hs = 0) {
  Rng rng(seed, 0);
  auto fill = [&](size_t n, double s) {
    std::vector<double> v(n);
    for (double& x : v) x = s * (2.0 * rng.uniform_double() - 1.0);
    return v;
  };
  Params p;
  p.router = fill(E * C, 1.0);
  p.x = fill(N * C, 1.0);
  p.c = fill(N * C, 1.0);
  for (int e = 0; e < E; ++e) {
    p.w1.push_back(fill(size_t(H) * C, 0.5));
    p.b1.push_back(fill(size_t(H), 0.1));
    p.w2.push_back(fill(size_t(H) * C, 0.5));
    p.b2.push_back(fill(C, 0.1));
  }
  if (Hs > 0) {
    p.s1 = fill(size_t(Hs) * C, 0.5);
    p.sb1 = fill(size_t(Hs), 0.1);
    p.s2 = fill(size_t(Hs) * C, 0.5);
    p.sb2 = fill(C, 0.1);
  }
  return p;
}

double gelu(double x) {
  const double k = std::sqrt(2.0 / M_PI);
  return 0.5 * x * (1.0 + std::tanh(k * (x + 0.044715 * x * x * x)));
}

// One GELU MLP of H = b1.size() units on row x: its output's dot with c.
double mlp_dot(const double* x, const double* c, const std::vector<double>& w1, const std::vector<double>& b1,
               const std::vector<double>& w2, const std::vector<double>& b2) {
  const size_t H = b1.size();
  std::vector<double> a(H);
  for (size_t j = 0; j < H; ++j) {
    double h = b1[j];
    for (int q = 0; q < C; ++q) h += w1[j * C + q] * x[q];
    a[j] = gelu(h);
  }
  double out = 0;
  for (int q = 0; q < C; ++q) {
    double o = b2[q];
    for (size_t j = 0; j < H; ++j) o += w2[q * H + j] * a[j];
    out += c[q] * o;
  }
  return out;
}

// The loss sum_t <c_t, out_t> + aux + z of one group, written from the definitions in
// router.h, config.h and moe.h, in double: softmax or sigmoid scores, routing limited to the
// best groups, the balance loss per group or per sequence of seq_rows rows, shared experts.
double reference_loss(const Params& p, const MoEConfig& cfg, int64_t seq_rows = 0) {
  const int K = cfg.top_k;
  const bool sigmoid = cfg.score == RouterScore::sigmoid;
  const int64_t seg = cfg.aux_scope == AuxScope::sequence && seq_rows > 0 ? seq_rows : N;
  std::vector<double> probs(N * E), source(N * E);
  double zsum = 0;
  std::vector<std::vector<int>> choice(N);
  std::vector<std::vector<double>> gate(N);
  for (int64_t t = 0; t < N; ++t) {
    std::vector<double> z(E);
    for (int e = 0; e < E; ++e) {
      z[e] = 0;
      for (int c = 0; c < C; ++c) z[e] += p.x[t * C + c] * p.router[e * C + c];
    }
    const double mx = *std::max_element(z.begin(), z.end());
    double s = 0;
    for (double v : z) s += std::exp(v - mx);
    const double lse = mx + std::log(s);
    zsum += lse * lse;
    double total = 0;
    for (int e = 0; e < E; ++e) {
      probs[t * E + e] = sigmoid ? 1.0 / (1.0 + std::exp(-z[e])) : std::exp(z[e] - lse);
      total += probs[t * E + e];
    }
    for (int e = 0; e < E; ++e) source[t * E + e] = sigmoid ? probs[t * E + e] / total : probs[t * E + e];
    std::vector<bool> allowed(E, true);
    if (cfg.limits_groups()) {
      const int G = cfg.route_groups, M = cfg.route_max_groups, per = E / G;
      const int best = std::min(per, (K + M - 1) / M);
      std::vector<std::pair<double, int>> sums;
      for (int q = 0; q < G; ++q) {
        std::vector<double> v(probs.begin() + t * E + q * per, probs.begin() + t * E + (q + 1) * per);
        std::sort(v.rbegin(), v.rend());
        double sum = 0;
        for (int i = 0; i < best; ++i) sum += v[i];
        sums.push_back({-sum, q});
      }
      std::sort(sums.begin(), sums.end());
      allowed.assign(E, false);
      for (int i = 0; i < M; ++i)
        for (int e = 0; e < per; ++e) allowed[sums[i].second * per + e] = true;
    }
    std::vector<int> order;
    for (int e = 0; e < E; ++e)
      if (allowed[e]) order.push_back(e);
    std::stable_sort(order.begin(), order.end(),
                     [&](int a, int b) { return probs[t * E + a] > probs[t * E + b]; });
    double denom = 0;
    for (int k = 0; k < K; ++k) denom += probs[t * E + order[k]];
    for (int k = 0; k < K; ++k) {
      choice[t].push_back(order[k]);
      gate[t].push_back(probs[t * E + order[k]] / denom);
    }
  }
  std::vector<std::vector<bool>> kept(N, std::vector<bool>(K, false));
  std::vector<int64_t> load(E, 0);
  const int64_t cap = cfg.capacity(N);
  for (int k = 0; k < K; ++k)
    for (int64_t t = 0; t < N; ++t)
      if (load[choice[t][k]] < cap) ++load[choice[t][k]], kept[t][k] = true;
  double loss = 0;
  for (int64_t t = 0; t < N; ++t) {
    for (int k = 0; k < K; ++k) {
      if (!kept[t][k]) continue;
      const int e = choice[t][k];
      loss += gate[t][k] * mlp_dot(&p.x[t * C], &p.c[t * C], p.w1[e], p.b1[e], p.w2[e], p.b2[e]);
    }
    if (!p.s1.empty()) loss += mlp_dot(&p.x[t * C], &p.c[t * C], p.s1, p.sb1, p.s2, p.sb2);
  }
  double aux = 0;
  for (int64_t b = 0; b < N; b += seg) {
    std::vector<double> wanted(E, 0.0), mean(E, 0.0);
    for (int64_t t = b; t < b + seg; ++t) {
      for (int k = 0; k < K; ++k) wanted[choice[t][k]] += 1;
      for (int e = 0; e < E; ++e) mean[e] += source[t * E + e] / double(seg);
    }
    double balance = 0;
    for (int e = 0; e < E; ++e) balance += wanted[e] / double(seg * K) * mean[e];
    aux += cfg.aux_coef * double(seg) * E * balance;
  }
  return loss + aux + cfg.z_coef * zsum;
}

std::vector<float> to_f32(const std::vector<double>& v) { return {v.begin(), v.end()}; }

// strata's fp32 forward and backward of the same block (scale 1): gradients of everything.
struct Grads {
  std::vector<float> router, x;
  std::vector<std::vector<float>> w1, b1, w2, b2;
  std::vector<float> s[4];  // the shared experts' (empty: none)
  double loss = 0;
  int64_t dropped = 0;
};

Grads strata_grads(const Params& p, const MoEConfig& cfg, int64_t seq_rows = 0) {
  MoE moe(cfg, 1, C);
  std::vector<float> router = to_f32(p.router), x = to_f32(p.x), c = to_f32(p.c);
  std::vector<std::vector<float>> w[4], g[4];
  MoEWeights W, G;
  Grads out;
  out.router.assign(E * C, 0.0f);
  W.router = router.data();
  G.router = out.router.data();
  for (int e = 0; e < E; ++e) {
    w[0].push_back(to_f32(p.w1[e]));
    w[1].push_back(to_f32(p.b1[e]));
    w[2].push_back(to_f32(p.w2[e]));
    w[3].push_back(to_f32(p.b2[e]));
    for (int j = 0; j < 4; ++j) g[j].push_back(std::vector<float>(w[j].back().size(), 0.0f));
  }
  for (int e = 0; e < E; ++e) {
    W.experts.push_back({w[0][e].data(), w[1][e].data(), w[2][e].data(), w[3][e].data()});
    G.experts.push_back({g[0][e].data(), g[1][e].data(), g[2][e].data(), g[3][e].data()});
  }
  std::vector<float> sw[4] = {to_f32(p.s1), to_f32(p.sb1), to_f32(p.s2), to_f32(p.sb2)};
  if (!p.s1.empty()) {
    for (int j = 0; j < 4; ++j) out.s[j].assign(sw[j].size(), 0.0f);
    W.shared = {sw[0].data(), sw[1].data(), sw[2].data(), sw[3].data()};
    G.shared = {out.s[0].data(), out.s[1].data(), out.s[2].data(), out.s[3].data()};
  }
  std::vector<float> y(N * C, 0.0f);
  moe.forward(0, x.data(), nullptr, y.data(), N, W, false, nullptr, 0, seq_rows);
  for (int64_t i = 0; i < N * C; ++i) out.loss += double(c[i]) * y[i];
  out.loss += moe.last_aux() + moe.last_z();
  out.x.assign(N * C, 0.0f);
  moe.backward(0, c.data(), out.x.data(), W, G, false, 1.0f);
  out.w1 = g[0], out.b1 = g[1], out.w2 = g[2], out.b2 = g[3];
  out.dropped = int64_t(moe.take_load().layer(0)[2 * E]);
  return out;
}

// Central differences of reference_loss in the vector `pick` selects, at `samples` evenly
// spread elements, against strata's gradient `got`.
template <typename Pick>
void check(Params p, Pick pick, const std::vector<float>& got, const MoEConfig& cfg,
           const std::string& what, size_t samples = 24, int64_t seq_rows = 0) {
  std::vector<double>& v = pick(p);
  ASSERT_EQ(v.size(), got.size()) << what;
  for (size_t i = 0; i < v.size(); i += std::max<size_t>(1, v.size() / samples)) {
    const double keep = v[i], h = 1e-5;
    v[i] = keep + h;
    const double up = reference_loss(p, cfg, seq_rows);
    v[i] = keep - h;
    const double down = reference_loss(p, cfg, seq_rows);
    v[i] = keep;
    const double fd = (up - down) / (2 * h);
    EXPECT_NEAR(got[i], fd, 2e-3 * std::max(1.0, std::abs(fd))) << what << "[" << i << "]";
  }
}

void check_all(const MoEConfig& cfg, uint64_t seed, bool expect_drops, int64_t seq_rows = 0) {
  const Params p = random_params(seed, cfg.expert_width(4 * C), cfg.shared_width(4 * C));
  const Grads g = strata_grads(p, cfg, seq_rows);
  EXPECT_NEAR(g.loss, reference_loss(p, cfg, seq_rows), 1e-4 * std::max(1.0, std::abs(g.loss)));
  if (expect_drops) {
    EXPECT_GT(g.dropped, 0) << "the capacity should drop assignments";
  }
  using V = std::vector<double>;
  const int64_t sr = seq_rows;
  check(p, [](Params& q) -> V& { return q.router; }, g.router, cfg, "router", 24, sr);
  check(p, [](Params& q) -> V& { return q.x; }, g.x, cfg, "x", 24, sr);
  for (int e = 0; e < E; ++e) {
    const std::string x = "expert " + std::to_string(e) + " ";
    check(p, [e](Params& q) -> V& { return q.w1[e]; }, g.w1[e], cfg, x + "c_fc.weight", 12, sr);
    check(p, [e](Params& q) -> V& { return q.b1[e]; }, g.b1[e], cfg, x + "c_fc.bias", 12, sr);
    check(p, [e](Params& q) -> V& { return q.w2[e]; }, g.w2[e], cfg, x + "c_proj.weight", 12, sr);
    check(p, [e](Params& q) -> V& { return q.b2[e]; }, g.b2[e], cfg, x + "c_proj.bias", 12, sr);
  }
  if (p.s1.empty()) return;
  check(p, [](Params& q) -> V& { return q.s1; }, g.s[0], cfg, "shared c_fc.weight", 12, sr);
  check(p, [](Params& q) -> V& { return q.sb1; }, g.s[1], cfg, "shared c_fc.bias", 12, sr);
  check(p, [](Params& q) -> V& { return q.s2; }, g.s[2], cfg, "shared c_proj.weight", 12, sr);
  check(p, [](Params& q) -> V& { return q.sb2; }, g.s[3], cfg, "shared c_proj.bias", 12, sr);
}

MoEConfig base_config() {
  MoEConfig cfg;
  cfg.experts = E;
  cfg.top_k = 2;
  cfg.capacity_factor = 1.0;
  return cfg;
}

TEST(MoEGradients, MatchFiniteDifferencesWithCapacityDrops) { check_all(base_config(), 3, true); }

TEST(MoEGradients, MatchFiniteDifferencesDropless) {
  MoEConfig cfg = base_config();
  cfg.dropless = true;
  check_all(cfg, 4, false);
}

TEST(MoEGradients, AuxAndZLossGradientsAloneMatch) {
  // Large coefficients so the router's gradient is dominated by the two losses.
  MoEConfig cfg = base_config();
  cfg.aux_coef = 0.5f;
  cfg.z_coef = 0.2f;
  cfg.top_k = 1;  // gates renormalised over one choice are 1: only aux and z move the router
  check_all(cfg, 5, false);
}

// DeepSeekMoE's layer: fine-grained experts (H = C, a quarter of the dense MLP's 4C), two
// shared experts beside them, sigmoid scores with the gates normalised over the k.
TEST(MoEGradients, FineGrainedSharedSigmoidMatchFiniteDifferences) {
  MoEConfig cfg = base_config();
  cfg.expert_ffn = C;
  cfg.shared_experts = 2;
  cfg.score = RouterScore::sigmoid;
  cfg.aux_coef = 0.1f;
  check_all(cfg, 11, true);
  cfg.dropless = true;
  check_all(cfg, 12, false);
}

// The balance loss per sequence (3 sequences of 4 rows): large coefficients and k = 1, so the
// router's gradient is the two losses'; softmax and sigmoid scores.
TEST(MoEGradients, SequenceWiseBalanceLossMatchesFiniteDifferences) {
  MoEConfig cfg = base_config();
  cfg.aux_scope = AuxScope::sequence;
  cfg.aux_coef = 0.5f;
  cfg.top_k = 1;
  cfg.dropless = true;
  check_all(cfg, 13, false, 4);
  cfg.score = RouterScore::sigmoid;
  check_all(cfg, 14, false, 4);
  // Per sequence is not per group: the same block's aux differs from the group-wise one.
  const Params p = random_params(13);
  MoEConfig group = cfg;
  group.aux_scope = AuxScope::group;
  EXPECT_GT(std::abs(strata_grads(p, cfg, 4).loss - strata_grads(p, group, 4).loss), 1e-6);
}

// Node-limited routing: 2 groups of 2 experts, each token's top-2 within its best group.
TEST(MoEGradients, GroupLimitedRoutingMatchesFiniteDifferences) {
  MoEConfig cfg = base_config();
  cfg.route_groups = 2;
  cfg.route_max_groups = 1;
  cfg.dropless = true;
  check_all(cfg, 15, false);
  cfg.score = RouterScore::sigmoid;
  check_all(cfg, 16, false);
}

// Router jitter: training forwards draw new noise, eval forwards none; the gradient through
// the noise (router weight and input) matches central differences of fresh blocks with the
// same seed (the same noise), in fp32.
TEST(MoEGradients, JitteredRouterMatchesFiniteDifferences) {
  MoEConfig cfg = base_config();
  cfg.dropless = true;
  cfg.jitter = 0.2f;
  const Params p = random_params(9);
  std::vector<float> router = to_f32(p.router), x = to_f32(p.x), c = to_f32(p.c);
  std::vector<std::vector<float>> w[4];
  for (int e = 0; e < E; ++e) {
    w[0].push_back(to_f32(p.w1[e]));
    w[1].push_back(to_f32(p.b1[e]));
    w[2].push_back(to_f32(p.w2[e]));
    w[3].push_back(to_f32(p.b2[e]));
  }
  MoEWeights W;
  W.router = router.data();
  for (int e = 0; e < E; ++e)
    W.experts.push_back({w[0][e].data(), w[1][e].data(), w[2][e].data(), w[3][e].data()});
  auto loss = [&](MoE& moe) {
    std::vector<float> y(N * C, 0.0f);
    moe.forward(0, x.data(), nullptr, y.data(), N, W, false);
    double l = moe.last_aux() + moe.last_z();
    for (int64_t i = 0; i < N * C; ++i) l += double(c[i]) * y[i];
    return l;
  };
  auto fresh = [&] {
    auto m = std::make_unique<MoE>(cfg, 1, C);
    m->set_seed(42);
    return m;
  };
  {  // noise differs per training forward, and is absent in eval
    auto m = fresh();
    const double a = loss(*m), b = loss(*m);
    EXPECT_NE(a, b);
    m->set_training(false);
    const double e1 = loss(*m), e2 = loss(*m);
    EXPECT_EQ(e1, e2);
    MoEConfig plain = cfg;
    plain.jitter = 0;
    MoE q(plain, 1, C);
    EXPECT_EQ(loss(q), e1);
  }
  auto m = fresh();
  loss(*m);
  std::vector<float> grouter(E * C, 0.0f), dx(N * C, 0.0f);
  std::vector<std::vector<float>> g[4];
  MoEWeights G;
  G.router = grouter.data();
  for (int e = 0; e < E; ++e) {
    for (int j = 0; j < 4; ++j) g[j].push_back(std::vector<float>(w[j][e].size(), 0.0f));
    G.experts.push_back({g[0][e].data(), g[1][e].data(), g[2][e].data(), g[3][e].data()});
  }
  m->backward(0, c.data(), dx.data(), W, G, false, 1.0f);
  auto fd = [&](float& v) {
    const float keep = v, h = 1e-2f;
    v = keep + h;
    auto a = fresh();
    const double up = loss(*a);
    v = keep - h;
    auto b = fresh();
    const double down = loss(*b);
    v = keep;
    return (up - down) / (2.0 * h);
  };
  for (size_t i = 0; i < router.size(); i += 5) {
    const double want = fd(router[i]);
    EXPECT_NEAR(grouter[i], want, 2e-2 * std::max(1.0, std::abs(want))) << "router[" << i << "]";
  }
  for (size_t i = 0; i < x.size(); i += 13) {
    const double want = fd(x[i]);
    EXPECT_NEAR(dx[i], want, 2e-2 * std::max(1.0, std::abs(want))) << "x[" << i << "]";
  }
}

// Every token prefers expert 0, then expert 1: the first `capacity` tokens in token order
// keep their first choice, second choices come after every first choice.
TEST(MoERouting, CapacityDropsInTokenOrderFirstChoicesFirst) {
  MoEConfig cfg;
  cfg.experts = 4;
  cfg.top_k = 2;
  cfg.capacity_factor = 1.0;  // ceil(1.0 * 8 * 2 / 4) = 4 slots per expert
  const int64_t n = 8;
  std::vector<float> logits;
  for (int64_t t = 0; t < n; ++t) logits.insert(logits.end(), {3.0f, 2.0f, 0.0f, 0.0f});
  Routing r;
  route(r, logits.data(), n, cfg);
  EXPECT_EQ(cfg.capacity(n), 4);
  for (int64_t t = 0; t < n; ++t) {
    EXPECT_EQ(r.choice[t * 2], 0);
    EXPECT_EQ(r.choice[t * 2 + 1], 1);
    EXPECT_EQ(r.slot[t * 2], t < 4 ? t : -1) << "token " << t;
    EXPECT_EQ(r.slot[t * 2 + 1], t < 4 ? t : -1) << "token " << t;
  }
  EXPECT_EQ(r.dropped, 8);
  EXPECT_EQ(r.kept, (std::vector<int64_t>{4, 4, 0, 0}));
  EXPECT_EQ(r.wanted, (std::vector<int64_t>{8, 8, 0, 0}));
  // Ties go to the lower expert id.
  std::vector<float> tie(4, 1.0f);
  route(r, tie.data(), 1, cfg);
  EXPECT_EQ(r.choice, (std::vector<int32_t>{0, 1}));
  EXPECT_FLOAT_EQ(r.gate[0], 0.5f);
}

// The balancing bias decides which experts a token reaches, never its gates: with expert 2
// biased above expert 1, the choice is {0, 2} and the gates are p0 and p2 renormalised; the
// aux loss's load counts the biased choice; update_router_bias moves each expert's bias by
// ±rate toward the mean load (0 at the mean).
TEST(MoERouting, BiasSteersTheChoiceNotTheGates) {
  MoEConfig cfg;
  cfg.experts = 4;
  cfg.top_k = 2;
  cfg.dropless = true;
  const std::vector<float> logits = {3.0f, 2.0f, 1.0f, 0.0f};
  Routing plain, biased;
  route(plain, logits.data(), 1, cfg);
  const std::vector<float> bias = {0.0f, 0.0f, 0.5f, 0.0f};
  route(biased, logits.data(), 1, cfg, nullptr, bias.data());
  EXPECT_EQ(plain.choice, (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(biased.choice, (std::vector<int32_t>{0, 2}));
  const float p0 = biased.probs[0], p2 = biased.probs[2];
  EXPECT_FLOAT_EQ(biased.gate[0], p0 / (p0 + p2));
  EXPECT_FLOAT_EQ(biased.gate[1], p2 / (p0 + p2));
  EXPECT_EQ(biased.probs, plain.probs);
  EXPECT_EQ(biased.wanted, (std::vector<int64_t>{1, 0, 1, 0}));

  cfg.bias_rate = 0.25;
  MoE moe(cfg, 2, 8);
  LoadStats s;
  s.layers = 2, s.E = 4;
  s.v.assign(size_t(2) * (2 * 4 + LoadStats::kExtra), 0.0);
  const double wanted[2][4] = {{10, 2, 4, 0}, {4, 4, 4, 4}};  // means 4 and 4
  for (int m = 0; m < 2; ++m)
    for (int e = 0; e < 4; ++e) s.layer(m)[e] = wanted[m][e];
  moe.update_router_bias(s);
  moe.update_router_bias(s);
  EXPECT_EQ(moe.router_bias(), (std::vector<float>{-0.5f, 0.5f, 0.0f, 0.5f, 0, 0, 0, 0}));
  EXPECT_THROW(moe.set_router_bias(std::vector<float>(3)), Error);
}

// Node-limited routing, 3 groups of 2 experts, M = 1, K = 2: group scores are the sum of each
// group's best ceil(K / M) = 2 scores. Token 0's single best expert (4) sits in a group whose
// sum loses to group 0's, so its top-2 are 0 and 1; ties between groups go to the lower id.
// With M = 3 (every group) the choice is the plain top-k.
TEST(MoERouting, GroupLimitKeepsEachTokensChoiceInItsBestGroups) {
  MoEConfig cfg;
  cfg.experts = 6;
  cfg.top_k = 2;
  cfg.dropless = true;
  cfg.score = RouterScore::sigmoid;
  cfg.route_groups = 3;
  cfg.route_max_groups = 1;
  const std::vector<float> logits = {2.0f, 1.9f, -3.0f, -3.0f, 3.0f, -4.0f,   // group 0 wins
                                     0.0f, 0.0f, 1.0f, 1.0f, 1.0f, 1.0f};     // tie: group 1
  Routing r;
  route(r, logits.data(), 2, cfg);
  EXPECT_EQ(r.choice, (std::vector<int32_t>{0, 1, 2, 3}));
  const double s0 = 1 / (1 + std::exp(-2.0)), s1 = 1 / (1 + std::exp(-1.9));
  EXPECT_NEAR(r.gate[0], s0 / (s0 + s1), 1e-6);
  cfg.route_max_groups = 3;
  route(r, logits.data(), 2, cfg);
  EXPECT_EQ(r.choice, (std::vector<int32_t>{4, 0, 2, 3}));
}

TEST(MoEConfig, RejectsBadSettingsInOneLine) {
  MoEConfig c = base_config();
  c.top_k = 5;
  EXPECT_THROW(c.validate(), Error);
  c = base_config();
  c.capacity_factor = 0;
  EXPECT_THROW(c.validate(), Error);
  c.dropless = true;
  EXPECT_NO_THROW(c.validate());
  c = base_config();
  c.every = 0;
  EXPECT_THROW(c.validate(), Error);
  c = base_config();
  c.bias_rate = -0.1;
  EXPECT_THROW(c.validate(), Error);
  c = MoEConfig{};  // shared experts without routed ones
  c.shared_experts = 1;
  EXPECT_THROW(c.validate(), Error);
  c = base_config();
  c.route_groups = 3;  // 4 experts do not divide into 3 groups
  c.route_max_groups = 1;
  EXPECT_THROW(c.validate(), Error);
  c.route_groups = 2;
  c.route_max_groups = 3;  // more than the groups
  EXPECT_THROW(c.validate(), Error);
  c.route_max_groups = 1;
  EXPECT_NO_THROW(c.validate());
  c.route_groups = 4;  // 1 group of 1 expert cannot hold top-2
  EXPECT_THROW(c.validate(), Error);
}

TEST(MoEGPT, TableNamesEveryExpertAndCountsParameters) {
  GPTConfig cfg;
  cfg.layers = 4, cfg.dim = 32, cfg.heads = 4, cfg.seq = 16, cfg.vocab = 64, cfg.padded_vocab = 64;
  cfg.moe = base_config();
  cfg.moe.every = 2;  // blocks 1 and 3
  const std::vector<ParamView> t = build_param_table(cfg);
  int64_t total = 0;
  bool found = false;
  for (const ParamView& v : t) {
    total += numel(v.shape);
    if (v.name == "h.3.mlp.experts.2.c_fc.weight") found = true;
    EXPECT_NE(v.name, "h.1.mlp.c_fc.weight");
  }
  EXPECT_TRUE(found);
  EXPECT_EQ(total, cfg.num_params());
  GPT gpt(cfg, 2);
  EXPECT_EQ(gpt.num_units(), 8);  // embeddings, 4 blocks, ln_f, the experts of 2 MoE blocks
  EXPECT_EQ(gpt.first_expert_unit(), 6);
  int64_t covered = 0;
  for (int u = 0; u < gpt.num_units(); ++u) {
    const auto [b, e] = gpt.unit_range(u);
    EXPECT_EQ(b, covered);
    covered = e;
  }
  EXPECT_EQ(covered, gpt.num_params());
}

// Every gradient of the MoE GPT, aux and z terms included, follows the backward scale (the
// trainer passes 1 / global tokens), and plain gradient descent on the total loss lowers it.
TEST(MoEGPT, GradientsFollowTheScaleAndDescentLowersTheTotalLoss) {
  GPTConfig cfg;
  cfg.layers = 2, cfg.dim = 16, cfg.heads = 2, cfg.seq = 8, cfg.vocab = 32, cfg.padded_vocab = 64;
  cfg.moe = base_config();
  GPT gpt(cfg, 2);
  gpt.init(7);
  std::vector<int32_t> tok(16), tgt(16);
  for (int i = 0; i < 16; ++i) tok[i] = (i * 5) % 32, tgt[i] = (i * 5 + 1) % 32;
  auto total = [&] {
    return gpt.forward(tok.data(), tgt.data(), nullptr, 2, 8) + gpt.moe()->last_aux() +
           gpt.moe()->last_z();
  };
  const int64_t n = gpt.num_params();
  gpt.zero_grads();
  total();
  gpt.backward(1.0f);
  std::vector<float> g1(gpt.grads(), gpt.grads() + n);
  gpt.zero_grads();
  total();
  gpt.backward(0.25f);
  for (int64_t i = 0; i < n; ++i) ASSERT_NEAR(gpt.grads()[i], 0.25f * g1[i], 1e-6f + 1e-5f * std::abs(g1[i])) << i;
  const double first = total();
  for (int step = 0; step < 20; ++step) {
    gpt.zero_grads();
    total();
    gpt.backward(1.0f / 16);
    for (int64_t i = 0; i < n; ++i) gpt.params()[i] -= 0.05f * gpt.grads()[i];
  }
  EXPECT_LT(total(), first * 0.97);
}

}  // namespace
}  // namespace strata::model::expert
