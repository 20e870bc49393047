// Text generation to show what a model has learnt: ancestral sampling, one token at a time.
// Each new token runs the model over the last `window` tokens (no KV cache: sampling is a
// few dozen tokens for display, so O(n · window) forward work is acceptable).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "model/gpt.h"

namespace strata::train {

// Appends n tokens to `prompt`, drawn by model::sample_token (model/sample.h) from
// softmax(logits / temperature) over the first `vocab` logits, with Rng(seed, stream).
// Returns only the new tokens. Deterministic.
std::vector<int32_t> generate(model::GPT& model, const std::vector<int32_t>& prompt, int n,
                              int window, int vocab, uint64_t seed, uint64_t stream,
                              float temperature = 1.0f);

// How a sample is shown. as_text (the bytes of a text file): the text itself, UTF-8
// sequences included, with only what would not print escaped -- \n, \t, \\, \xNN for other
// control bytes and bytes that are not valid UTF-8, <ID> for an id above 255. Otherwise
// (the synthetic corpus, .bin tokens): space-separated token ids. Always valid UTF-8.
std::string render_tokens(const std::vector<int32_t>& tokens, bool as_text);

}  // namespace strata::train
