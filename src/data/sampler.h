// The distributed sampler: which sample every rank uses at every step, computed by every
// rank alone from (N, seed, epoch, global position) with no communication.
//
// Terms.
//   N          samples in the stream (windows of T+1 tokens at a stride; num_windows()).
//   order      the epoch's order: a pseudorandom permutation of [0, N) that is a pure function
//              of (seed, epoch, N) -- the same on every rank, different every epoch and
//              independent of the world size. Position p of the epoch holds sample order(p).
//   G          global batch = b (micro-batch) * A (accumulation) * W (data-parallel ranks).
//   consumed   real samples of the epoch already used, counted globally. A step takes the
//              next G positions [consumed, consumed + G) of the order.
//   offset     j in [0, G) inside a step. Offset j goes to rank j % W as the rank's
//              (j / W)-th sample of the step: micro-batch (j / W) / b, row (j / W) % b.
//              Interleaving keeps the ranks' shares within one sample of each other when a
//              step is short.
// The last step of an epoch, when fewer than G positions remain (R = N - consumed < G):
//   drop    the epoch ends; those R samples are not used this epoch.
//   pad     offsets j >= R are filled by repeating the order from its start (positions
//           (j - R) mod N) and flagged as padding: their tokens are fed, their weight is 0.
//   uneven  only offsets j < R exist; ranks get ceil((R - r) / W) samples, possibly 0, and
//           micro-batches fill in order, so some may have fewer than b rows or none.
// Every rank knows every step's real sample count, hence the global real-token count that
// gradients are averaged by.
//
// Cost. order(p) is a 6-round Feistel network over the next power of four >= N with Philox as
// the round function, cycle-walked into [0, N) (expected < 4 walks): O(1) time and memory per
// lookup, so nothing is materialised and any position of any epoch is computed directly.
#pragma once
#include <cstdint>
#include <vector>

#include "data/dataset.h"

namespace strata::data {

// Samples of T+1 tokens starting every `stride` tokens in a stream of `tokens` tokens.
int64_t num_windows(int64_t tokens, int64_t seq, int64_t stride);

// The epoch's order: a bijection of [0, n) from (seed, epoch).
class EpochOrder {
 public:
  EpochOrder(uint64_t seed, int64_t epoch, int64_t n);
  int64_t operator()(int64_t position) const;
  int64_t size() const { return n_; }

 private:
  uint64_t encrypt(uint64_t x) const;
  uint64_t seed_, stream_;
  int64_t n_;
  int half_bits_;
  uint64_t half_mask_;
};

struct Slot {
  int64_t sample = 0;  // sample index in [0, N)
  bool pad = false;    // true: a repeated sample filling the last step (weight 0)
};

// One rank's part of one step: A micro-batches, each with up to b slots.
struct RankPlan {
  int rank = 0;
  std::vector<std::vector<Slot>> micro;
  int64_t real_samples() const;
};

struct StepPlan {
  LoaderState before;         // position the step starts from (normalised)
  LoaderState after;          // position after it (moves to the next epoch when it ends one)
  int64_t real_samples = 0;   // over all ranks
  int64_t pad_samples = 0;    // over all ranks
  std::vector<RankPlan> ranks;  // all W ranks, or only the one asked for
};

// Most samples one Sampler::plan() lays out (all ranks' slots of a step, or one rank's).
constexpr int64_t kMaxPlanSlots = int64_t(1) << 24;

// The planner shared by the Loader and `strata data plan`.
class Sampler {
 public:
  // Throws when the configuration cannot form a batch (sizes <= 0, or N < G under drop).
  Sampler(int64_t num_samples, const SamplerConfig& cfg);

  int64_t num_samples() const { return n_; }
  int64_t global_batch() const { return g_; }
  const SamplerConfig& config() const { return cfg_; }

  // For an epoch started at `consumed` (0 = a whole epoch): steps, and the samples of that
  // stretch that the policy drops (drop) or adds as padding (pad).
  int64_t steps_in_epoch(int64_t consumed = 0) const;
  int64_t dropped_in_epoch(int64_t consumed = 0) const;
  int64_t padded_in_epoch(int64_t consumed = 0) const;

  // Validates a position against this data (naming the numbers) and moves a position at the
  // end of an epoch (nothing left, or less than G under drop) to the start of the next.
  LoaderState normalize(LoaderState at) const;

  // The step starting at `at`. rank = -1 plans every rank; otherwise only that rank. Throws
  // when the step holds more than kMaxPlanSlots samples.
  StepPlan plan(LoaderState at, int rank = -1) const;

 private:
  RankPlan plan_rank(const EpochOrder& order, int64_t consumed, int64_t real, int rank) const;
  int64_t n_, g_;
  SamplerConfig cfg_;
};

}  // namespace strata::data
