// Property tests of the distributed sampler over thousands of random configurations
// (N, W, b, A, seed, epoch, policy), including N = 0, N < W, W = 1 and prime sizes.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>

#include "core/error.h"
#include "core/rng.h"
#include "data/sampler.h"

namespace strata::data {
namespace {

struct Case {
  int64_t n;
  SamplerConfig cfg;
  int64_t epoch;
};

const int kPrimes[] = {2, 3, 5, 7, 11, 13};

Case random_case(Rng& rng) {
  Case c;
  c.cfg.world = rng.below(3) == 0 ? kPrimes[rng.below(6)] : 1 + int(rng.below(8));
  c.cfg.micro_batch = 1 + int(rng.below(4));
  c.cfg.accum = 1 + int(rng.below(3));
  c.cfg.seed = rng.next_u64();
  c.cfg.policy = TailPolicy(rng.below(3));
  c.epoch = int64_t(rng.below(6));
  switch (rng.below(6)) {
    case 0: c.n = 0; break;
    case 1: c.n = int64_t(rng.below(uint64_t(c.cfg.world)) + 1); break;  // N <= W
    case 2: c.n = kPrimes[rng.below(6)] * (1 + int64_t(rng.below(20))) + 1; break;
    default: c.n = int64_t(rng.below(400)); break;
  }
  return c;
}

std::string describe(const Case& c) {
  const char* p[] = {"drop", "pad", "uneven"};
  return cat("N=", c.n, " W=", c.cfg.world, " b=", c.cfg.micro_batch, " A=", c.cfg.accum,
             " seed=", c.cfg.seed, " epoch=", c.epoch, " policy=", p[int(c.cfg.policy)]);
}

// The step's slots in global offset order, rebuilt from the per-rank plans
// (rank r's k-th slot is offset k * W + r).
std::vector<Slot> global_slots(const StepPlan& sp, int world) {
  std::map<int64_t, Slot> by_offset;
  for (const RankPlan& rp : sp.ranks) {
    int64_t k = 0;
    for (const auto& m : rp.micro)
      for (const Slot& s : m) by_offset[k++ * world + rp.rank] = s;
  }
  std::vector<Slot> out;
  for (auto& [j, s] : by_offset) {
    EXPECT_EQ(j, int64_t(out.size())) << "offsets must be contiguous";
    out.push_back(s);
  }
  return out;
}

TEST(EpochOrder, IsAPermutationForEverySizeUpTo300) {
  for (int64_t n = 0; n <= 300; ++n) {
    EpochOrder order(7, 3, n);
    std::vector<char> seen(size_t(n), 0);
    for (int64_t p = 0; p < n; ++p) {
      int64_t s = order(p);
      ASSERT_TRUE(s >= 0 && s < n) << "n=" << n;
      ASSERT_FALSE(seen[size_t(s)]) << "n=" << n << " repeats " << s;
      seen[size_t(s)] = 1;
    }
  }
}

TEST(EpochOrder, ChangesWithEpochAndSeedAndIsRoughlyUniform) {
  const int64_t n = 1000;
  EpochOrder a(1, 0, n), b(1, 1, n), c(2, 0, n), a2(1, 0, n);
  int same_ab = 0, same_ac = 0;
  for (int64_t p = 0; p < n; ++p) {
    same_ab += a(p) == b(p);
    same_ac += a(p) == c(p);
    EXPECT_EQ(a(p), a2(p));
  }
  EXPECT_LT(same_ab, 20);  // a random pair of permutations agrees in ~1 place
  EXPECT_LT(same_ac, 20);
  // Where position 0 lands over many epochs: no bucket of 10 far from its share.
  std::vector<int> hist(10, 0);
  for (int64_t e = 0; e < 5000; ++e) hist[size_t(EpochOrder(5, e, n)(0) / 100)]++;
  for (int h : hist) EXPECT_NEAR(h, 500, 120);
}

TEST(Sampler, PropertiesOverThousandsOfRandomConfigs) {
  Rng rng(2024, 1);
  int planned = 0;
  for (int iter = 0; iter < 3000; ++iter) {
    Case c = random_case(rng);
    SCOPED_TRACE(describe(c));
    Sampler s(c.n, c.cfg);
    const int W = c.cfg.world, b = c.cfg.micro_batch;
    const int64_t G = s.global_batch();
    ASSERT_EQ(G, int64_t(b) * c.cfg.accum * W);
    const int64_t steps = s.steps_in_epoch();
    if (c.n == 0 || steps == 0) {
      EXPECT_TRUE(c.n == 0 || c.cfg.policy == TailPolicy::drop);
      EXPECT_THROW(s.plan({c.epoch, 0}), Error);
      continue;
    }
    ++planned;
    EpochOrder order(c.cfg.seed, c.epoch, c.n);
    std::vector<int> uses(size_t(c.n), 0);
    int64_t pads = 0, position = 0;
    LoaderState at{c.epoch, 0};
    for (int64_t k = 0; k < steps; ++k) {
      StepPlan sp = s.plan(at);
      ASSERT_EQ(sp.before.epoch, c.epoch);
      ASSERT_EQ(sp.before.consumed, at.consumed);
      ASSERT_EQ(int(sp.ranks.size()), W);
      // Each rank alone computes exactly its part of the full plan.
      for (int r = 0; r < W; ++r) {
        StepPlan one = s.plan(at, r);
        ASSERT_EQ(one.ranks.size(), 1u);
        ASSERT_EQ(one.real_samples, sp.real_samples);
        for (int m = 0; m < c.cfg.accum; ++m) {
          ASSERT_EQ(one.ranks[0].micro[m].size(), sp.ranks[r].micro[m].size());
          for (size_t i = 0; i < one.ranks[0].micro[m].size(); ++i)
            ASSERT_EQ(one.ranks[0].micro[m][i].sample, sp.ranks[r].micro[m][i].sample);
        }
      }
      // Shapes by policy.
      const bool last = k + 1 == steps;
      for (const RankPlan& rp : sp.ranks) {
        ASSERT_EQ(int(rp.micro.size()), c.cfg.accum);
        for (const auto& m : rp.micro) {
          ASSERT_LE(int(m.size()), b);
          if (c.cfg.policy != TailPolicy::uneven || !last) {
            ASSERT_EQ(int(m.size()), b);
          }
        }
      }
      // Global order: real samples follow the epoch order; pads repeat it from the start.
      std::vector<Slot> slots = global_slots(sp, W);
      int64_t real = 0;
      for (size_t j = 0; j < slots.size(); ++j) {
        if (!slots[j].pad) {
          ASSERT_EQ(slots[j].sample, order(position++));
          uses[size_t(slots[j].sample)]++;
          ++real;
        } else {
          ASSERT_EQ(slots[j].sample, order(int64_t(j - size_t(sp.real_samples)) % c.n));
          ++pads;
        }
      }
      ASSERT_EQ(real, sp.real_samples);
      ASSERT_EQ(real, last ? c.n - k * G - s.dropped_in_epoch() : G);
      // Under uneven the shares differ by at most one sample.
      int64_t lo = INT64_MAX, hi = 0;
      for (const RankPlan& rp : sp.ranks) {
        lo = std::min(lo, rp.real_samples());
        hi = std::max(hi, rp.real_samples());
      }
      ASSERT_LE(hi - lo, 1);
      at = sp.after;
    }
    // Union over ranks and steps: every sample once, except the dropped tail.
    EXPECT_EQ(at.epoch, c.epoch + 1);
    EXPECT_EQ(at.consumed, 0);
    EXPECT_EQ(pads, s.padded_in_epoch());
    int64_t used = 0;
    for (int u : uses) {
      ASSERT_LE(u, 1);
      used += u;
    }
    EXPECT_EQ(used, c.n - s.dropped_in_epoch());
    if (c.cfg.policy == TailPolicy::drop) {
      EXPECT_EQ(s.dropped_in_epoch(), c.n % G);
    } else {
      EXPECT_EQ(used, c.n);
      EXPECT_EQ(steps, (c.n + G - 1) / G);
    }
  }
  EXPECT_GT(planned, 1500);
}

// Plans of `steps` consecutive steps from `at`, flattened to the global real-sample sequence.
// Optionally records the position and the sequence length at every step boundary.
std::vector<int64_t> global_sequence(const Sampler& s, LoaderState at, int64_t steps,
                                     std::vector<LoaderState>* boundaries = nullptr,
                                     std::vector<size_t>* lengths = nullptr) {
  std::vector<int64_t> seq;
  for (int64_t k = 0; k < steps; ++k) {
    if (boundaries) boundaries->push_back(at);
    if (lengths) lengths->push_back(seq.size());
    StepPlan sp = s.plan(at);
    for (const Slot& slot : global_slots(sp, s.config().world))
      if (!slot.pad) seq.push_back(slot.sample);
    at = sp.after;
  }
  if (boundaries) boundaries->push_back(at);
  if (lengths) lengths->push_back(seq.size());
  return seq;
}

TEST(Sampler, ResumingAtEveryStepBoundaryReproducesTheRun) {
  Rng rng(77, 1);
  for (int iter = 0; iter < 250; ++iter) {
    Case c = random_case(rng);
    SCOPED_TRACE(describe(c));
    Sampler s(c.n, c.cfg);
    if (c.n == 0 || s.steps_in_epoch() == 0) continue;
    // Two epochs and a bit, straight through.
    const int64_t total = 2 * s.steps_in_epoch() + 1;
    std::vector<LoaderState> bounds;
    std::vector<size_t> lengths;
    std::vector<int64_t> straight = global_sequence(s, {c.epoch, 0}, total, &bounds, &lengths);
    for (int64_t k = 0; k <= total; ++k) {
      Sampler fresh(c.n, c.cfg);
      std::vector<int64_t> resumed = global_sequence(fresh, bounds[size_t(k)], total - k);
      ASSERT_EQ(resumed.size(), straight.size() - lengths[size_t(k)]);
      ASSERT_TRUE(std::equal(resumed.begin(), resumed.end(), straight.begin() + lengths[size_t(k)]))
          << "resumed at step " << k;
    }
  }
}

TEST(Sampler, ResumingOnAnotherWorldSizeKeepsTheGlobalOrder) {
  Rng rng(99, 1);
  int checked = 0;
  for (int iter = 0; iter < 1000; ++iter) {
    Case c = random_case(rng);
    if (c.cfg.policy == TailPolicy::drop) continue;  // the dropped tail depends on G
    SCOPED_TRACE(describe(c));
    Sampler s(c.n, c.cfg);
    if (c.n == 0) continue;
    SamplerConfig other = c.cfg;
    other.world = 1 + int(rng.below(9));
    other.micro_batch = 1 + int(rng.below(4));
    other.accum = 1 + int(rng.below(3));
    Sampler s2(c.n, other);
    const int64_t k = int64_t(rng.below(uint64_t(s.steps_in_epoch()) + 1));
    std::vector<LoaderState> bounds;
    std::vector<int64_t> head = global_sequence(s, {c.epoch, 0}, k, &bounds);
    LoaderState at = bounds.back();
    std::vector<int64_t> rest;
    if (at.epoch == c.epoch) rest = global_sequence(s2, at, s2.steps_in_epoch(at.consumed));
    head.insert(head.end(), rest.begin(), rest.end());
    EpochOrder order(c.cfg.seed, c.epoch, c.n);
    ASSERT_EQ(int64_t(head.size()), c.n);
    for (int64_t p = 0; p < c.n; ++p) ASSERT_EQ(head[size_t(p)], order(p));
    ++checked;
  }
  EXPECT_GT(checked, 300);
}

TEST(Sampler, DropPolicyAndWorldChangeKeepOrderUpToTheDroppedTail) {
  SamplerConfig a;
  a.world = 4;
  a.micro_batch = 2;
  a.seed = 3;
  SamplerConfig b = a;
  b.world = 3;
  Sampler s(100, a), s2(100, b);  // G = 8, then G' = 6
  std::vector<LoaderState> bounds;
  std::vector<int64_t> seq = global_sequence(s, {0, 0}, 5, &bounds);  // 40 samples
  std::vector<int64_t> rest = global_sequence(s2, bounds.back(), s2.steps_in_epoch(40));
  EXPECT_EQ(s2.steps_in_epoch(40), 10);  // 60 left, G' = 6
  seq.insert(seq.end(), rest.begin(), rest.end());
  EpochOrder order(3, 0, 100);
  ASSERT_EQ(seq.size(), 100u);
  for (int64_t p = 0; p < 100; ++p) EXPECT_EQ(seq[size_t(p)], order(p));
}

TEST(Sampler, UnevenTailGivesRanksZeroRowsAndCountsRealTokens) {
  SamplerConfig cfg;
  cfg.world = 4;
  cfg.micro_batch = 2;
  cfg.accum = 2;
  cfg.policy = TailPolicy::uneven;
  Sampler s(18, cfg);  // G = 16: step 0 full, step 1 has 2 samples
  StepPlan last = s.plan({0, 16});
  EXPECT_EQ(last.real_samples, 2);
  EXPECT_EQ(last.ranks[0].real_samples(), 1);
  EXPECT_EQ(last.ranks[1].real_samples(), 1);
  EXPECT_EQ(last.ranks[2].real_samples(), 0);
  EXPECT_EQ(last.ranks[3].real_samples(), 0);
  EXPECT_EQ(last.ranks[0].micro[1].size(), 0u);
  EXPECT_EQ(last.after.epoch, 1);
}

TEST(Sampler, PadPolicyRepeatsFromTheStartOfTheOrder) {
  SamplerConfig cfg;
  cfg.world = 3;
  cfg.micro_batch = 2;
  cfg.policy = TailPolicy::pad;
  cfg.seed = 11;
  Sampler s(4, cfg);  // G = 6 > N: one step, 4 real + 2 pads = order(0), order(1)
  StepPlan sp = s.plan({2, 0});
  std::vector<Slot> slots = global_slots(sp, 3);
  EpochOrder order(11, 2, 4);
  ASSERT_EQ(slots.size(), 6u);
  for (int j = 0; j < 4; ++j) EXPECT_FALSE(slots[size_t(j)].pad);
  EXPECT_TRUE(slots[4].pad);
  EXPECT_EQ(slots[4].sample, order(0));
  EXPECT_EQ(slots[5].sample, order(1));
  EXPECT_EQ(s.padded_in_epoch(), 2);
}

TEST(Sampler, BadConfigurationsAndPositionsNameTheNumbers) {
  SamplerConfig cfg;
  cfg.micro_batch = 0;
  EXPECT_THROW(Sampler(10, cfg), Error);
  cfg.micro_batch = 4;
  cfg.world = 3;
  Sampler s(10, cfg);  // G = 12 > 10 under drop
  try {
    s.plan({0, 0});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("12"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("10 samples"), std::string::npos) << e.what();
  }
  cfg.micro_batch = 1;
  Sampler ok(10, cfg);
  try {
    ok.normalize({0, 11});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("consumed 11"), std::string::npos) << e.what();
  }
  EXPECT_THROW(ok.plan({0, 0}, 3), Error);  // rank outside the world
  EXPECT_EQ(num_windows(256, 256, 256), 0);
  EXPECT_EQ(num_windows(257, 256, 256), 1);
  EXPECT_EQ(num_windows(1000, 256, 256), 3);
  EXPECT_EQ(num_windows(1000, 256, 100), 8);
}

}  // namespace
}  // namespace strata::data
