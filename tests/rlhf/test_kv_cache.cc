// KV-cache decoding against the whole-prefix forward: the same greedy tokens, logits within
// fp32 rounding at every step; and the cache's own limits.
#include <gtest/gtest.h>

#include <cmath>

#include "core/error.h"
#include "rlhf/kv_cache.h"
#include "rlhf/sampler.h"
#include "tiny.h"

namespace strata::rlhf {
namespace {

// The cached logits of every decoding step against the whole-prefix forward of the model.
void expect_cached_logits_match(const model::GPTConfig& cfg, float scale_params);

TEST(KvCache, LogitsMatchTheFullForwardAtEveryStep) {
  expect_cached_logits_match(test::tiny_config(), 6.0f);
}

// Llama blocks (RoPE at each position, RMSNorm, SwiGLU, lm_head) with grouped-query attention at
// kv-heads = heads, heads/2 and 1; the cache holds NKV/NH of multi-head attention's bytes.
TEST(KvCache, LlamaBlocksMatchTheFullForwardAtEveryKvHeadCount) {
  int64_t mha_bytes = 0;
  for (int kv : {4, 2, 1}) {
    model::GPTConfig cfg = test::tiny_config();
    cfg.arch = model::Arch::llama;
    cfg.kv_heads = kv;
    cfg.ffn = 48;
    cfg.tie_embeddings = false;
    expect_cached_logits_match(cfg, 3.0f);
    if (HasFailure()) return;
    KvDecoder dec(cfg, 2);
    if (kv == 4) mha_bytes = dec.cache_bytes();
    EXPECT_EQ(dec.cache_bytes() * 4, mha_bytes * kv) << kv;
  }
}

void expect_cached_logits_match(const model::GPTConfig& cfg, float scale_params) {
  std::vector<float> params = test::tiny_params(cfg, 7, scale_params);
  const int B = 3, P = 5, R = 20, Vp = cfg.padded_vocab;
  model::GPT full(cfg, B);
  std::copy(params.begin(), params.end(), full.params());
  KvDecoder dec(cfg, B);
  dec.bind(params.data());
  std::vector<int32_t> seq(size_t(B) * (P + R));
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < P + R; ++t) seq[size_t(b) * (P + R) + t] = (b * 7 + t * 13 + 3) % cfg.vocab;
  std::vector<int32_t> prompt(size_t(B) * P), next(static_cast<size_t>(B));
  for (int b = 0; b < B; ++b)
    std::copy(&seq[size_t(b) * (P + R)], &seq[size_t(b) * (P + R) + P], &prompt[size_t(b) * P]);
  const float* z = dec.prefill(prompt.data(), B, P);
  double worst = 0, scale = 0;
  for (int i = 0;; ++i) {
    const int T = P + i;  // the decoder's logits are those of position T - 1
    std::vector<int32_t> ctx(size_t(B) * T);
    for (int b = 0; b < B; ++b)
      std::copy(&seq[size_t(b) * (P + R)], &seq[size_t(b) * (P + R) + T], &ctx[size_t(b) * T]);
    const float* ref = full.logits(ctx.data(), B, T);
    for (int b = 0; b < B; ++b)
      for (int v = 0; v < cfg.vocab; ++v) {
        const double r = ref[(int64_t(b) * T + T - 1) * Vp + v];
        worst = std::max(worst, std::abs(double(z[int64_t(b) * Vp + v]) - r));
        scale = std::max(scale, std::abs(r));
      }
    if (i == R) break;
    for (int b = 0; b < B; ++b) next[size_t(b)] = seq[size_t(b) * (P + R) + T];
    z = dec.step(next.data());
  }
  EXPECT_GT(scale, 1.0);  // logits large enough for the comparison to mean something
  EXPECT_LT(worst, 2e-5 * scale) << "largest |cached - full| " << worst << " of logits up to " << scale;
}

TEST(KvCache, GreedyTokensEqualTheUncachedPath) {
  const model::GPTConfig cfg = test::tiny_config();
  std::vector<float> params = test::tiny_params(cfg, 11, 6.0f);
  const int B = 4, P = 3, R = 25;
  std::vector<int32_t> prompts(size_t(B) * P);
  for (size_t i = 0; i < prompts.size(); ++i) prompts[i] = int32_t((i * 17 + 5) % cfg.vocab);
  std::vector<uint64_t> streams = {0, 1, 2, 3};
  std::vector<int32_t> a(size_t(B) * R), b(size_t(B) * R);
  KvDecoder dec(cfg, B);
  dec.bind(params.data());
  model::GPT full(cfg, B);
  std::copy(params.begin(), params.end(), full.params());
  SampleConfig greedy{0.0f, 0};
  generate_cached(dec, cfg, prompts.data(), B, P, R, greedy, 1, streams.data(), a.data());
  generate_uncached(full, prompts.data(), B, P, R, greedy, 1, streams.data(), b.data());
  EXPECT_EQ(a, b);
  // Sampling draws each sequence from its own stream: the same tokens in a batch of one.
  SampleConfig warm{1.0f, 5};
  generate_cached(dec, cfg, prompts.data(), B, P, R, warm, 9, streams.data(), a.data());
  std::vector<int32_t> one(static_cast<size_t>(R));
  generate_cached(dec, cfg, prompts.data() + 2 * P, 1, P, R, warm, 9, streams.data() + 2, one.data());
  EXPECT_EQ(std::vector<int32_t>(a.begin() + 2 * R, a.begin() + 3 * R), one);
  for (int32_t t : a) EXPECT_TRUE(t >= 0 && t < cfg.vocab);
}

TEST(KvCache, RefusesPositionsBeyondTheContext) {
  const model::GPTConfig cfg = test::tiny_config(8);
  std::vector<float> params = test::tiny_params(cfg, 3);
  KvDecoder dec(cfg, 1);
  dec.bind(params.data());
  std::vector<int32_t> p = {1, 2, 3, 4, 5, 6, 7, 8};
  dec.prefill(p.data(), 1, 8);
  EXPECT_THROW(dec.step(p.data()), Error);
  EXPECT_THROW(dec.prefill(p.data(), 2, 4), Error);  // batch above the cache's
  std::vector<int32_t> out(8);
  std::vector<uint64_t> s = {0};
  try {
    generate_cached(dec, cfg, p.data(), 1, 4, 5, {}, 1, s.data(), out.data());
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--response-len 5"), std::string::npos) << e.what();
  }
}

TEST(KvCache, TimingRunsBothPathsOnTheSameTokens) {
  // The timing itself is bench/rlhf's business; here: both paths, the same tokens, the size.
  const model::GPTConfig cfg = test::tiny_config(64);
  std::vector<float> params = test::tiny_params(cfg, 5);
  const GenerationTiming t = time_generation(cfg, params.data(), 4, 4, 56, {0.0f, 0}, 1, 1);
  EXPECT_TRUE(t.same_tokens);
  EXPECT_EQ(t.kv_cache_bytes, int64_t(2) * cfg.layers * 4 * cfg.seq * cfg.dim * 4);
}

}  // namespace
}  // namespace strata::rlhf
