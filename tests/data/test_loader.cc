// The Loader: batch contents, real-token counts across ranks, prefetch equivalence, exact
// resume (also on another world size), rejection of positions that do not fit, errors from
// the prefetch thread, and shutdown with a full queue.
#include <gtest/gtest.h>

#include <atomic>
#include <set>
#include <thread>

#include "core/error.h"
#include "core/timer.h"
#include "data/dataset.h"
#include "data/sampler.h"

namespace strata::data {
namespace {

// Token at position p is a known function of p, so every row can be checked.
class FormulaSource : public TokenSource {
 public:
  explicit FormulaSource(int64_t n, int64_t fail_at = -1) : n_(n), fail_at_(fail_at) {}
  static int32_t token(int64_t p) { return int32_t((p * 2654435761u) % 251); }
  int64_t size() const override { return n_; }
  int vocab() const override { return 256; }
  void read(int64_t pos, int64_t n, int32_t* out) const override {
    // Only sample reads (T+1 = 9 tokens) fail; the Loader's 64-token fingerprint reads pass.
    if (n == 9 && fail_at_ >= pos && fail_at_ < pos + n) fail("disk error at token ", fail_at_);
    for (int64_t i = 0; i < n; ++i) out[i] = token(pos + i);
  }
  std::string describe() const override { return cat("formula ", n_, " tokens"); }

 private:
  int64_t n_, fail_at_;
};

SamplerConfig config(int world, int b, int A, TailPolicy p, int64_t seq = 8) {
  SamplerConfig c;
  c.seq = seq;
  c.micro_batch = b;
  c.accum = A;
  c.world = world;
  c.seed = 5;
  c.policy = p;
  return c;
}

// Sample ids of one step on one rank, in micro-batch order (pads as -1).
std::vector<int64_t> ids(const StepBatch& sb) {
  std::vector<int64_t> out;
  for (const MicroBatch& mb : sb.micro) out.insert(out.end(), mb.sample_ids.begin(), mb.sample_ids.end());
  return out;
}

TEST(Loader, RowsAreWindowsWithShiftedTargetsAndWeights) {
  FormulaSource src(1000);
  for (TailPolicy p : {TailPolicy::drop, TailPolicy::pad, TailPolicy::uneven}) {
    SamplerConfig cfg = config(1, 3, 2, p);
    cfg.stride = 5;  // overlapping windows
    Loader loader(src, cfg, 0, {}, 0);
    const int64_t n = num_windows(1000, 8, 5);
    EXPECT_EQ(loader.steps_per_epoch(), p == TailPolicy::drop ? n / 6 : (n + 5) / 6);
    for (int64_t step = 0; step < loader.steps_per_epoch(); ++step) {
      StepBatch sb = loader.next();
      int64_t real = 0;
      for (const MicroBatch& mb : sb.micro) {
        ASSERT_EQ(mb.T, 8);
        ASSERT_EQ(mb.tokens.size(), size_t(mb.B) * 8);
        int64_t mb_real = 0;
        for (int i = 0; i < mb.B; ++i) {
          bool pad = mb.sample_ids[size_t(i)] < 0;
          for (int t = 0; t < 8; ++t) {
            float w = mb.weights[size_t(i) * 8 + t];
            ASSERT_EQ(w, pad ? 0.0f : 1.0f);
            mb_real += !pad;
            if (!pad) {
              int64_t pos = mb.sample_ids[size_t(i)] * 5 + t;
              ASSERT_EQ(mb.tokens[size_t(i) * 8 + t], FormulaSource::token(pos));
              ASSERT_EQ(mb.targets[size_t(i) * 8 + t], FormulaSource::token(pos + 1));
            } else {  // pad rows carry a real window (shifted consistently), weight 0
              ASSERT_EQ(mb.targets[size_t(i) * 8 + t],
                        t + 1 < 8 ? mb.tokens[size_t(i) * 8 + t + 1] : mb.targets[size_t(i) * 8 + t]);
            }
          }
        }
        ASSERT_EQ(mb.real_tokens, mb_real);
        real += mb_real;
      }
      ASSERT_EQ(sb.global_real_tokens, real);  // one rank: global = local
    }
    EXPECT_EQ(loader.state().epoch, 1);
    EXPECT_EQ(loader.state().consumed, 0);
  }
}

TEST(Loader, RanksSplitTheStepAndAgreeOnGlobalRealTokens) {
  FormulaSource src(8 * 37 + 1);  // 37 samples of 9 tokens
  for (int W : {1, 2, 3, 5, 8}) {
    SamplerConfig cfg = config(W, 2, 2, TailPolicy::uneven);
    std::vector<std::unique_ptr<Loader>> ranks;
    for (int r = 0; r < W; ++r) ranks.push_back(std::make_unique<Loader>(src, cfg, r, LoaderState{}, 2));
    const int64_t steps = ranks[0]->steps_per_epoch();
    std::multiset<int64_t> seen;
    for (int64_t k = 0; k < steps; ++k) {
      int64_t sum = 0, global = -1;
      for (auto& l : ranks) {
        StepBatch sb = l->next();
        for (const MicroBatch& mb : sb.micro) sum += mb.real_tokens;
        if (global >= 0) {
          ASSERT_EQ(sb.global_real_tokens, global);
        }
        global = sb.global_real_tokens;
        for (int64_t id : ids(sb)) seen.insert(id);
      }
      ASSERT_EQ(sum, global) << "W=" << W << " step " << k;
    }
    ASSERT_EQ(seen.size(), 37u);
    for (int64_t s = 0; s < 37; ++s) ASSERT_EQ(seen.count(s), 1u) << "W=" << W;
  }
}

TEST(Loader, PrefetchDeliversTheSameSequenceAsSynchronous) {
  FormulaSource src(5000);
  SamplerConfig cfg = config(3, 2, 2, TailPolicy::pad);
  Loader sync(src, cfg, 1, {}, 0), async(src, cfg, 1, {}, 4);
  for (int k = 0; k < 3 * sync.steps_per_epoch() + 2; ++k) {
    StepBatch a = sync.next(), b = async.next();
    ASSERT_EQ(ids(a), ids(b));
    ASSERT_EQ(a.epoch, b.epoch);
    ASSERT_EQ(a.global_real_tokens, b.global_real_tokens);
    for (size_t m = 0; m < a.micro.size(); ++m) ASSERT_EQ(a.micro[m].tokens, b.micro[m].tokens);
    ASSERT_EQ(sync.state().epoch, async.state().epoch);
    ASSERT_EQ(sync.state().consumed, async.state().consumed);
  }
}

TEST(Loader, ResumesExactlyAtEveryStepAndOnAnotherWorldSize) {
  FormulaSource src(8 * 50 + 1);  // 50 samples
  SamplerConfig cfg = config(2, 2, 1, TailPolicy::uneven);  // G = 4
  // Global sequence (rank-interleaved) of the uninterrupted run over 3 epochs.
  auto run = [&](const SamplerConfig& c, LoaderState start, int64_t steps,
                 LoaderState* end) {
    std::vector<std::unique_ptr<Loader>> ranks;
    for (int r = 0; r < c.world; ++r) ranks.push_back(std::make_unique<Loader>(src, c, r, start, 2));
    std::vector<std::pair<int64_t, int64_t>> seq;  // (epoch, sample)
    for (int64_t k = 0; k < steps; ++k) {
      std::vector<std::vector<int64_t>> per_rank;
      int64_t epoch = 0;
      for (auto& l : ranks) {
        StepBatch sb = l->next();
        per_rank.push_back(ids(sb));
        epoch = sb.epoch;
      }
      for (size_t k2 = 0;; ++k2) {  // interleave back to global offsets
        bool any = false;
        for (auto& v : per_rank)
          if (k2 < v.size()) {
            seq.push_back({epoch, v[k2]});
            any = true;
          }
        if (!any) break;
      }
    }
    if (end) *end = ranks[0]->state();
    return seq;
  };
  const int64_t steps = 3 * 13;  // 13 steps per epoch
  auto straight = run(cfg, {}, steps, nullptr);
  ASSERT_EQ(straight.size(), 150u);
  for (int64_t k = 0; k <= steps; ++k) {
    LoaderState saved;
    auto head = run(cfg, {}, k, &saved);
    SamplerConfig other = cfg;
    other.world = 3;
    other.micro_batch = 1;  // G' = 3: the rest takes a different number of steps
    Sampler s2(50, other);
    int64_t rest_steps = 0;
    for (LoaderState at = s2.normalize(saved); at.epoch < 3; at = s2.plan(at).after) ++rest_steps;
    auto tail = run(other, saved, rest_steps, nullptr);
    head.insert(head.end(), tail.begin(), tail.end());
    ASSERT_EQ(head, straight) << "resumed on 3 ranks after step " << k;
  }
}

TEST(Loader, RejectsPositionsThatDoNotFitTheData) {
  FormulaSource src(8 * 50 + 1), other(8 * 40 + 1);
  SamplerConfig cfg = config(1, 2, 1, TailPolicy::drop);
  LoaderState saved;
  {
    Loader l(src, cfg, 0, {}, 0);
    l.next();
    saved = l.state();
    EXPECT_EQ(saved.samples, 50);
    EXPECT_NE(saved.fingerprint, 0u);
  }
  try {
    Loader l(other, cfg, 0, saved, 0);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("50 samples"), std::string::npos) << m;
    EXPECT_NE(m.find("40 samples"), std::string::npos) << m;
  }
  SamplerConfig reseeded = cfg;
  reseeded.seed = 6;
  EXPECT_THROW(Loader(src, reseeded, 0, saved, 0), Error);  // same size, different order
  LoaderState beyond{0, 51};
  try {
    Loader l(src, cfg, 0, beyond, 0);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("consumed 51"), std::string::npos) << e.what();
  }
  Loader ok(src, cfg, 0, saved, 0);  // the right data resumes
  EXPECT_EQ(ok.state().consumed, 2);
}

TEST(Loader, BatchesThatCannotBeFormedAreRejected) {
  FormulaSource src(8 * 10 + 1), tiny(5);
  EXPECT_THROW(Loader(src, config(4, 3, 1, TailPolicy::drop), 0, {}, 0), Error);  // G 12 > 10
  EXPECT_NO_THROW(Loader(src, config(4, 3, 1, TailPolicy::uneven), 0, {}, 0));
  try {
    Loader l(tiny, config(1, 1, 1, TailPolicy::pad), 0, {}, 0);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("5 tokens"), std::string::npos) << e.what();
  }
  EXPECT_THROW(Loader(src, config(2, 1, 1, TailPolicy::drop), 2, {}, 0), Error);  // rank 2 of 2
  EXPECT_THROW(Loader(src, config(1, 0, 1, TailPolicy::drop), 0, {}, 0), Error);
}

TEST(Loader, ErrorsOnThePrefetchThreadReachNext) {
  FormulaSource src(8 * 100 + 1, /*fail_at=*/8 * 100);  // the last token of the stream
  SamplerConfig cfg = config(1, 4, 1, TailPolicy::pad);
  Loader l(src, cfg, 0, {}, 2);
  bool thrown = false;
  for (int k = 0; k < 60 && !thrown; ++k) {
    try {
      l.next();
    } catch (const Error& e) {
      thrown = true;
      EXPECT_NE(std::string(e.what()).find("disk error at token 800"), std::string::npos);
    }
  }
  EXPECT_TRUE(thrown);
  EXPECT_THROW(l.next(), Error);  // and stays failed
}

TEST(Loader, ShutsDownPromptlyWithAFullQueue) {
  FormulaSource src(100000);
  Stopwatch sw;
  for (int i = 0; i < 20; ++i) {
    Loader l(src, config(1, 4, 4, TailPolicy::drop), 0, {}, 3);
    if (i % 2) l.next();
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  EXPECT_LT(sw.seconds(), 5.0);
}

}  // namespace
}  // namespace strata::data
