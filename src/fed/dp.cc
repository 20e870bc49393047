// Clipping, Gaussian noise and centralized DP-SGD: see dp.h.
#include "fed/dp.h"

#include <cmath>

#include "core/error.h"
#include "fed/local.h"

namespace strata::fed {

double clip_to_norm(float* v, int64_t n, double clip) {
  double ss = 0;
  for (int64_t i = 0; i < n; ++i) ss += double(v[i]) * v[i];
  const double norm = std::sqrt(ss);
  if (norm > clip) {
    const float f = float(clip / norm);
    for (int64_t i = 0; i < n; ++i) v[i] *= f;
  }
  return norm;
}

void add_gaussian(float* v, int64_t n, double std, Rng& rng) {
  for (int64_t i = 0; i < n; ++i) v[i] += float(std * rng.normal());
}

Rng client_noise_rng(uint64_t seed, int client, int64_t round) {
  return Rng(seed, 0xD900'0000'0000'0000ull + (uint64_t(client + 1) << 32) + uint64_t(round));
}

Rng server_noise_rng(uint64_t seed, int64_t round) {
  return Rng(seed, 0xD9FF'0000'0000'0000ull + uint64_t(round));
}

double train_dp_sgd(model::GPT& m, const data::TokenSource& src, const std::vector<int64_t>& windows,
                    const DpSgdConfig& cfg) {
  STRATA_CHECK(cfg.clip > 0, "--clip-norm must be > 0 (got ", cfg.clip, ")");
  STRATA_CHECK(cfg.noise > 0, "--noise-multiplier must be > 0 (got ", cfg.noise, ")");
  STRATA_CHECK(cfg.batch >= 1 && size_t(cfg.batch) <= windows.size(), "--batch must be in [1, ",
               windows.size(), " samples] (got ", cfg.batch, ")");
  const int64_t P = m.num_params();
  std::vector<float> sum(static_cast<size_t>(P));
  std::vector<int64_t> order(windows);
  Rng data_rng(cfg.seed, 0xD5D0'0000'0000'0000ull);
  double last = 0;
  for (int s = 0; s < cfg.steps; ++s) {
    // A fresh sample of B windows without replacement (partial Fisher-Yates).
    for (int i = 0; i < cfg.batch; ++i)
      std::swap(order[size_t(i)], order[size_t(i) + data_rng.below(order.size() - size_t(i))]);
    std::fill(sum.begin(), sum.end(), 0.0f);
    last = 0;
    for (int i = 0; i < cfg.batch; ++i) {
      last += gradient(m, src, &order[size_t(i)], 1, cfg.seq) / cfg.batch;
      clip_to_norm(m.grads(), P, cfg.clip);
      const float* g = m.grads();
      for (int64_t j = 0; j < P; ++j) sum[size_t(j)] += g[j];
    }
    Rng noise = server_noise_rng(cfg.seed, s);
    add_gaussian(sum.data(), P, cfg.noise * cfg.clip, noise);
    float* w = m.params();
    for (int64_t j = 0; j < P; ++j) w[j] -= cfg.lr * sum[size_t(j)] / float(cfg.batch);
  }
  return last;
}

}  // namespace strata::fed
