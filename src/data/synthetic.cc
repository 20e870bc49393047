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

namespace {

// Draws first .. first + n - 1 of Rng(seed, stream).uniform_double(): draw d is the high and
// low words (0, 1) or (2, 3) of Philox block d / 2 as 53 bits. The blocks are computed kLanes
// at a time over arrays, a loop the compiler vectorises: about twice Rng's speed.
void uniform_doubles(uint64_t seed, uint64_t stream, uint64_t first, int64_t n, double* out) {
  constexpr uint64_t kLanes = 256;
  alignas(64) uint32_t c0[kLanes], c1[kLanes], c2[kLanes], c3[kLanes];
  const uint64_t end = first + uint64_t(n);
  for (uint64_t b0 = first / 2; b0 * 2 < end; b0 += kLanes) {
    for (uint64_t i = 0; i < kLanes; ++i) {
      c0[i] = uint32_t(b0 + i), c1[i] = uint32_t((b0 + i) >> 32);
      c2[i] = uint32_t(stream), c3[i] = uint32_t(stream >> 32);
    }
    uint32_t k0 = uint32_t(seed), k1 = uint32_t(seed >> 32);
    for (int round = 0; round < 10; ++round) {  // philox4x32's rounds, lane by lane
      for (uint64_t i = 0; i < kLanes; ++i) {
        const uint64_t p0 = uint64_t(0xD2511F53u) * c0[i], p1 = uint64_t(0xCD9E8D57u) * c2[i];
        const uint32_t n0 = uint32_t(p1 >> 32) ^ c1[i] ^ k0, n2 = uint32_t(p0 >> 32) ^ c3[i] ^ k1;
        c1[i] = uint32_t(p1), c3[i] = uint32_t(p0), c0[i] = n0, c2[i] = n2;
      }
      k0 += 0x9E3779B9u;
      k1 += 0xBB67AE85u;
    }
    for (uint64_t i = 0; i < kLanes; ++i) {
      const uint64_t d = (b0 + i) * 2;
      const uint64_t hi = (uint64_t(c0[i]) << 32) | c1[i], lo = (uint64_t(c2[i]) << 32) | c3[i];
      if (d >= first && d < end) out[d - first] = double(hi >> 11) * (1.0 / 9007199254740992.0);
      if (d + 1 >= first && d + 1 < end) out[d + 1 - first] = double(lo >> 11) * (1.0 / 9007199254740992.0);
    }
  }
}

}  // namespace

// The path a walk drawing Rng(seed_, stream).uniform_double() once per token gives: draw 0
// picks the first state, draw i the successor taken by token i, the first k with draw <
// cdf[k]. The draws come a batch at a time (uniform_doubles). The walk is a chain of
// dependent steps, so each step is one load: `table` holds, for state s and the draw's
// bucket of width 1/kBuckets, the successor every draw of the bucket takes, or kSplit where a
// cdf step falls inside the bucket and the draw is compared (about 1 in 85 tokens).
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

  constexpr int kBuckets = 256;
  constexpr uint8_t kSplit = 0xFF;
  static_assert(kStates < kSplit, "states must fit a byte below kSplit");
  auto successor = [&](int s, double v) {
    int k = 0;
    while (v >= cdf_[s][k]) ++k;
    return next_[s][k];
  };
  std::vector<uint8_t> table(size_t(kStates) * kBuckets);
  for (int s = 0; s < kStates; ++s)
    for (int b = 0; b < kBuckets; ++b) {
      const double lo = double(b) / kBuckets, hi = double(b + 1) / kBuckets;
      bool split = false;
      for (int k = 0; k < kSuccessors; ++k) split |= cdf_[s][k] > lo && cdf_[s][k] < hi;
      table[size_t(s) * kBuckets + b] = split ? kSplit : uint8_t(successor(s, lo));
    }
  constexpr int64_t kBatch = 4096;
  std::vector<double> draws(static_cast<size_t>(kBatch));
  for (int64_t i = 1; i < n; i += kBatch) {
    const int64_t m = std::min(kBatch, n - i);
    uniform_doubles(seed_, stream, uint64_t(i), m, draws.data());
    for (int64_t j = 0; j < m; ++j) {
      const double v = draws[size_t(j)];
      const uint8_t next = table[size_t(state) * kBuckets + size_t(v * kBuckets)];
      state = next != kSplit ? next : successor(state, v);
      out[size_t(i + j)] = uint8_t(kFirstToken + state);
    }
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
