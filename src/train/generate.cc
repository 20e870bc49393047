#include "train/generate.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "core/error.h"
#include "core/rng.h"
#include "model/sample.h"

namespace strata::train {

std::vector<int32_t> generate(model::GPT& model, const std::vector<int32_t>& prompt, int n,
                              int window, int vocab, uint64_t seed, uint64_t stream,
                              float temperature) {
  STRATA_CHECK(!prompt.empty(), "generation needs a non-empty prompt");
  STRATA_CHECK(window > 0 && window <= model.config().seq, "generation window ", window,
               " outside [1, ", model.config().seq, "]");
  const int vp = model.config().padded_vocab;
  std::vector<int32_t> ctx = prompt, out;
  const model::SampleConfig how{temperature, 0};
  Rng rng(seed, stream);
  for (int i = 0; i < n; ++i) {
    int t = std::min<int>(int(ctx.size()), window);
    const int32_t* tokens = ctx.data() + ctx.size() - t;
    const float* last = model.logits(tokens, 1, t) + int64_t(t - 1) * vp;  // (1, t, Vp) row t-1
    const int32_t pick = model::sample_token(last, vocab, how, rng);
    ctx.push_back(pick);
    out.push_back(pick);
  }
  return out;
}

// Length of the valid, printable UTF-8 sequence starting at tokens[i] (2-4 bytes), or 0.
static size_t utf8_length(const std::vector<int32_t>& tokens, size_t i) {
  const int32_t lead = tokens[i];
  size_t len = lead >= 0xC2 && lead <= 0xDF ? 2 : lead >= 0xE0 && lead <= 0xEF ? 3
             : lead >= 0xF0 && lead <= 0xF4 ? 4 : 0;
  if (len == 0 || i + len > tokens.size()) return 0;
  for (size_t k = 1; k < len; ++k)
    if (tokens[i + k] < 0x80 || tokens[i + k] > 0xBF) return 0;
  const int32_t second = tokens[i + 1];
  if ((lead == 0xE0 && second < 0xA0) || (lead == 0xED && second > 0x9F) ||  // overlong, surrogate
      (lead == 0xF0 && second < 0x90) || (lead == 0xF4 && second > 0x8F) ||  // overlong, > U+10FFFF
      (lead == 0xC2 && second < 0xA0))                                        // C1 controls
    return 0;
  return len;
}

std::string render_tokens(const std::vector<int32_t>& tokens, bool as_text) {
  std::string s;
  if (!as_text) {
    for (int32_t t : tokens) {
      if (!s.empty()) s += ' ';
      s += std::to_string(t);
    }
    return s;
  }
  for (size_t i = 0; i < tokens.size(); ++i) {
    const int32_t t = tokens[i];
    if (t == '\n') {
      s += "\\n";
    } else if (t == '\t') {
      s += "\\t";
    } else if (t == '\\') {
      s += "\\\\";
    } else if (t >= 32 && t < 127) {
      s += char(t);
    } else if (size_t len = t >= 0x80 && t < 256 ? utf8_length(tokens, i) : 0) {
      for (size_t k = 0; k < len; ++k) s += char(tokens[i + k]);
      i += len - 1;
    } else if (t >= 0 && t < 256) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", unsigned(t));
      s += buf;
    } else {
      s.append("<").append(std::to_string(t)).append(">");
    }
  }
  return s;
}

}  // namespace strata::train
