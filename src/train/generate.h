// Text generation to show what a model has learnt: ancestral sampling, one token at a time.
// Each new token runs the model over the last `window` tokens (no KV cache: sampling is a
// few dozen tokens for display, so O(n · window) forward work is acceptable).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "model/gpt.h"

namespace strata::train {

// Appends n tokens to `prompt`, drawn from softmax(logits / temperature) over the first
// `vocab` logits, with Rng(seed, stream). Returns only the new tokens. Deterministic.
std::vector<int32_t> generate(model::GPT& model, const std::vector<int32_t>& prompt, int n,
                              int window, int vocab, uint64_t seed, uint64_t stream,
                              float temperature = 1.0f);

// Tokens as text when they are bytes (vocab <= 256; non-printable bytes escaped as \xNN),
// otherwise as space-separated ids.
std::string render_tokens(const std::vector<int32_t>& tokens, int vocab);

}  // namespace strata::train
