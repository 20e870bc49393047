// One MoE block (model/expert/moe.h), forward and backward, on one process: tokens/s.
// The same layer as bench/moe/torch_moe.py: router, top-k softmax gating renormalised over
// the k, capacity ceil(F·N·K/E) with k-major drops, expert MLPs (c_fc 4C, GELU, c_proj),
// aux and z losses. Prints one JSON line.
//
//   bench_moe --tokens 2048 --dim 256 --experts 8 --top-k 2 --capacity 1.25 --iters 20
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "core/rng.h"
#include "model/expert/moe.h"

using namespace strata;
using namespace strata::model::expert;

int main(int argc, char** argv) {
  int64_t N = 2048;
  int C = 256, iters = 20;
  MoEConfig cfg;
  cfg.experts = 8;
  cfg.top_k = 2;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    const double v = std::atof(argv[i + 1]);
    if (a == "--tokens") N = int64_t(v);
    else if (a == "--dim") C = int(v);
    else if (a == "--experts") cfg.experts = int(v);
    else if (a == "--top-k") cfg.top_k = int(v);
    else if (a == "--capacity") cfg.capacity_factor = v, cfg.dropless = v <= 0;
    else if (a == "--iters") iters = int(v);
    else { std::fprintf(stderr, "bench_moe: unknown flag %s\n", a.c_str()); return 2; }
  }
  const int E = cfg.experts;
  Rng rng(1, 0);
  auto fill = [&](int64_t n, float s) {
    std::vector<float> v(static_cast<size_t>(n));
    for (float& x : v) x = s * (rng.uniform() - 0.5f);
    return v;
  };
  std::vector<float> router = fill(int64_t(E) * C, 0.1f), x = fill(N * C, 2.0f);
  std::vector<float> rg(router.size(), 0.0f), y(size_t(N * C)), dy = fill(N * C, 1e-3f),
      dx(size_t(N * C));
  std::vector<std::vector<float>> p[4], g[4];
  const int64_t sizes[4] = {4LL * C * C, 4LL * C, 4LL * C * C, C};
  MoEWeights W, G;
  W.router = router.data();
  G.router = rg.data();
  for (int e = 0; e < E; ++e)
    for (int j = 0; j < 4; ++j) {
      p[j].push_back(fill(sizes[j], 0.05f));
      g[j].push_back(std::vector<float>(size_t(sizes[j]), 0.0f));
    }
  for (int e = 0; e < E; ++e) {
    W.experts.push_back({p[0][e].data(), p[1][e].data(), p[2][e].data(), p[3][e].data()});
    G.experts.push_back({g[0][e].data(), g[1][e].data(), g[2][e].data(), g[3][e].data()});
  }
  MoE moe(cfg, 1, C);
  auto step = [&] {
    std::memset(y.data(), 0, sizeof(float) * y.size());
    moe.forward(0, x.data(), nullptr, y.data(), N, W, false);
    moe.backward(0, dy.data(), dx.data(), W, G, false, 1.0f / float(N));
  };
  step();  // warm-up
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i) step();
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const auto load = moe.take_load();
  std::printf("{\"impl\": \"strata\", \"tokens\": %lld, \"dim\": %d, \"experts\": %d, \"top_k\": %d, "
              "\"ms_per_step\": %.3f, \"tokens_per_s\": %.1f, \"dropped_fraction\": %.4f}\n",
              (long long)N, C, E, cfg.top_k, 1e3 * s / iters, double(N) * iters / s,
              load.layer(0)[2 * E] / (double(N) * cfg.top_k * (iters + 1)));
  return 0;
}
