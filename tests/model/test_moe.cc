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

// Parameters of one MoE block in double: router (E, C), then per expert W1 (4C, C), b1 (4C),
// W2 (C, 4C), b2 (C); plus the input x (N, C) and the output weights c (N, C).
struct Params {
  std::vector<double> router, x, c;
  std::vector<std::vector<double>> w1, b1, w2, b2;
};

Params random_params(uint64_t seed) {
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
    p.w1.push_back(fill(4 * C * C, 0.5));
    p.b1.push_back(fill(4 * C, 0.1));
    p.w2.push_back(fill(4 * C * C, 0.5));
    p.b2.push_back(fill(C, 0.1));
  }
  return p;
}

double gelu(double x) {
  const double k = std::sqrt(2.0 / M_PI);
  return 0.5 * x * (1.0 + std::tanh(k * (x + 0.044715 * x * x * x)));
}

// The loss sum_t <c_t, out_t> + aux + z of one group, written from the definitions in
// router.h and moe.h, in double.
double reference_loss(const Params& p, const MoEConfig& cfg) {
  const int K = cfg.top_k;
  std::vector<double> probs(N * E);
  double zsum = 0;
  std::vector<double> mean_p(E, 0.0);
  std::vector<std::vector<int>> choice(N);
  std::vector<std::vector<double>> gate(N);
  std::vector<int64_t> wanted(E, 0);
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
    std::vector<int> order(E);
    for (int e = 0; e < E; ++e) order[e] = e, probs[t * E + e] = std::exp(z[e] - lse);
    std::stable_sort(order.begin(), order.end(),
                     [&](int a, int b) { return probs[t * E + a] > probs[t * E + b]; });
    double denom = 0;
    for (int k = 0; k < K; ++k) denom += probs[t * E + order[k]];
    for (int k = 0; k < K; ++k) {
      choice[t].push_back(order[k]);
      gate[t].push_back(probs[t * E + order[k]] / denom);
      ++wanted[order[k]];
    }
    for (int e = 0; e < E; ++e) mean_p[e] += probs[t * E + e] / N;
  }
  std::vector<std::vector<bool>> kept(N, std::vector<bool>(K, false));
  std::vector<int64_t> load(E, 0);
  const int64_t cap = cfg.capacity(N);
  for (int k = 0; k < K; ++k)
    for (int64_t t = 0; t < N; ++t)
      if (load[choice[t][k]] < cap) ++load[choice[t][k]], kept[t][k] = true;
  double loss = 0;
  for (int64_t t = 0; t < N; ++t)
    for (int k = 0; k < K; ++k) {
      if (!kept[t][k]) continue;
      const int e = choice[t][k];
      std::vector<double> a(4 * C);
      for (int j = 0; j < 4 * C; ++j) {
        double h = p.b1[e][j];
        for (int c = 0; c < C; ++c) h += p.w1[e][j * C + c] * p.x[t * C + c];
        a[j] = gelu(h);
      }
      for (int c = 0; c < C; ++c) {
        double o = p.b2[e][c];
        for (int j = 0; j < 4 * C; ++j) o += p.w2[e][c * 4 * C + j] * a[j];
        loss += p.c[t * C + c] * gate[t][k] * o;
      }
    }
  double balance = 0;
  for (int e = 0; e < E; ++e) balance += double(wanted[e]) / double(N * K) * mean_p[e];
  return loss + cfg.aux_coef * N * E * balance + cfg.z_coef * zsum;
}

std::vector<float> to_f32(const std::vector<double>& v) { return {v.begin(), v.end()}; }

// strata's fp32 forward and backward of the same block (scale 1): gradients of everything.
struct Grads {
  std::vector<float> router, x;
  std::vector<std::vector<float>> w1, b1, w2, b2;
  double loss = 0;
  int64_t dropped = 0;
};

Grads strata_grads(const Params& p, const MoEConfig& cfg) {
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
  std::vector<float> y(N * C, 0.0f);
  moe.forward(0, x.data(), nullptr, y.data(), N, W, false);
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
           const std::string& what, size_t samples = 24) {
  std::vector<double>& v = pick(p);
  ASSERT_EQ(v.size(), got.size()) << what;
  for (size_t i = 0; i < v.size(); i += std::max<size_t>(1, v.size() / samples)) {
    const double keep = v[i], h = 1e-5;
    v[i] = keep + h;
    const double up = reference_loss(p, cfg);
    v[i] = keep - h;
    const double down = reference_loss(p, cfg);
    v[i] = keep;
    const double fd = (up - down) / (2 * h);
    EXPECT_NEAR(got[i], fd, 2e-3 * std::max(1.0, std::abs(fd))) << what << "[" << i << "]";
  }
}

void check_all(const MoEConfig& cfg, uint64_t seed, bool expect_drops) {
  const Params p = random_params(seed);
  const Grads g = strata_grads(p, cfg);
  EXPECT_NEAR(g.loss, reference_loss(p, cfg), 1e-4 * std::max(1.0, std::abs(g.loss)));
  if (expect_drops) {
    EXPECT_GT(g.dropped, 0) << "the capacity should drop assignments";
  }
  check(p, [](Params& q) -> std::vector<double>& { return q.router; }, g.router, cfg, "router");
  check(p, [](Params& q) -> std::vector<double>& { return q.x; }, g.x, cfg, "x");
  for (int e = 0; e < E; ++e) {
    const std::string x = "expert " + std::to_string(e) + " ";
    check(p, [e](Params& q) -> std::vector<double>& { return q.w1[e]; }, g.w1[e], cfg, x + "c_fc.weight", 12);
    check(p, [e](Params& q) -> std::vector<double>& { return q.b1[e]; }, g.b1[e], cfg, x + "c_fc.bias", 12);
    check(p, [e](Params& q) -> std::vector<double>& { return q.w2[e]; }, g.w2[e], cfg, x + "c_proj.weight", 12);
    check(p, [e](Params& q) -> std::vector<double>& { return q.b2[e]; }, g.b2[e], cfg, x + "c_proj.bias", 12);
  }
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
