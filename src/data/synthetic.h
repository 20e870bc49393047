// The built-in synthetic corpus: a seeded random sparse Markov chain whose entropy per token
// is known exactly, so a training run can print "loss X vs floor Y" with nothing downloaded.
//
// Terms.
//   V          vocabulary (256 token ids: the byte range).
//   S          states (64), written as the printable bytes 32 .. 95 (' ' .. '_'), so samples
//              read as text. The other ids never occur; a model learns that within a few
//              steps, and 64 states give each transition 4x the examples per step that 256
//              would, which is what lets `tiny` reach the floor in a few hundred steps.
//   K          successors per state (4): state i moves to i+1 (mod S) or to K-1 other random
//              states, with probabilities drawn from a flat Dirichlet. The i -> i+1 edges make
//              the chain irreducible (and the lazy chain used for the stationary distribution
//              needs no aperiodicity).
//   pi         stationary distribution: power iteration on (I + P) / 2 in double until the
//              L1 change is below 1e-15.
//   floor      entropy rate H = -sum_i pi_i sum_j P_ij ln P_ij, in nats per token. A stream
//              starts in a state drawn from pi, so it is stationary from its first token and
//              every target (which always sees its predecessor in the window) has exactly
//              this conditional entropy: the best possible expected loss is H.
//   streams    the training and validation streams are independent sample paths of the same
//              chain (different Philox streams), each pre-generated once as bytes.
// Cost. O(S K) to build the chain, O(S K) per power iteration, O(tokens) to generate (a few
// ns per token); memory 1 byte per token.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "data/dataset.h"

namespace strata::data {

class MarkovChain {
 public:
  static constexpr int kVocab = 256;
  static constexpr int kStates = 64;
  static constexpr int kFirstToken = 32;  // state s is token kFirstToken + s
  static constexpr int kSuccessors = 4;

  explicit MarkovChain(uint64_t seed);
  uint64_t seed() const { return seed_; }
  // P(next | state) as (successor state, probability) pairs; probabilities sum to 1.
  const std::array<int, kSuccessors>& successors(int state) const { return next_[state]; }
  const std::array<double, kSuccessors>& probs(int state) const { return prob_[state]; }
  const std::vector<double>& stationary() const { return pi_; }  // over states
  double entropy_rate() const { return rate_; }  // nats per token
  // Log-probability of token `to` following token `from`; -inf for a transition it never
  // makes (including any token outside the states).
  double log_prob(int from, int to) const;
  // `n` tokens of a sample path started from pi, drawn from Philox stream `stream`.
  std::vector<uint8_t> generate(int64_t n, uint64_t stream) const;

 private:
  uint64_t seed_;
  std::array<std::array<int, kSuccessors>, kStates> next_{};
  std::array<std::array<double, kSuccessors>, kStates> prob_{};
  std::array<std::array<double, kSuccessors>, kStates> cdf_{};
  std::vector<double> pi_;
  double rate_ = 0;
};

// A pre-generated sample path as a TokenSource.
class SyntheticSource : public TokenSource {
 public:
  SyntheticSource(uint64_t seed, bool validation, int64_t tokens);
  int64_t size() const override { return int64_t(tokens_.size()); }
  int vocab() const override { return MarkovChain::kVocab; }
  void read(int64_t pos, int64_t n, int32_t* out) const override;
  std::string describe() const override;
  double entropy_floor() const override { return chain_.entropy_rate(); }
  const MarkovChain& chain() const { return chain_; }

 private:
  MarkovChain chain_;
  bool validation_;
  std::vector<uint8_t> tokens_;
};

// Default stream sizes: enough that `tiny` sees fresh text for thousands of steps.
constexpr int64_t kSyntheticTrainTokens = int64_t(1) << 23;
constexpr int64_t kSyntheticValTokens = int64_t(1) << 20;
// Largest synthetic:N accepted (2 GiB of pre-generated tokens).
constexpr int64_t kSyntheticMaxTokens = int64_t(1) << 31;

}  // namespace strata::data
