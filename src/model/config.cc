// GPT configurations and the flat parameter layout (the table of named views).
#include <cmath>

#include "core/error.h"
#include "model/gpt.h"
#include "model/shard.h"

namespace strata::model {

GPTConfig GPTConfig::preset(const std::string& name) {
  GPTConfig c;
  if (name == "tiny") {
    c.layers = 4, c.dim = 256, c.heads = 4, c.seq = 256, c.vocab = 256, c.padded_vocab = 256;
  } else if (name == "small") {
    c.layers = 6, c.dim = 384, c.heads = 6, c.seq = 256, c.vocab = 256, c.padded_vocab = 256;
  } else if (name == "gpt2") {
    c.layers = 12, c.dim = 768, c.heads = 12, c.seq = 1024, c.vocab = 50257;
    c.padded_vocab = 50304;
  } else {
    fail("unknown model '", name, "' (known: tiny, small, gpt2)");
  }
  return c;
}

Recompute parse_recompute_mode(const std::string& s) {
  if (s == "none") return Recompute::none;
  if (s == "selective") return Recompute::selective;
  if (s == "full") return Recompute::full;
  fail("--recompute ", s, ": must be none, selective or full");
}

const char* recompute_mode_name(Recompute r) {
  return r == Recompute::none ? "none" : r == Recompute::selective ? "selective" : "full";
}

void GPTConfig::validate() const {
  auto positive = [](const char* what, int v) {
    STRATA_CHECK(v > 0, "model ", what, " must be positive (got ", v, ")");
  };
  positive("layers", layers);
  positive("dim", dim);
  positive("heads", heads);
  positive("seq", seq);
  positive("vocab", vocab);
  STRATA_CHECK(dim % heads == 0, "model dim ", dim, " is not divisible by heads ", heads);
  STRATA_CHECK(padded_vocab >= vocab, "model padded vocab ", padded_vocab, " is below vocab ",
               vocab);
  const double n = double(padded_vocab + seq) * dim + double(layers) * (12.0 * dim * dim);
  moe.validate();
  STRATA_CHECK(recompute.layers >= 0, "--recompute-layers must not be negative (got ", recompute.layers, ")");
  STRATA_CHECK(recompute.layers == 0 || recompute.mode == Recompute::full, "--recompute-layers ",
               recompute.layers, " needs --recompute full");
  STRATA_CHECK(n < 4e9, "model has ~", n, " parameters: too many for one flat fp32 buffer");
  // Counted in double before any table or buffer is built: 2^31 - 1 experts once spent
  // minutes building before anything failed.
  const double experts = double(moe.moe_layers(layers)) * double(moe.experts) *
                         (8.0 * dim * dim + 6.0 * dim);
  STRATA_CHECK(n + experts < 4e9, "--experts ", moe.experts, ": the model would have ~",
               n + experts, " parameters (", moe.moe_layers(layers), " MoE blocks x ",
               moe.experts, " expert MLPs): too many for one flat fp32 buffer");
}

// Per block: ln_1 (2C) + c_attn (3C*C + 3C) + attn c_proj (C*C + C) + ln_2 (2C)
//            + c_fc (4C*C + 4C) + mlp c_proj (4C*C + C)  = 12 C^2 + 13 C
int64_t GPTConfig::num_params() const {
  const int64_t C = dim;
  // An MoE block replaces the MLP (8 C^2 + 5 C) by a router (E C) and E MLPs.
  const int64_t mlp = 8 * C * C + 5 * C, E = moe.experts;
  return int64_t(padded_vocab) * C + int64_t(seq) * C + int64_t(layers) * (12 * C * C + 13 * C) +
         2 * C + moe.moe_layers(layers) * (E * C + (E - 1) * mlp);
}

std::vector<ParamView> build_param_table(const GPTConfig& cfg, TpShard shard,
                                         ExpertShard experts) {
  std::vector<ParamView> t;
  for (ShardedView& v : build_sharded_table(cfg, shard, experts)) t.push_back(std::move(v.view));
  return t;
}

std::vector<DecayRange> decay_ranges(const std::vector<ParamView>& table, int64_t begin,
                                     int64_t end) {
  std::vector<DecayRange> out;
  for (const ParamView& v : table) {
    const int64_t b = std::max(begin, v.offset), e = std::min(end, v.offset + numel(v.shape));
    if (b >= e) continue;
    if (!out.empty() && out.back().decay == v.decay && out.back().end == b)
      out.back().end = e;
    else
      out.push_back({b, e, v.decay});
  }
  return out;
}

TensorLayout tensor_layout(const GPTConfig& cfg) { return tensor_layout(cfg, TpShard{}); }

}  // namespace strata::model
