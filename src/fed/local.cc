// Client-side local training and evaluation: see local.h.
#include "fed/local.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "data/sampler.h"

namespace strata::fed {

void read_windows(const data::TokenSource& src, const int64_t* windows, int count, int seq,
                  std::vector<int32_t>& tokens, std::vector<int32_t>& targets) {
  std::vector<int32_t> buf(size_t(seq) + 1);
  tokens.resize(size_t(count) * size_t(seq));
  targets.resize(size_t(count) * size_t(seq));
  for (int b = 0; b < count; ++b) {
    src.read(windows[b] * seq, seq + 1, buf.data());
    std::memcpy(&tokens[size_t(b) * size_t(seq)], buf.data(), size_t(seq) * sizeof(int32_t));
    std::memcpy(&targets[size_t(b) * size_t(seq)], buf.data() + 1, size_t(seq) * sizeof(int32_t));
  }
}

double gradient(model::GPT& m, const data::TokenSource& src, const int64_t* windows, int count,
                int seq) {
  m.zero_grads();
  std::vector<int32_t> tok, tgt;
  const double tokens = double(count) * seq;
  double loss = 0;
  for (int at = 0; at < count; at += m.max_batch()) {
    const int b = std::min(m.max_batch(), count - at);
    read_windows(src, windows + at, b, seq, tok, tgt);
    loss += m.forward(tok.data(), tgt.data(), nullptr, b, seq);
    m.backward(float(1.0 / tokens));
  }
  return loss / tokens;
}

LocalResult train_local(model::GPT& m, const data::TokenSource& src,
                        const std::vector<int64_t>& windows, const LocalConfig& cfg, Rng& rng) {
  STRATA_CHECK(!windows.empty(), "local training on a client with no samples");
  const int64_t n = int64_t(windows.size());
  const int batch = cfg.batch <= 0 ? int(n) : int(std::min<int64_t>(cfg.batch, n));
  const double epoch_steps = cfg.epochs * double(n) / batch + 0.5;
  STRATA_CHECK(cfg.epochs <= 0 || epoch_steps < 1e9, "--local-epochs ", cfg.epochs, " over ", n,
               " windows is ", epoch_steps, " local steps per round (at most 1e9)");
  const int steps = cfg.epochs > 0 ? std::max(1, int(epoch_steps)) : cfg.steps;
  const int64_t P = m.num_params();
  float* w = m.params();
  float* g = m.grads();
  std::vector<float> w_global;
  if (cfg.prox_mu > 0) w_global.assign(w, w + P);
  std::vector<int64_t> order(windows);
  int64_t at = n;  // position in the current local epoch's order
  LocalResult r;
  r.samples = n;
  for (int s = 0; s < steps; ++s) {
    if (at + batch > n) {  // a fresh local epoch (full batch keeps the order)
      if (batch < n)
        for (size_t i = order.size(); i > 1; --i) std::swap(order[i - 1], order[rng.below(i)]);
      at = 0;
    }
    r.loss += gradient(m, src, order.data() + at, batch, cfg.seq);
    at += batch;
    if (cfg.prox_mu > 0)
      for (int64_t i = 0; i < P; ++i) g[i] += cfg.prox_mu * (w[i] - w_global[size_t(i)]);
    for (int64_t i = 0; i < P; ++i) w[i] -= cfg.lr * g[i];
  }
  r.steps = steps;
  r.loss /= std::max(1, steps);
  return r;
}

double evaluate(model::GPT& m, const data::TokenSource& src, int64_t max_windows, int seq) {
  const int64_t n = std::min(max_windows, data::num_windows(src.size(), seq, seq));
  STRATA_CHECK(n > 0, "held-out data ", src.describe(), " has no window of ", seq + 1, " tokens");
  std::vector<int64_t> idx(static_cast<size_t>(n));
  // Spread over the whole held-out stream (every client's part of a natural split).
  const int64_t total = data::num_windows(src.size(), seq, seq);
  for (int64_t i = 0; i < n; ++i) idx[size_t(i)] = i * total / n;
  std::vector<int32_t> tok, tgt;
  double loss = 0;
  for (int64_t at = 0; at < n; at += m.max_batch()) {
    const int b = int(std::min<int64_t>(m.max_batch(), n - at));
    read_windows(src, idx.data() + at, b, seq, tok, tgt);
    loss += m.forward(tok.data(), tgt.data(), nullptr, b, seq);
  }
  return loss / (double(n) * seq);
}

}  // namespace strata::fed
