// The router's jitter noise of a block with token ids (model/expert/moe.h, TokenIds) is a
// function of (seed, block, epoch, sample, position, column) only: the same token gets the
// same noise whichever rows share its forward, in whatever order, under a context-parallel
// split of its sequence, and however many forwards ran before; another epoch, seed or
// block draws other noise. Dropless with no aux loss, a token's output depends on its own
// noise alone, so outputs compare bit for bit.
#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#include "core/rng.h"
#include "gtest/gtest.h"
#include "model/expert/moe.h"
#include "model/gpt.h"

namespace strata::model::expert::test_moe_jitter {
namespace {

constexpr int C = 6, E = 4;  // C not a multiple of 4: the last Philox word group is partial
constexpr int kSamples = 3, kT = 4;

struct Block {
  std::vector<float> router, x;
  std::vector<std::vector<float>> w[4];
  MoEWeights W;
};

Block random_block(uint64_t seed) {
  Rng rng(seed, 0);
  auto fill = [&](size_t n, float s) {
    std::vector<float> v(n);
    for (float& x : v) x = s * (2.0f * rng.uniform() - 1.0f);
    return v;
  };
  Block b;
  b.router = fill(E * C, 2.0f);
  b.x = fill(kSamples * kT * C, 1.0f);
  for (int e = 0; e < E; ++e) {
    b.w[0].push_back(fill(4 * C * C, 0.5f));
    b.w[1].push_back(fill(4 * C, 0.1f));
    b.w[2].push_back(fill(4 * C * C, 0.5f));
    b.w[3].push_back(fill(C, 0.1f));
  }
  b.W.router = b.router.data();
  for (int e = 0; e < E; ++e)
    b.W.experts.push_back({b.w[0][e].data(), b.w[1][e].data(), b.w[2][e].data(), b.w[3][e].data()});
  return b;
}

MoEConfig jitter_config() {
  MoEConfig cfg;
  cfg.experts = E;
  cfg.top_k = 2;
  cfg.dropless = true;
  cfg.aux_coef = 0;
  cfg.z_coef = 0;
  cfg.jitter = 0.3f;
  return cfg;
}

std::unique_ptr<MoE> fresh(uint64_t seed = 7, int layers = 1) {
  auto m = std::make_unique<MoE>(jitter_config(), layers, C);
  m->set_seed(seed);
  return m;
}

// out (rows of x, C) of block `block` for the rows `x` (B items of T local rows), named by ids.
std::vector<float> run(MoE& moe, const Block& b, const std::vector<float>& x, TokenIds ids,
                       int block = 0) {
  const int64_t N = int64_t(ids.B) * ids.T;
  std::vector<float> out(size_t(N * C), 0.0f);
  moe.forward(block, x.data(), nullptr, out.data(), N, b.W, false, &ids);
  return out;
}

TEST(MoEJitter, NoiseIsKeyedByTheTokenNotByItsForward) {
  const Block b = random_block(3);
  const std::vector<int64_t> samples = {40, 7, 1234567890123};
  auto m = fresh();
  const std::vector<float> whole = run(*m, b, b.x, {samples.data(), nullptr, kSamples, kT, 2});
  EXPECT_EQ(run(*m, b, b.x, {samples.data(), nullptr, kSamples, kT, 2}), whole)
      << "a second forward of the same tokens draws the same noise";
  // One sample per forward, in reverse order, in a fresh block after unrelated forwards.
  auto q = fresh();
  run(*q, b, b.x, {samples.data(), nullptr, kSamples, kT, 0});
  for (int s = kSamples - 1; s >= 0; --s) {
    const std::vector<float> x(b.x.begin() + s * kT * C, b.x.begin() + (s + 1) * kT * C);
    const std::vector<float> got = run(*q, b, x, {&samples[size_t(s)], nullptr, 1, kT, 2});
    EXPECT_EQ(got, std::vector<float>(whole.begin() + s * kT * C, whole.begin() + (s + 1) * kT * C))
        << "sample " << s;
  }
  // Context parallelism: a rank holds positions {3, 0} of every sequence (a zigzag-like
  // order), as local rows 0 and 1 of each batch item.
  const std::vector<int> pos = {3, 0};
  std::vector<float> x;
  for (int s = 0; s < kSamples; ++s)
    for (int p : pos)
      x.insert(x.end(), b.x.begin() + (s * kT + p) * C, b.x.begin() + (s * kT + p + 1) * C);
  const std::vector<float> got = run(*fresh(), b, x, {samples.data(), pos.data(), kSamples, 2, 2});
  for (int s = 0; s < kSamples; ++s)
    for (int t = 0; t < 2; ++t)
      for (int c = 0; c < C; ++c)
        EXPECT_EQ(got[size_t((s * 2 + t) * C + c)],
                  whole[size_t((s * kT + pos[size_t(t)]) * C + c)])
            << "sample " << s << " position " << pos[size_t(t)];
}

TEST(MoEJitter, EpochSeedAndBlockDrawOtherNoiseAndEvalNone) {
  const Block b = random_block(5);
  const std::vector<int64_t> samples = {0, 1, -1};  // the last a padding row
  const TokenIds ids{samples.data(), nullptr, kSamples, kT, 0};
  const std::vector<float> e0 = run(*fresh(), b, b.x, ids);
  TokenIds next = ids;
  next.epoch = 1;
  EXPECT_NE(run(*fresh(), b, b.x, next), e0);
  EXPECT_NE(run(*fresh(/*seed=*/8), b, b.x, ids), e0);
  EXPECT_NE(run(*fresh(7, /*layers=*/2), b, b.x, ids, /*block=*/1), e0);
  // Every token's noise differs from the others' (no two rows share a key).
  auto noisy = fresh();
  const std::vector<int64_t> same = {9, 9, 9};
  std::vector<float> x(b.x.size());
  for (int r = 0; r < kSamples * kT; ++r)
    std::memcpy(x.data() + r * C, b.x.data(), sizeof(float) * C);
  const std::vector<float> rows = run(*noisy, b, x, {same.data(), nullptr, 1, kSamples * kT, 0});
  for (int r = 1; r < kSamples * kT; ++r)
    EXPECT_NE(std::vector<float>(rows.begin() + r * C, rows.begin() + (r + 1) * C),
              std::vector<float>(rows.begin(), rows.begin() + C))
        << "position " << r;
  // Eval draws none: the jitter-free block's output.
  auto eval = fresh();
  eval->set_training(false);
  MoEConfig plain = jitter_config();
  plain.jitter = 0;
  MoE p(plain, 1, C);
  EXPECT_EQ(run(*eval, b, b.x, ids), run(p, b, b.x, ids));
  EXPECT_NE(run(p, b, b.x, ids), e0);
}

TEST(MoEJitter, IdsMustCoverTheRows) {
  const Block b = random_block(6);
  const std::vector<int64_t> samples = {0, 1};
  auto m = fresh();
  std::vector<float> out(b.x.size(), 0.0f);
  const TokenIds ids{samples.data(), nullptr, 2, kT, 0};  // 8 rows named, 12 given
  EXPECT_THROW(m->forward(0, b.x.data(), nullptr, out.data(), kSamples * kT, b.W, false, &ids),
               std::exception);
}

// Through the model: GPT::forward hands its SampleIds to every MoE block, so two sequences
// in one forward or in two forwards of one row each, in either order, give the same losses
// (a forward without ids draws fresh noise instead), and logits (inference) draw none.
TEST(MoEJitter, GptForwardPassesTheSampleIdsAndInferenceDrawsNone) {
  GPTConfig cfg;
  cfg.layers = 2, cfg.dim = 16, cfg.heads = 2, cfg.seq = 8, cfg.vocab = 32, cfg.padded_vocab = 64;
  cfg.moe = jitter_config();
  GPT gpt(cfg, 2);
  gpt.init(11);
  std::vector<int32_t> tok(16), tgt(16);
  for (int i = 0; i < 16; ++i) tok[size_t(i)] = (i * 5) % 32, tgt[size_t(i)] = (i * 5 + 1) % 32;
  const std::vector<int64_t> ids = {17, 3};
  const double both = gpt.forward(tok.data(), tgt.data(), nullptr, 2, 8, {ids.data(), 1});
  const double second = gpt.forward(tok.data() + 8, tgt.data() + 8, nullptr, 1, 8, {&ids[1], 1});
  const double first = gpt.forward(tok.data(), tgt.data(), nullptr, 1, 8, {&ids[0], 1});
  EXPECT_NEAR(first + second, both, 1e-9 * std::abs(both));
  EXPECT_EQ(gpt.forward(tok.data(), tgt.data(), nullptr, 1, 8, {&ids[0], 1}), first);
  EXPECT_NE(gpt.forward(tok.data(), tgt.data(), nullptr, 1, 8, {&ids[0], 2}), first);
  EXPECT_NE(gpt.forward(tok.data(), tgt.data(), nullptr, 1, 8),
            gpt.forward(tok.data(), tgt.data(), nullptr, 1, 8));
  GPTConfig plain_cfg = cfg;
  plain_cfg.moe.jitter = 0;
  GPT plain(plain_cfg, 2);
  plain.init(11);
  const std::vector<float> want(plain.logits(tok.data(), 1, 8),
                                plain.logits(tok.data(), 1, 8) + 8 * 64);
  const float* got = gpt.logits(tok.data(), 1, 8);
  for (size_t i = 0; i < want.size(); ++i) ASSERT_EQ(got[i], want[i]) << i;
  EXPECT_TRUE(gpt.moe()->training()) << "logits leave training mode as they found it";
}

}  // namespace
}  // namespace strata::model::expert::test_moe_jitter
