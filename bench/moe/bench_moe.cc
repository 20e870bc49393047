// One MoE block (model/expert/moe.h), forward and backward, on one process: tokens/s.
// The same layer as bench/moe/torch_moe.py: router, top-k gating (softmax, or DeepSeek-V3's
// sigmoid scores) renormalised over the k, capacity ceil(F·N·K/E) with k-major drops (F <= 0:
// dropless), expert MLPs (c_fc H, GELU, c_proj; H = 4C unless --expert-ffn), S shared experts
// as one MLP of S·H units on every token, aux and z losses. Prints one JSON line.
//
//   bench_moe --tokens 2048 --dim 256 --experts 8 --top-k 2 --capacity 1.25 --iters 20
//   bench_moe --experts 32 --top-k 6 --expert-ffn 128 --shared-experts 2 --score sigmoid
//     --capacity 0 --check      (one step on hashed inputs: checksums to compare with torch_moe.py)
//
// --check fills every tensor from a hash of (tensor id, element index) that torch_moe.py
// reproduces bit for bit (hashed() below), runs one forward and backward from zero gradients
// and prints the output's and gradients' sums instead of timing.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "core/rng.h"
#include "model/expert/moe.h"

using namespace strata;
using namespace strata::model::expert;

namespace {

// s · (u - 0.5), u the top 24 bits of splitmix64's finaliser of i + id · golden: exact in
// float, so torch_moe.py --check draws the same numbers.
std::vector<float> hashed(uint64_t id, int64_t n, float s) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    uint64_t h = uint64_t(i) + id * 0x9E3779B97F4A7C15ull;
    h = (h ^ (h >> 33)) * 0xff51afd7ed558ccdull;
    h = (h ^ (h >> 33)) * 0xc4ceb9fe1a85ec53ull;
    h ^= h >> 33;
    v[size_t(i)] = s * (float(h >> 40) * (1.0f / 16777216.0f) - 0.5f);
  }
  return v;
}

double dot(const std::vector<float>& a, const std::vector<float>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += double(a[i]) * b[i];
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  int64_t N = 2048;
  int C = 256, iters = 20, H = 0;
  bool check = false;
  MoEConfig cfg;
  cfg.experts = 8;
  cfg.top_k = 2;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--check") {
      check = true;
      continue;
    }
    if (i + 1 >= argc) { std::fprintf(stderr, "bench_moe: %s needs a value\n", a.c_str()); return 2; }
    const std::string s = argv[++i];
    const double v = std::atof(s.c_str());
    if (a == "--tokens") N = int64_t(v);
    else if (a == "--dim") C = int(v);
    else if (a == "--experts") cfg.experts = int(v);
    else if (a == "--top-k") cfg.top_k = int(v);
    else if (a == "--capacity") cfg.capacity_factor = v, cfg.dropless = v <= 0;
    else if (a == "--expert-ffn") H = int(v);
    else if (a == "--shared-experts") cfg.shared_experts = int(v);
    else if (a == "--iters") iters = int(v);
    else if (a == "--score" && (s == "softmax" || s == "sigmoid"))
      cfg.score = s == "sigmoid" ? RouterScore::sigmoid : RouterScore::softmax;
    else { std::fprintf(stderr, "bench_moe: unknown flag or value %s %s\n", a.c_str(), s.c_str()); return 2; }
  }
  cfg.expert_ffn = H > 0 && H != 4 * C ? H : 0;
  H = cfg.expert_width(4 * C);
  const int E = cfg.experts, S = cfg.shared_experts, Hs = cfg.shared_width(4 * C);
  Rng rng(1, 0);
  uint64_t id = 0;
  // Timing: the rng's numbers; --check: hashed ones, tensor ids 0, 1, 2, ... in this order.
  auto fill = [&](int64_t n, float s) {
    if (check) return hashed(id++, n, s);
    std::vector<float> v(static_cast<size_t>(n));
    for (float& x : v) x = s * (rng.uniform() - 0.5f);
    return v;
  };
  std::vector<float> router = fill(int64_t(E) * C, 0.1f), x = fill(N * C, 2.0f), dy = fill(N * C, 1e-3f);
  std::vector<float> rg(router.size(), 0.0f), y(size_t(N * C)), dx(size_t(N * C));
  // Parameters and gradients of the routed experts (0 .. E-1) and the shared MLP (E).
  std::vector<std::vector<float>> p[4], g[4];
  const int64_t sizes[4] = {int64_t(H) * C, H, int64_t(C) * H, C};
  const int64_t shared_sizes[4] = {int64_t(Hs) * C, Hs, int64_t(C) * Hs, C};
  for (int e = 0; e < E + (S > 0); ++e)
    for (int j = 0; j < 4; ++j) {
      const int64_t n = e < E ? sizes[j] : shared_sizes[j];
      p[j].push_back(fill(n, 0.05f));
      g[j].push_back(std::vector<float>(size_t(n), 0.0f));
    }
  MoEWeights W, G;
  W.router = router.data();
  G.router = rg.data();
  auto views = [](std::vector<std::vector<float>>* t, int e) {
    return ExpertViews{t[0][size_t(e)].data(), t[1][size_t(e)].data(), t[2][size_t(e)].data(),
                       t[3][size_t(e)].data()};
  };
  for (int e = 0; e < E; ++e) {
    W.experts.push_back(views(p, e));
    G.experts.push_back(views(g, e));
  }
  if (S > 0) W.shared = views(p, E), G.shared = views(g, E);
  MoE moe(cfg, 1, C);
  auto step = [&] {
    std::memset(y.data(), 0, sizeof(float) * y.size());
    moe.forward(0, x.data(), nullptr, y.data(), N, W, false);
    moe.backward(0, dy.data(), dx.data(), W, G, false, 1.0f / float(N));
  };
  const char* score = cfg.score == RouterScore::sigmoid ? "sigmoid" : "softmax";
  if (check) {
    step();
    double yabs = 0, fc = 0, proj = 0;
    for (float v : y) yabs += std::fabs(v);
    for (int e = 0; e < E; ++e) fc += dot(g[0][size_t(e)], g[0][size_t(e)]), proj += dot(g[2][size_t(e)], g[2][size_t(e)]);
    const double sfc = S > 0 ? dot(g[0][size_t(E)], g[0][size_t(E)]) : 0.0;
    std::printf("{\"impl\": \"strata\", \"check\": {\"y_dot_dy\": %.9e, \"y_abs\": %.9e, \"aux\": %.9e, "
                "\"z\": %.9e, \"dx_sq\": %.9e, \"router_grad_sq\": %.9e, \"experts_fc_grad_sq\": %.9e, "
                "\"experts_proj_grad_sq\": %.9e, \"shared_fc_grad_sq\": %.9e}}\n",
                dot(y, dy), yabs, moe.last_aux() / double(N), moe.last_z() / double(N), dot(dx, dx),
                dot(rg, rg), fc, proj, sfc);
    return 0;
  }
  step();  // warm-up
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i) step();
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const auto load = moe.take_load();
  std::printf("{\"impl\": \"strata\", \"tokens\": %lld, \"dim\": %d, \"experts\": %d, \"top_k\": %d, "
              "\"expert_ffn\": %d, \"shared_experts\": %d, \"score\": \"%s\", "
              "\"ms_per_step\": %.3f, \"tokens_per_s\": %.1f, \"dropped_fraction\": %.4f}\n",
              (long long)N, C, E, cfg.top_k, H, S, score, 1e3 * s / iters, double(N) * iters / s,
              load.layer(0)[2 * E] / (double(N) * cfg.top_k * (iters + 1)));
  return 0;
}
