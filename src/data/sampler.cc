// Sampler: epoch orders and step plans (terms and cost in sampler.h).
#include "data/sampler.h"

#include <algorithm>

#include "core/error.h"
#include "core/rng.h"

namespace strata::data {

namespace {
// Philox stream of the epoch orders; the epoch number is mixed into it.
constexpr uint64_t kOrderStream = 0xDA7A'0000'0000'0000ull;
constexpr int kFeistelRounds = 6;
}  // namespace

int64_t TokenSource::num_samples(int64_t seq, int64_t stride) const {
  return num_windows(size(), seq, stride);
}

int64_t num_windows(int64_t tokens, int64_t seq, int64_t stride) {
  STRATA_CHECK(seq > 0, "sequence length must be positive (got ", seq, ")");
  STRATA_CHECK(stride > 0, "stride must be positive (got ", stride, ")");
  if (tokens < seq + 1) return 0;
  return (tokens - seq - 1) / stride + 1;
}

EpochOrder::EpochOrder(uint64_t seed, int64_t epoch, int64_t n)
    : seed_(seed), stream_(kOrderStream ^ uint64_t(epoch)), n_(n) {
  STRATA_CHECK(n >= 0 && n <= (int64_t(1) << 62), "sample count must be in [0, 2^62] (got ", n,
               ")");
  STRATA_CHECK(epoch >= 0, "epoch must be >= 0 (got ", epoch, ")");
  int bits = 2;
  while (bits < 62 && (uint64_t(1) << bits) < uint64_t(n)) bits += 2;
  half_bits_ = bits / 2;
  half_mask_ = (uint64_t(1) << half_bits_) - 1;
}

// A balanced Feistel network over 2 * half_bits_ bits: a bijection for any round function.
uint64_t EpochOrder::encrypt(uint64_t x) const {
  uint64_t left = x >> half_bits_, right = x & half_mask_;
  for (int round = 0; round < kFeistelRounds; ++round) {
    auto block = philox4x32(seed_, stream_, (uint64_t(round) << 32) | right);
    uint64_t f = ((uint64_t(block[1]) << 32) | block[0]) & half_mask_;
    uint64_t next = left ^ f;
    left = right;
    right = next;
  }
  return (left << half_bits_) | right;
}

int64_t EpochOrder::operator()(int64_t position) const {
  STRATA_CHECK(position >= 0 && position < n_, "order position ", position, " outside [0, ", n_,
               ")");
  // Cycle-walking: a bijection of the power-of-four domain restricted to [0, n) by iterating
  // until the value lands inside; every cycle through [0, n) stays a bijection of [0, n).
  uint64_t y = encrypt(uint64_t(position));
  while (y >= uint64_t(n_)) y = encrypt(y);
  return int64_t(y);
}

int64_t RankPlan::real_samples() const {
  int64_t real = 0;
  for (const auto& m : micro)
    for (const Slot& s : m) real += !s.pad;
  return real;
}

Sampler::Sampler(int64_t num_samples, const SamplerConfig& cfg) : n_(num_samples), cfg_(cfg) {
  STRATA_CHECK(n_ >= 0, "sample count must be >= 0 (got ", n_, ")");
  STRATA_CHECK(cfg.micro_batch > 0, "micro-batch must be positive (got ", cfg.micro_batch, ")");
  STRATA_CHECK(cfg.accum > 0, "gradient accumulation steps must be positive (got ", cfg.accum,
               ")");
  STRATA_CHECK(cfg.world > 0, "world size must be positive (got ", cfg.world, ")");
  // b, A and W are each below 2^31, so b * A fits in 64 bits; the product with W may not.
  const int64_t per_rank = int64_t(cfg.micro_batch) * cfg.accum;
  STRATA_CHECK(!__builtin_mul_overflow(per_rank, int64_t(cfg.world), &g_),
               "global batch micro-batch ", cfg.micro_batch, " x accumulation ", cfg.accum,
               " x world ", cfg.world, " overflows 64 bits");
}

int64_t Sampler::steps_in_epoch(int64_t consumed) const {
  int64_t left = std::max<int64_t>(n_ - consumed, 0);
  if (cfg_.policy == TailPolicy::drop) return left / g_;
  return (left + g_ - 1) / g_;
}

int64_t Sampler::dropped_in_epoch(int64_t consumed) const {
  int64_t left = std::max<int64_t>(n_ - consumed, 0);
  return cfg_.policy == TailPolicy::drop ? left % g_ : 0;
}

int64_t Sampler::padded_in_epoch(int64_t consumed) const {
  int64_t left = std::max<int64_t>(n_ - consumed, 0);
  if (cfg_.policy != TailPolicy::pad || left % g_ == 0) return 0;
  return g_ - left % g_;
}

LoaderState Sampler::normalize(LoaderState at) const {
  STRATA_CHECK(at.epoch >= 0, "loader position has a negative epoch (", at.epoch, ")");
  STRATA_CHECK(at.consumed >= 0 && at.consumed <= n_, "loader position (epoch ", at.epoch,
               ", consumed ", at.consumed, " samples) does not fit a dataset of ", n_,
               " samples");
  int64_t left = n_ - at.consumed;
  bool ended = left == 0 || (cfg_.policy == TailPolicy::drop && left < g_);
  if (ended && n_ > 0) return {at.epoch + 1, 0, at.samples, at.fingerprint};
  return at;
}

RankPlan Sampler::plan_rank(const EpochOrder& order, int64_t consumed, int64_t real,
                            int rank) const {
  const int W = cfg_.world, b = cfg_.micro_batch;
  // Offsets present in this step: all G, except under `uneven` where only the real ones are.
  int64_t present = cfg_.policy == TailPolicy::uneven ? real : g_;
  RankPlan rp;
  rp.rank = rank;
  rp.micro.resize(cfg_.accum);
  for (int64_t j = rank, k = 0; j < present; j += W, ++k) {
    Slot s;
    if (j < real) {
      s.sample = cfg_.shuffle ? order(consumed + j) : consumed + j;
    } else {
      s.sample = cfg_.shuffle ? order((j - real) % n_) : (j - real) % n_;
      s.pad = true;
    }
    rp.micro[k / b].push_back(s);
  }
  return rp;
}

StepPlan Sampler::plan(LoaderState at, int rank) const {
  STRATA_CHECK(rank >= -1 && rank < cfg_.world, "rank ", rank, " outside world of ", cfg_.world);
  STRATA_CHECK(n_ > 0, "no samples to plan: the data holds 0 samples of ", cfg_.seq + 1,
               " tokens");
  STRATA_CHECK(steps_in_epoch() > 0, "global batch of ", g_, " samples (micro-batch ",
               cfg_.micro_batch, " x accumulation ", cfg_.accum, " x world ", cfg_.world,
               ") cannot be formed from ", n_, " samples under the drop policy");
  // A plan lists every slot it covers: bound it before allocating (micro-batches of all ranks,
  // or of the one rank asked for).
  const int64_t slots = rank < 0 ? g_ : int64_t(cfg_.micro_batch) * cfg_.accum;
  const int64_t micro = int64_t(cfg_.accum) * (rank < 0 ? cfg_.world : 1);  // vectors allocated
  STRATA_CHECK(slots <= kMaxPlanSlots && micro <= kMaxPlanSlots,
               "a step of ", slots, " samples (micro-batch ", cfg_.micro_batch, " x accumulation ",
               cfg_.accum, rank < 0 ? cat(" x world ", cfg_.world) : std::string(" on one rank"),
               ") is too large to plan (limit ", kMaxPlanSlots, " samples per step)");
  StepPlan sp;
  sp.before = normalize(at);
  const int64_t consumed = sp.before.consumed;
  sp.real_samples = std::min(g_, n_ - consumed);
  sp.pad_samples = cfg_.policy == TailPolicy::pad ? g_ - sp.real_samples : 0;
  EpochOrder order(cfg_.seed, sp.before.epoch, n_);
  for (int r = 0; r < cfg_.world; ++r)
    if (rank < 0 || r == rank) sp.ranks.push_back(plan_rank(order, consumed, sp.real_samples, r));
  sp.after = sp.before;
  sp.after.consumed = consumed + sp.real_samples;
  sp.after = normalize(sp.after);
  return sp;
}

}  // namespace strata::data
