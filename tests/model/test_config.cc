// GPT configurations, the parameter table and initialisation.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <set>

#include "core/error.h"
#include "model/gpt.h"

namespace strata::model {

static std::string error_of(const GPTConfig& c) {
  try {
    c.validate();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(GPTConfig, Presets) {
  const GPTConfig t = GPTConfig::preset("tiny");
  EXPECT_EQ(t.layers, 4);
  EXPECT_EQ(t.dim, 256);
  EXPECT_EQ(t.heads, 4);
  EXPECT_EQ(t.seq, 256);
  EXPECT_EQ(t.vocab, 256);
  const GPTConfig s = GPTConfig::preset("small");
  EXPECT_EQ(s.layers, 6);
  EXPECT_EQ(s.dim, 384);
  EXPECT_EQ(s.heads, 6);
  const GPTConfig g = GPTConfig::preset("gpt2");
  EXPECT_EQ(g.vocab, 50257);
  EXPECT_EQ(g.padded_vocab, 50304);
  // GPT-2 124M with the padded vocabulary, as llm.c counts it.
  EXPECT_EQ(g.num_params(), 124475904);
  try {
    GPTConfig::preset("huge");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tiny, small, gpt2"), std::string::npos);
  }
}

TEST(GPTConfig, ValidateNamesTheProblem) {
  GPTConfig c = GPTConfig::preset("tiny");
  EXPECT_EQ(error_of(c), "");
  c.heads = 3;
  EXPECT_EQ(error_of(c), "model dim 256 is not divisible by heads 3");
  c = GPTConfig::preset("tiny");
  c.layers = 0;
  EXPECT_EQ(error_of(c), "model layers must be positive (got 0)");
  c = GPTConfig::preset("tiny");
  c.seq = -4;
  EXPECT_EQ(error_of(c), "model seq must be positive (got -4)");
  c = GPTConfig::preset("tiny");
  c.padded_vocab = 100;
  EXPECT_EQ(error_of(c), "model padded vocab 100 is below vocab 256");
  c = GPTConfig::preset("tiny");
  c.dim = 0;
  EXPECT_NE(error_of(c), "");
  EXPECT_THROW(GPT(c, 1), Error);
}

TEST(ParamTable, CoversBufferInUnitOrder) {
  GPTConfig c{Arch::gpt2, 2, 16, 2, 0, 0, 8, 10, 16, 1e-5f, 10000.0f, true, {}, {}};
  GPT m(c, 1);
  const auto& t = m.param_table();
  ASSERT_EQ(t.size(), 2u + 12 * 2 + 2);
  int64_t off = 0;
  std::set<std::string> names;
  for (const ParamView& v : t) {
    EXPECT_EQ(v.offset, off) << v.name;
    const auto [b, e] = m.unit_range(v.unit);
    EXPECT_GE(v.offset, b);
    EXPECT_LE(v.offset + numel(v.shape), e);
    off += numel(v.shape);
    names.insert(v.name);
    // Decay on matrices and embeddings only.
    EXPECT_EQ(v.decay, v.shape.size() == 2) << v.name;
  }
  EXPECT_EQ(off, m.num_params());
  EXPECT_EQ(m.unit_range(0).first, 0);
  EXPECT_EQ(m.unit_range(m.num_units() - 1).second, m.num_params());
  for (int u = 1; u < m.num_units(); ++u)
    EXPECT_EQ(m.unit_range(u).first, m.unit_range(u - 1).second);
  for (const char* n :
       {"wte", "wpe", "h.0.ln_1.weight", "h.1.attn.c_attn.weight", "h.1.attn.c_proj.bias",
        "h.0.mlp.c_fc.weight", "h.1.mlp.c_proj.weight", "ln_f.bias"})
    EXPECT_TRUE(names.count(n)) << n;
  EXPECT_EQ(t[0].shape, (Shape{16, 16}));  // wte is (padded vocab, C)
  EXPECT_THROW(m.unit_range(m.num_units()), Error);
}

TEST(ParamTable, DecayRangesSplitAndMerge) {
  GPTConfig c{Arch::gpt2, 1, 8, 2, 0, 0, 4, 8, 8, 1e-5f, 10000.0f, true, {}, {}};
  GPT m(c, 1);
  // The whole buffer alternates decay / no-decay pieces; adjacent equal pieces merge
  // (wte + wpe are one decaying piece).
  auto all = decay_ranges(m.param_table(), 0, m.num_params());
  EXPECT_EQ(all.front().begin, 0);
  EXPECT_EQ(all.front().end, 8 * 8 + 4 * 8);
  EXPECT_TRUE(all.front().decay);
  for (size_t i = 1; i < all.size(); ++i) {
    EXPECT_EQ(all[i].begin, all[i - 1].end);
    EXPECT_NE(all[i].decay, all[i - 1].decay);
  }
  EXPECT_EQ(all.back().end, m.num_params());
  // A shard that starts inside wte and ends inside the first layer norm.
  auto part = decay_ranges(m.param_table(), 5, 8 * 8 + 4 * 8 + 3);
  ASSERT_EQ(part.size(), 2u);
  EXPECT_EQ(part[0].begin, 5);
  EXPECT_EQ(part[1].end, 8 * 8 + 4 * 8 + 3);
  EXPECT_FALSE(part[1].decay);
  EXPECT_TRUE(decay_ranges(m.param_table(), 10, 10).empty());
}

TEST(Init, Gpt2Statistics) {
  GPTConfig c = GPTConfig::preset("tiny");
  c.vocab = 200;  // rows 200..255 of wte are padding
  GPT m(c, 1);
  m.init(42);
  for (size_t i = 0; i < m.param_table().size(); ++i) {
    const ParamView& v = m.param_table()[i];
    const float* p = m.params() + v.offset;
    int64_t n = numel(v.shape);
    if (v.name == "wte") {
      for (int64_t e = 200 * 256; e < n; ++e) ASSERT_EQ(p[e], 0.0f);
      n = 200 * 256;
    }
    double s = 0, s2 = 0;
    for (int64_t e = 0; e < n; ++e) s += p[e], s2 += double(p[e]) * p[e];
    const double mean = s / n, sd = std::sqrt(s2 / n - mean * mean);
    if (v.shape.size() == 1) {
      const bool is_weight =
          v.name.find("ln_") != std::string::npos && v.name.find("weight") != std::string::npos;
      EXPECT_EQ(mean, is_weight ? 1.0 : 0.0) << v.name;
      EXPECT_EQ(sd, 0.0) << v.name;
    } else {
      const bool resid = v.name.find("c_proj.weight") != std::string::npos;
      const double want = resid ? 0.02 / std::sqrt(8.0) : 0.02;
      EXPECT_NEAR(sd, want, want * 0.05) << v.name;
      EXPECT_NEAR(mean, 0.0, want * 0.05) << v.name;
    }
  }
}

TEST(Init, IndependentOfLayoutAndSeeded) {
  GPTConfig c{Arch::gpt2, 2, 32, 4, 0, 0, 16, 50, 64, 1e-5f, 10000.0f, true, {}, {}};
  GPT a(c, 1), b(c, 1, /*allocate_state=*/false), d(c, 1);
  // b's units live in separate allocations, in reverse order in one buffer.
  std::vector<float> pb(a.num_params()), gb(a.num_params());
  int64_t at = 0;
  for (int u = b.num_units() - 1; u >= 0; --u) {
    const auto [lo, hi] = b.unit_range(u);
    b.bind_unit(u, pb.data() + at, gb.data() + at);
    at += hi - lo;
  }
  a.init(7);
  b.init(7);
  d.init(8);
  at = 0;
  for (int u = b.num_units() - 1; u >= 0; --u) {
    const auto [lo, hi] = b.unit_range(u);
    EXPECT_EQ(0, std::memcmp(a.params() + lo, pb.data() + at, sizeof(float) * (hi - lo))) << u;
    at += hi - lo;
  }
  EXPECT_NE(0, std::memcmp(a.params(), d.params(), sizeof(float) * a.num_params()));
  GPT unbound(c, 1, false);
  EXPECT_THROW(unbound.init(1), Error);
}

}  // namespace strata::model
