#include "train/generate.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "core/rng.h"

namespace strata::train {

std::vector<int32_t> generate(model::GPT& model, const std::vector<int32_t>& prompt, int n,
                              int window, int vocab, uint64_t seed, uint64_t stream,
                              float temperature) {
  STRATA_CHECK(!prompt.empty(), "generation needs a non-empty prompt");
  STRATA_CHECK(window > 0 && window <= model.config().seq, "generation window ", window,
               " outside [1, ", model.config().seq, "]");
  const int vp = model.config().padded_vocab;
  std::vector<int32_t> ctx = prompt, out;
  std::vector<double> p(vocab);
  Rng rng(seed, stream);
  for (int i = 0; i < n; ++i) {
    int t = std::min<int>(int(ctx.size()), window);
    const int32_t* tokens = ctx.data() + ctx.size() - t;
    const float* last = model.logits(tokens, 1, t) + int64_t(t - 1) * vp;  // (1, t, Vp) row t-1
    double mx = *std::max_element(last, last + vocab);
    double z = 0;
    for (int v = 0; v < vocab; ++v) z += (p[v] = std::exp((last[v] - mx) / temperature));
    double u = rng.uniform_double() * z, acc = 0;
    int pick = vocab - 1;
    for (int v = 0; v < vocab; ++v)
      if ((acc += p[v]) > u) {
        pick = v;
        break;
      }
    ctx.push_back(pick);
    out.push_back(pick);
  }
  return out;
}

std::string render_tokens(const std::vector<int32_t>& tokens, int vocab) {
  std::string s;
  for (int32_t t : tokens) {
    if (vocab > 256) {
      if (!s.empty()) s += ' ';
      s += std::to_string(t);
    } else if (t == '\n') {
      s += "\\n";
    } else if (t >= 32 && t < 127 && t != '\\') {
      s += char(t);
    } else {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", unsigned(t) & 0xff);
      s += buf;
    }
  }
  return s;
}

}  // namespace strata::train
