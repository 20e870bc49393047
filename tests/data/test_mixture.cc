// Weighted mixtures (`--data a:0.7,b:0.3`): every step's global batch holds each part within
// one sample of its weight, no sample repeats within an epoch, and the position resumes
// exactly on another number of ranks.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>

#include "data/dataset.h"
#include "data/mixture.h"
#include "data/token_file.h"
#include "support/run.h"
#include "support/temp_dir.h"

namespace strata::data {
namespace {

constexpr int kSeq = 8;
constexpr int kB = 20000;  // part B's window ids start here

// A .bin file whose window w (of kSeq tokens) is all `first + w`, so a sample names itself.
void write_windows(const std::string& path, int first, int windows) {
  std::vector<uint16_t> t;
  for (int w = 0; w < windows; ++w) t.insert(t.end(), kSeq, uint16_t(first + w));
  t.push_back(uint16_t(first));
  write_bin(path, t);
}

struct Mix {
  test::TempDir dir;
  Split split;
  explicit Mix(const std::string& weights = "0.7,0.3", int a = 700, int b = 500) {
    write_windows(dir.file("a.bin"), 1, a);
    write_windows(dir.file("b.bin"), kB, b);
    const size_t comma = weights.find(',');
    split = open_split(dir.file("a.bin") + ":" + weights.substr(0, comma) + "," + dir.file("b.bin") + ":" +
                           weights.substr(comma + 1),
                       /*seed=*/5, /*val_fraction=*/0.0);
  }
};

// The samples (first tokens) of every step, all ranks together, sorted.
std::vector<std::vector<int>> steps(const TokenSource& src, int world, int micro, int n, LoaderState start = {}) {
  std::vector<std::unique_ptr<Loader>> ranks;
  SamplerConfig c;
  c.seq = kSeq;
  c.micro_batch = micro;
  c.world = world;
  c.seed = 11;
  for (int r = 0; r < world; ++r) ranks.push_back(std::make_unique<Loader>(src, c, r, start, 0));
  std::vector<std::vector<int>> out;
  for (int s = 0; s < n; ++s) {
    std::vector<int> step;
    for (auto& l : ranks)
      for (const MicroBatch& mb : l->next().micro)
        for (int i = 0; i < mb.B; ++i) step.push_back(mb.tokens[size_t(i) * kSeq]);
    std::sort(step.begin(), step.end());
    out.push_back(step);
  }
  return out;
}

TEST(Mixture, EveryStepHoldsEachPartWithinOneSampleOfItsWeight) {
  Mix m;
  // 700 / 0.7 = 1000 and 500 / 0.3 = 1666: an epoch of 1000 positions, 700 from a, 300 from b.
  ASSERT_EQ(m.split.train->num_samples(kSeq, kSeq), 1000);
  const auto all = steps(*m.split.train, 2, 5, 200);  // 100 steps of 10 a epoch, two epochs
  for (size_t s = 0; s < all.size(); ++s) {
    const auto from_b = std::count_if(all[s].begin(), all[s].end(), [](int t) { return t >= kB; });
    EXPECT_NEAR(double(from_b), 3.0, 1.0) << "step " << s;
  }
  // Within an epoch no sample repeats; the next epoch draws another order (and, for b,
  // another subset of its 500).
  for (int e = 0; e < 2; ++e) {
    std::set<int> seen;
    int b = 0;
    for (int s = 100 * e; s < 100 * (e + 1); ++s)
      for (int t : all[size_t(s)]) {
        EXPECT_TRUE(seen.insert(t).second) << "epoch " << e << " repeats sample " << t;
        b += t >= kB;
      }
    EXPECT_EQ(seen.size(), 1000u);
    EXPECT_EQ(b, 300);
  }
  EXPECT_NE(all[0], all[100]);
}

TEST(Mixture, ResumesExactlyOnAnotherNumberOfRanks) {
  Mix m;
  const auto whole = steps(*m.split.train, 1, 6, 40);
  EXPECT_EQ(steps(*m.split.train, 3, 2, 40), whole);  // the same global batches on 3 ranks
  // Stopped after 17 steps at 2 ranks, resumed at 3.
  SamplerConfig c;
  c.seq = kSeq;
  c.micro_batch = 3;
  c.world = 2;
  c.seed = 11;
  Loader first(*m.split.train, c, 0, {}, 0);
  for (int s = 0; s < 17; ++s) first.next();
  const auto rest = steps(*m.split.train, 3, 2, 23, first.state());
  EXPECT_EQ(rest, std::vector<std::vector<int>>(whole.begin() + 17, whole.end()));
}

TEST(Mixture, ZeroWeightPartIsNeverDrawn) {
  Mix m("1,0");
  for (const auto& step : steps(*m.split.train, 1, 10, 70))
    for (int t : step) EXPECT_LT(t, kB);
}

TEST(Mixture, BadWeightsAreOneLineNamingTheEntry) {
  const std::pair<std::string, std::string> cases[] = {
      {"a:0.5,b", "mixture entry 'b' has no weight"},
      {"a:0.5,b:x", "weight 'x' of 'b' must be a finite number >= 0"},
      {"a:-1,b:2", "weight '-1' of 'a' must be a finite number >= 0"},
      {"a:nan,b:1", "weight 'nan' of 'a'"},
      {"a:0,b:0", "the weights sum to 0"},
  };
  for (const auto& [spec, msg] : cases) {
    try {
      parse_mixture(spec);
      ADD_FAILURE() << spec << ": no error";
    } catch (const std::exception& e) {
      EXPECT_NE(std::string(e.what()).find(msg), std::string::npos) << e.what();
    }
  }
  EXPECT_TRUE(parse_mixture("synthetic:1000").empty());  // no ',': not a mixture
}

TEST(Mixture, TrainsFromTheCommandLine) {
  test::TempDir dir;
  write_windows(dir.file("a.bin"), 1, 600);
  write_windows(dir.file("b.bin"), 300, 600);
  const std::string data = dir.file("a.bin") + ":0.75," + dir.file("b.bin") + ":0.25";
  auto r = test::run_strata("train --data " + data +
                            " --vocab 1024 --layers 1 --dim 32 --heads 2 --seq 8 --batch 4 --steps 3 --eval-every 3 "
                            "--sample-tokens 0 --run-dir " + dir.file("run"));
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("mixture 0.75 x ("), std::string::npos) << r.out;
  auto bad = test::run_strata("train --steps 1 --data " + dir.file("a.bin") + ":0.5," + dir.file("b.bin") + ":-2");
  EXPECT_NE(bad.status, 0);
  EXPECT_NE(bad.out.find("weight '-2' of '" + dir.file("b.bin") + "' must be a finite number >= 0"), std::string::npos)
      << bad.out;
}

}  // namespace
}  // namespace strata::data
