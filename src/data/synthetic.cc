// The synthetic Markov corpus (terms and cost in synthetic.h).
#include "data/synthetic.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/error.h"
#include "core/rng.h"

namespace strata::data {

namespace {
// Philox streams: one builds the chain, the others draw sample paths.
constexpr uint64_t kChainStream = 0x5EED'C4A1'0000'0000ull;
constexpr uint64_t kTrainStream = 0x5EED'7EA1'0000'0000ull;
constexpr uint64_t kValStream = 0x5EED'7A11'0000'0000ull;
}  // namespace

MarkovChain::MarkovChain(uint64_t seed) : seed_(seed) {
  Rng rng(seed, kChainStream);
  for (int s = 0; s < kStates; ++s) {
    auto& nx = next_[s];
    nx[0] = (s + 1) % kStates;
    for (int k = 1; k < kSuccessors; ++k) {
      int cand;
      do {
        cand = int(rng.below(kStates));
      } while (std::find(nx.begin(), nx.begin() + k, cand) != nx.begin() + k);
      nx[k] = cand;
    }
    // Flat Dirichlet: normalised exponentials.
    double total = 0;
    for (int k = 0; k < kSuccessors; ++k) {
      prob_[s][k] = -std::log(1.0 - rng.uniform_double());
      total += prob_[s][k];
    }
    double acc = 0;
    for (int k = 0; k < kSuccessors; ++k) {
      prob_[s][k] /= total;
      acc += prob_[s][k];
      cdf_[s][k] = acc;
    }
    cdf_[s][kSuccessors - 1] = 2.0;  // the last successor takes every remaining draw
  }
  // Stationary distribution of the lazy chain (I + P) / 2, which equals P's.
  std::vector<double> pi(kStates, 1.0 / kStates), nxt(kStates);
  double change = 1;
  for (int it = 0; it < 1000000 && change > 1e-15; ++it) {
    for (int s = 0; s < kStates; ++s) nxt[s] = 0.5 * pi[s];
    for (int s = 0; s < kStates; ++s)
      for (int k = 0; k < kSuccessors; ++k) nxt[next_[s][k]] += 0.5 * pi[s] * prob_[s][k];
    change = 0;
    for (int s = 0; s < kStates; ++s) change += std::fabs(nxt[s] - pi[s]);
    pi.swap(nxt);
  }
  STRATA_CHECK(change <= 1e-12, "synthetic corpus: stationary distribution did not converge "
               "(seed ", seed, ", L1 change ", change, ")");
  pi_ = pi;
  rate_ = 0;
  for (int s = 0; s < kStates; ++s)
    for (int k = 0; k < kSuccessors; ++k) rate_ -= pi_[s] * prob_[s][k] * std::log(prob_[s][k]);
}

double MarkovChain::log_prob(int from, int to) const {
  const int a = from - kFirstToken, b = to - kFirstToken;
  if (a >= 0 && a < kStates)
    for (int k = 0; k < kSuccessors; ++k)
      if (next_[a][k] == b) return std::log(prob_[a][k]);
  return -std::numeric_limits<double>::infinity();
}

std::vector<uint8_t> MarkovChain::generate(int64_t n, uint64_t stream) const {
  std::vector<uint8_t> out(size_t(std::max<int64_t>(n, 0)));
  if (n <= 0) return out;
  Rng rng(seed_, stream);
  // First state from pi, so the path is stationary from its first token.
  double u = rng.uniform_double(), acc = 0;
  int state = kStates - 1;
  for (int s = 0; s < kStates; ++s) {
    acc += pi_[s];
    if (u < acc) {
      state = s;
      break;
    }
  }
  out[0] = uint8_t(kFirstToken + state);
  for (int64_t i = 1; i < n; ++i) {
    double v = rng.uniform_double();
    const auto& cdf = cdf_[state];
    int k = 0;
    while (v >= cdf[k]) ++k;
    state = next_[state][k];
    out[size_t(i)] = uint8_t(kFirstToken + state);
  }
  return out;
}

SyntheticSource::SyntheticSource(uint64_t seed, bool validation, int64_t tokens)
    : chain_(seed), validation_(validation) {
  STRATA_CHECK(tokens > 0, "synthetic corpus size must be positive (got ", tokens, " tokens)");
  tokens_ = chain_.generate(tokens, validation ? kValStream : kTrainStream);
}

void SyntheticSource::read(int64_t pos, int64_t n, int32_t* out) const {
  STRATA_CHECK(pos >= 0 && n >= 0 && pos + n <= size(), "synthetic corpus: read of tokens [",
               pos, ", ", pos + n, ") outside its ", size(), " tokens");
  const uint8_t* src = tokens_.data() + pos;
  for (int64_t i = 0; i < n; ++i) out[i] = src[i];
}

std::string SyntheticSource::describe() const {
  return cat("synthetic markov seed=", chain_.seed(), " states=", MarkovChain::kStates,
             " K=", MarkovChain::kSuccessors, validation_ ? " val " : " train ", size(),
             " tokens");
}

}  // namespace strata::data
