// Tiny models for the RLHF tests: a 2-layer GPT with a 40-token vocabulary, GPT-2 initialised
// and then scaled, so that its logits spread far enough for greedy decoding to be stable
// under fp32 rounding.
#pragma once
#include <vector>

#include "model/gpt.h"

namespace strata::rlhf::test {

inline model::GPTConfig tiny_config(int seq = 32) {
  model::GPTConfig c;
  c.layers = 2, c.dim = 32, c.heads = 4, c.seq = seq, c.vocab = 40, c.padded_vocab = 64;
  return c;
}

inline std::vector<float> tiny_params(const model::GPTConfig& cfg, uint64_t seed, float scale = 1.0f) {
  model::GPT m(cfg, 1);
  m.init(seed);
  std::vector<float> p(m.params(), m.params() + m.num_params());
  if (scale != 1.0f)
    for (const model::ParamView& v : m.param_table())
      if (v.shape.size() == 2)
        for (int64_t i = 0; i < numel(v.shape); ++i) p[size_t(v.offset + i)] *= scale;
  return p;
}

}  // namespace strata::rlhf::test
