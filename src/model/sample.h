// Drawing a token from a row of logits: the one sampler of strata, for the samples a training
// run prints (train/generate.h) and for RLHF rollouts (rlhf/sampler.h).
//
// A token is drawn from softmax(z / temperature) over the first `vocab` logits z of the row,
// restricted to the top_k largest (0: all); temperature 0 is greedy (the first maximum). The
// weights are computed in double from the row's maximum, and one uniform draw of `rng` picks
// the token by the running sum in vocabulary order: the same token for the same row and
// generator state, on any rank and thread count.
#pragma once
#include <cstdint>

#include "core/rng.h"

namespace strata::model {

struct SampleConfig {
  float temperature = 1.0f;
  int top_k = 0;
};

int32_t sample_token(const float* z, int vocab, const SampleConfig& s, Rng& rng);

}  // namespace strata::model
