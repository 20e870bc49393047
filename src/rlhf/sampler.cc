// Batched rollout sampling (sampler.h).
#include "rlhf/sampler.h"

#include <algorithm>
#include <chrono>
#include <ctime>
#include <cmath>
#include <vector>

#include "core/error.h"
#include "core/stats.h"
#include "kernels/crossentropy.h"

namespace strata::rlhf {

static void check_lengths(const model::GPTConfig& cfg, int P, int R) {
  STRATA_CHECK(P >= 1, "--prompt-len must be >= 1 (got ", P, ")");
  STRATA_CHECK(R >= 1, "--response-len must be >= 1 (got ", R, ")");
  STRATA_CHECK(P + R <= cfg.seq, "--response-len ", R, " with --prompt-len ", P, " needs ", P + R,
               " positions, beyond the model's context of ", cfg.seq);
}

void generate_cached(KvDecoder& dec, const model::GPTConfig& cfg, const int32_t* prompts, int B,
                     int P, int R, const SampleConfig& s, uint64_t seed, const uint64_t* streams,
                     int32_t* responses, float* logps) {
  check_lengths(cfg, P, R);
  STRATA_CHECK(!logps || s.temperature > 0, "behaviour log-probabilities need a temperature > 0");
  std::vector<Rng> rngs;
  for (int b = 0; b < B; ++b) rngs.emplace_back(seed, streams[b]);
  std::vector<int32_t> next(static_cast<size_t>(B));
  const int64_t Vp = cfg.padded_vocab;
  const float* z = dec.prefill(prompts, B, P);
  std::vector<float> lse(static_cast<size_t>(B)), lp(static_cast<size_t>(B));
  for (int i = 0; i < R; ++i) {
    for (int b = 0; b < B; ++b) {
      next[size_t(b)] = sample_token(z + b * Vp, cfg.vocab, s, rngs[size_t(b)]);
      responses[int64_t(b) * R + i] = next[size_t(b)];
    }
    if (logps) {
      kernels::log_softmax_forward(lse.data(), lp.data(), nullptr, z, next.data(), B, cfg.vocab, Vp, s.temperature);
      for (int b = 0; b < B; ++b) logps[int64_t(b) * R + i] = lp[size_t(b)];
    }
    if (i + 1 < R) z = dec.step(next.data());
  }
}

void generate_uncached(model::GPT& model, const int32_t* prompts, int B, int P, int R,
                       const SampleConfig& s, uint64_t seed, const uint64_t* streams,
                       int32_t* responses) {
  const model::GPTConfig& cfg = model.config();
  check_lengths(cfg, P, R);
  std::vector<Rng> rngs;
  for (int b = 0; b < B; ++b) rngs.emplace_back(seed, streams[b]);
  const int64_t Vp = cfg.padded_vocab;
  std::vector<int32_t> ctx(size_t(B) * (P + R));
  for (int i = 0; i < R; ++i) {
    const int T = P + i;
    for (int b = 0; b < B; ++b) {
      std::copy(prompts + int64_t(b) * P, prompts + int64_t(b + 1) * P, ctx.begin() + int64_t(b) * T);
      std::copy(responses + int64_t(b) * R, responses + int64_t(b) * R + i,
                ctx.begin() + int64_t(b) * T + P);
    }
    const float* z = model.logits(ctx.data(), B, T);
    for (int b = 0; b < B; ++b)
      responses[int64_t(b) * R + i] =
          sample_token(z + (int64_t(b) * T + T - 1) * Vp, cfg.vocab, s, rngs[size_t(b)]);
  }
}

}  // namespace strata::rlhf

namespace strata::rlhf {

GenerationTiming time_generation(const model::GPTConfig& cfg, const float* params, int B, int P,
                                 int R, const SampleConfig& s, uint64_t seed, int repeats) {
  check_lengths(cfg, P, R);
  STRATA_CHECK(B >= 1, "--batch must be >= 1 (got ", B, ")");
  KvDecoder dec(cfg, B);
  dec.bind(params);
  model::GPT model(cfg, B, false);
  for (int u = 0; u < model.num_units(); ++u)
    model.bind_unit(u, const_cast<float*>(params) + model.unit_range(u).first, nullptr);
  std::vector<int32_t> prompts(size_t(B) * P), a(size_t(B) * R), b(size_t(B) * R);
  std::vector<uint64_t> streams(static_cast<size_t>(B));
  Rng rng(seed, 0x7E57);
  for (auto& t : prompts) t = int32_t(rng.below(uint64_t(cfg.vocab)));
  for (int i = 0; i < B; ++i) streams[size_t(i)] = uint64_t(i);
  auto cpu_now = [] {
    timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
  };
  auto wall_now = [] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
  };
  std::vector<double> tc, tu, cc, cu;
  for (int r = 0; r < std::max(1, repeats); ++r) {  // interleaved, so load changes hit both
    double w0 = wall_now(), c0 = cpu_now();
    generate_cached(dec, cfg, prompts.data(), B, P, R, s, seed, streams.data(), a.data());
    tc.push_back(wall_now() - w0);
    cc.push_back(cpu_now() - c0);
    w0 = wall_now(), c0 = cpu_now();
    generate_uncached(model, prompts.data(), B, P, R, s, seed, streams.data(), b.data());
    tu.push_back(wall_now() - w0);
    cu.push_back(cpu_now() - c0);
  }
  auto rate = [&](const std::vector<double>& t) {
    return double(B) * R / median(t);
  };
  GenerationTiming out;
  out.cached_tokens_per_s = rate(tc);
  out.uncached_tokens_per_s = rate(tu);
  out.cached_cpu_tokens_per_s = rate(cc);
  out.uncached_cpu_tokens_per_s = rate(cu);
  out.same_tokens = a == b;
  out.kv_cache_bytes = dec.cache_bytes();
  return out;
}

}  // namespace strata::rlhf
