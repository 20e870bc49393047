// Weighted mixtures of data sets (`--data a:0.7,b:0.3`), with the semantics of Megatron's
// blended datasets: the positions of an epoch are dealt to the parts by a deterministic
// greedy schedule -- position p goes to the part d with the largest w_d * (p + 1) - c_d(p),
// c_d(p) being the positions dealt to d before p (ties: the first part) -- so every stretch
// of consecutive positions, and so every step's global batch, holds each part within one
// sample of its weight. The j-th position dealt to part d in epoch e reads part d's sample
// order_{d,e}(j): a seeded permutation of that part's samples, new every epoch (EpochOrder).
//
// Size. An epoch has N = min over parts of floor(n_d / w_d) positions (weights normalised,
// parts of weight 0 left out), so no part repeats a sample within an epoch; a larger part's
// samples beyond its share wait for later epochs (each epoch draws another subset).
//
// Resume. Everything is a pure function of (seed, epoch, position): the loader position
// (epoch, consumed) resumes a mixture exactly, on any number of ranks.
//
// Cost. The schedule is built once per (seq, stride): one byte per position plus the counts
// every 4,096 positions; a lookup scans at most 4,096 bytes.
#pragma once
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "data/dataset.h"

namespace strata::data {

class MixtureSource final : public TokenSource {
 public:
  // weights >= 0 with a positive sum (checked by the caller, which names the spec).
  MixtureSource(std::vector<std::unique_ptr<TokenSource>> parts, std::vector<double> weights, uint64_t seed);
  int64_t size() const override { return total_; }
  int vocab() const override { return vocab_; }
  // The parts' streams one after the other (used for the loader's fingerprint).
  void read(int64_t pos, int64_t n, int32_t* out) const override;
  std::string describe() const override;
  int64_t num_samples(int64_t seq, int64_t stride) const override;
  bool orders_itself() const override { return true; }
  void read_sample(int64_t epoch, int64_t sample, int64_t seq, int64_t stride, int32_t* out) const override;
  bool can_decode() const override { return parts_[0]->can_decode(); }
  std::string decode(const std::vector<int32_t>& ids) const override { return parts_[0]->decode(ids); }
  int32_t document_token() const override;

 private:
  struct Schedule {
    int64_t seq = 0, stride = 0, positions = 0;
    std::vector<int64_t> samples;           // n_d per part
    std::vector<uint8_t> part;              // per position
    std::vector<int64_t> counts;            // per 4096 positions: c_d before it, parts_ each
  };
  const Schedule& schedule(int64_t seq, int64_t stride) const;

  std::vector<std::unique_ptr<TokenSource>> parts_;
  std::vector<double> weights_;
  uint64_t seed_;
  int64_t total_ = 0;
  int vocab_ = 0;
  mutable std::mutex mu_;
  mutable std::vector<std::unique_ptr<Schedule>> schedules_;
};

// "A:0.7,B:0.3" -> (spec, weight) pairs; throws naming the entry when a weight is missing,
// not a number, negative or not finite, or all weights are 0. A spec with no ',' is no mixture
// (returns empty).
std::vector<std::pair<std::string, double>> parse_mixture(const std::string& spec);

}  // namespace strata::data
