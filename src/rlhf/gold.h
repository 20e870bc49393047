// The synthetic preference task: a documented, seeded *gold* score of a response that a
// reward model has to learn from pairs ranked by it, and that stays available to evaluate
// the policy (a reward model is only a proxy of it).
//
//   A        a seeded half of the vocabulary: token t is in A when bit 0 of the first word of
//            philox4x32(seed, 0x601D, t) is set
//   gold     mean over the response of [r_t in A]  -  mean over t >= 1 of [r_t == r_{t-1}]
//            in [-1, 1]: "use the words of A, do not stutter". A model of the pairs sampled
//            from a fluent policy sees few repeats, so it learns the first term far better
//            than the second; a policy pushed hard on the proxy finds that repeating one
//            token of A scores high with the proxy and low with the gold rule.
// Pairs: prompts of P tokens drawn uniformly from [0, vocab) (Rng(seed, 0x9A1E, i)), two
// responses of R tokens sampled from a policy, chosen = the one with the higher gold score
// (ties are drawn again). A pairs file holds one pair per line:
//   PROMPT TOKENS | CHOSEN TOKENS | REJECTED TOKENS      (space-separated token ids)
// with the same P and R on every line.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace strata::rlhf {

class GoldRule {
 public:
  GoldRule(uint64_t seed, int vocab);
  bool in_a(int32_t token) const { return in_a_[size_t(token)] != 0; }
  double score(const int32_t* response, int R) const;
  uint64_t seed() const { return seed_; }

 private:
  uint64_t seed_;
  std::vector<uint8_t> in_a_;
};

// n pairs of (prompt P, chosen R, rejected R), row-major.
struct PairSet {
  int P = 0, R = 0;
  std::vector<int32_t> prompts, chosen, rejected;
  int64_t size() const { return P ? int64_t(prompts.size()) / P : 0; }
  // Pairs [begin, end) as a new set.
  PairSet slice(int64_t begin, int64_t end) const;
};

// Prompt i of the synthetic task (P tokens in [0, vocab)).
void synthetic_prompt(uint64_t seed, int64_t i, int P, int vocab, int32_t* out);

// Reads a pairs file (format above). Throws one line naming the file and line for an empty
// or malformed file, tokens outside [0, vocab), or lengths that differ between lines.
PairSet read_pairs(const std::string& path, int vocab);
void write_pairs(const std::string& path, const PairSet& pairs);

}  // namespace strata::rlhf
