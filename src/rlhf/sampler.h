// Batched sampling of responses for RLHF rollouts: B prompts of P tokens, R new tokens
// each, through the KV cache (kv_cache.h), or without it (the whole prefix again for every
// new token, GPT::logits: what the cache saves, and the reference of the equality tests).
//
// Each token is drawn by model::sample_token (model/sample.h: temperature, top-k, greedy).
// Sequence b draws from Rng(seed, streams[b]): its tokens do not depend on the batch it is
// generated in, or on the rank that generates it.
#pragma once
#include <cstdint>

#include "core/rng.h"
#include "model/gpt.h"
#include "model/sample.h"
#include "rlhf/kv_cache.h"

namespace strata::rlhf {

using model::SampleConfig;
using model::sample_token;

// responses (B, R) after prompts (B, P); decoder bound to the policy's parameters.
// logps (B, R), when not null: the behaviour policy's log-probability of each sampled token,
// log softmax(z / temperature) over the whole vocabulary (top-k does not truncate it), from
// the decoder's logits: what an off-policy update's importance ratio divides by.
// Throws naming --response-len when P + R exceeds the model's context.
void generate_cached(KvDecoder& dec, const model::GPTConfig& cfg, const int32_t* prompts, int B,
                     int P, int R, const SampleConfig& s, uint64_t seed, const uint64_t* streams,
                     int32_t* responses, float* logps = nullptr);
// The same without a cache: model.logits over (B, P + i) for the i-th new token.
void generate_uncached(model::GPT& model, const int32_t* prompts, int B, int P, int R,
                       const SampleConfig& s, uint64_t seed, const uint64_t* streams,
                       int32_t* responses);


// Timing of both paths on the same prompts and streams: tokens/s of each (B·R new tokens
// over the median of `repeats` interleaved runs), by wall clock and by the process's CPU time
// (what a loaded machine does not distort, for one thread), and whether they produced the
// same tokens.
struct GenerationTiming {
  double cached_tokens_per_s = 0, uncached_tokens_per_s = 0;
  double cached_cpu_tokens_per_s = 0, uncached_cpu_tokens_per_s = 0;
  bool same_tokens = false;
  int64_t kv_cache_bytes = 0;
};
GenerationTiming time_generation(const model::GPTConfig& cfg, const float* params, int B, int P,
                                 int R, const SampleConfig& s, uint64_t seed, int repeats);

}  // namespace strata::rlhf
