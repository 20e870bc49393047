// GPT forward/backward behaviour: hooks, rebinding, batch shapes, bad input, determinism.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstring>

#include "core/error.h"
#include "core/phase.h"
#include "core/rng.h"
#include "core/trace.h"
#include "kernels/adamw.h"
#include "model/gpt.h"

namespace strata::model {

namespace {

const GPTConfig kSmall{Arch::gpt2, 2, 32, 4, 0, 0, 16, 50, 64, 1e-5f, 10000.0f, true, {}, {}};

struct Batch {
  std::vector<int32_t> tokens, targets;
  std::vector<float> weights;
  Batch(const GPTConfig& c, int B, int T, uint64_t seed) {
    Rng r(seed, 0);
    for (int i = 0; i < B * T; ++i) {
      tokens.push_back(int32_t(r.below(c.vocab)));
      targets.push_back(int32_t(r.below(c.vocab)));
      weights.push_back(i % 5 == 3 ? 0.0f : 1.0f);
    }
  }
};

std::vector<float> grads_of(GPT& m) { return {m.grads(), m.grads() + m.num_params()}; }

double max_rel(const std::vector<float>& a, const std::vector<float>& b) {
  double d = 0, s = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    d = std::max(d, std::fabs(double(a[i]) - b[i]));
    s = std::max(s, std::fabs(double(b[i])));
  }
  return d / s;
}

}  // namespace

TEST(GPT, InitialLossIsLogVocab) {
  GPTConfig c = kSmall;
  GPT m(c, 4);
  m.init(1);
  Batch b(c, 4, 16, 3);
  const double loss = m.forward(b.tokens.data(), b.targets.data(), nullptr, 4, 16);
  EXPECT_NEAR(loss / 64, std::log(50.0), 0.1);
}

TEST(GPT, HooksRunInTheDocumentedOrder) {
  GPT m(kSmall, 2);
  m.init(1);
  std::string seq;
  m.set_hooks(
      {[&](int u, Pass p) { seq += (p == Pass::forward ? "F" : "B") + std::to_string(u) + "( "; },
       [&](int u, Pass p) {
         seq += ")" + std::string(p == Pass::forward ? "F" : "B") + std::to_string(u) + " ";
       }});
  const std::string fwd = "F0( )F0 F1( )F1 F2( )F2 F3( )F3 F0( )F0 ";
  const std::string bwd = "B0( B3( )B3 B2( )B2 B1( )B1 )B0 ";
  Batch b(kSmall, 2, 8, 1);
  for (int B : {2, 0}) {  // B = 0: the same sequence with no work
    seq.clear();
    m.zero_grads();
    const double loss = m.forward(b.tokens.data(), b.targets.data(), nullptr, B, 8);
    EXPECT_EQ(seq, fwd) << "B=" << B;
    seq.clear();
    m.backward(1.0f);
    EXPECT_EQ(seq, bwd) << "B=" << B;
    if (B == 0) {
      EXPECT_EQ(loss, 0.0);
      for (float g : grads_of(m)) ASSERT_EQ(g, 0.0f);
    }
  }
  seq.clear();
  m.logits(b.tokens.data(), 1, 8);
  EXPECT_EQ(seq, fwd);
}

TEST(GPT, PhaseAndTraceSpans) {
  GPT m(kSmall, 1);
  m.init(1);
  Batch b(kSmall, 1, 16, 2);
  std::vector<PhaseSnapshot> seen;
  m.set_hooks({[&](int, Pass) { seen.push_back(current_phase().get()); }, nullptr});
  tracer().enable(0);
  m.forward(b.tokens.data(), b.targets.data(), nullptr, 1, 16);
  m.backward(1.0f);
  // before-hooks: F embed, F L0, F L1, F ln_f, F logits, B logits, B ln_f, B L1, B L0
  ASSERT_EQ(seen.size(), 9u);
  EXPECT_EQ(seen[1].kind, PhaseKind::forward);
  EXPECT_EQ(seen[1].layer, 0);
  EXPECT_EQ(seen[2].layer, 1);
  EXPECT_EQ(seen[3].layer, -1);
  EXPECT_EQ(seen[7].kind, PhaseKind::backward);
  EXPECT_EQ(seen[7].layer, 1);
  EXPECT_EQ(seen[8].layer, 0);
  EXPECT_EQ(current_phase().get().kind, PhaseKind::idle);  // restored afterwards
  std::vector<std::string> names;
  for (const TraceEvent& e : tracer().events()) {
    EXPECT_EQ(e.cat, "compute");
    names.push_back(e.name);
  }
  const std::vector<std::string> want = {
      "forward embed",   "forward L0",    "forward L1",  "forward ln_f", "forward logits",
      "backward logits", "backward ln_f", "backward L1", "backward L0",  "backward embed"};
  EXPECT_EQ(names, want);
}

TEST(GPT, ReboundUnitsGiveIdenticalResults) {
  GPT a(kSmall, 2), b(kSmall, 2, /*allocate_state=*/false);
  a.init(5);
  std::vector<std::vector<float>> p(b.num_units()), g(b.num_units());
  for (int u = 0; u < b.num_units(); ++u) {
    const auto [lo, hi] = b.unit_range(u);
    p[u].assign(a.params() + lo, a.params() + hi);
    g[u].assign(hi - lo, 0.0f);
    b.bind_unit(u, p[u].data(), g[u].data());
  }
  Batch x(kSmall, 2, 16, 4);
  a.zero_grads();
  const double la = a.forward(x.tokens.data(), x.targets.data(), x.weights.data(), 2, 16);
  a.backward(0.01f);
  const double lb = b.forward(x.tokens.data(), x.targets.data(), x.weights.data(), 2, 16);
  b.backward(0.01f);
  EXPECT_EQ(la, lb);
  for (int u = 0; u < b.num_units(); ++u) {
    const auto [lo, hi] = b.unit_range(u);
    EXPECT_EQ(0, std::memcmp(a.grads() + lo, g[u].data(), sizeof(float) * (hi - lo))) << u;
  }
  GPT unbound(kSmall, 1, false);
  EXPECT_THROW(unbound.forward(x.tokens.data(), x.targets.data(), nullptr, 1, 4), Error);
}

TEST(GPT, GradientsAccumulateAcrossMicroBatches) {
  GPT m(kSmall, 2);
  m.init(3);
  Batch x(kSmall, 2, 16, 5);
  m.zero_grads();
  m.forward(x.tokens.data(), x.targets.data(), nullptr, 2, 16);
  m.backward(0.5f);
  const auto once = grads_of(m);
  m.forward(x.tokens.data(), x.targets.data(), nullptr, 2, 16);
  m.backward(0.5f);
  const auto twice = grads_of(m);
  // Equal up to rounding: BLAS adds into the existing gradient block by block.
  std::vector<float> doubled(once.size());
  for (size_t i = 0; i < once.size(); ++i) doubled[i] = 2 * once[i];
  EXPECT_LT(max_rel(twice, doubled), 1e-6);
  EXPECT_GT(max_rel(once, doubled), 0.4);
}

TEST(GPT, SmallerShapesAndZeroWeightsMatchUnpadded) {
  // A batch of 2 where sample 1 has weight 0 must give the loss and gradients of sample 0
  // alone (up to rounding: GEMM shapes differ).
  GPT m(kSmall, 3);
  m.init(9);
  Batch x(kSmall, 2, 12, 6);
  std::vector<float> w(24, 1.0f);
  for (int i = 12; i < 24; ++i) w[i] = 0.0f;
  m.zero_grads();
  const double l2 = m.forward(x.tokens.data(), x.targets.data(), w.data(), 2, 12);
  m.backward(1.0f);
  const auto g2 = grads_of(m);
  m.zero_grads();
  const double l1 = m.forward(x.tokens.data(), x.targets.data(), nullptr, 1, 12);
  m.backward(1.0f);
  const auto g1 = grads_of(m);
  EXPECT_NEAR(l2, l1, 1e-5 * l1);
  EXPECT_LT(max_rel(g2, g1), 1e-5);
}

TEST(GPT, LogitsMatchForwardAndCausal) {
  GPT m(kSmall, 1);
  m.init(2);
  Batch x(kSmall, 1, 16, 8);
  const int Vp = kSmall.padded_vocab;
  std::vector<float> full(m.logits(x.tokens.data(), 1, 16),
                          m.logits(x.tokens.data(), 1, 16) + 16 * Vp);
  // A prefix sees the same logits for its positions (causal attention).
  const float* prefix = m.logits(x.tokens.data(), 1, 5);
  for (int i = 0; i < 5 * Vp; ++i) ASSERT_NEAR(prefix[i], full[i], 1e-5f);
  m.forward(x.tokens.data(), x.targets.data(), nullptr, 1, 16);
  const float* last = m.logits(nullptr, 0, 0);
  for (int i = 0; i < 16 * Vp; ++i) ASSERT_NEAR(last[i], full[i], 1e-6f);
  m.backward(1.0f);
  EXPECT_THROW(m.logits(nullptr, 0, 0), Error);
}

TEST(GPT, BadInputIsAnError) {
  GPT m(kSmall, 2);
  m.init(1);
  Batch x(kSmall, 2, 16, 1);
  auto message = [&](auto f) {
    try {
      f();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_EQ(message([&] { m.forward(x.tokens.data(), x.targets.data(), nullptr, 3, 16); }),
            "batch 3 outside [0, 2] (the model's maximum micro-batch)");
  EXPECT_EQ(message([&] { m.forward(x.tokens.data(), x.targets.data(), nullptr, 1, 17); }),
            "sequence length 17 outside [1, 16]");
  EXPECT_EQ(message([&] { m.forward(x.tokens.data(), x.targets.data(), nullptr, 1, 0); }),
            "sequence length 0 outside [1, 16]");
  x.tokens[3] = 50;
  EXPECT_EQ(message([&] { m.forward(x.tokens.data(), x.targets.data(), nullptr, 1, 16); }),
            "token 50 at position 3 outside [0, 50)");
  x.tokens[3] = 0;
  x.targets[5] = -1;
  EXPECT_EQ(message([&] { m.forward(x.tokens.data(), x.targets.data(), nullptr, 1, 16); }),
            "target -1 at position 5 outside [0, 50)");
  GPT fresh(kSmall, 1);
  EXPECT_NE(message([&] { fresh.backward(1.0f); }), "");
  EXPECT_THROW(m.bind_unit(99, nullptr, nullptr), Error);
}

// Several AdamW steps from the same seed give the same loss bits.
static std::vector<double> train_losses(int steps) {
  GPT m(kSmall, 2);
  m.init(11);
  std::vector<float> mom(m.num_params()), var(m.num_params());
  std::vector<double> losses;
  for (int s = 1; s <= steps; ++s) {
    Batch x(kSmall, 2, 16, 100 + s);
    m.zero_grads();
    losses.push_back(m.forward(x.tokens.data(), x.targets.data(), x.weights.data(), 2, 16));
    m.backward(1.0f / 32);
    kernels::AdamWStep st;
    st.lr = 1e-3f;
    st.weight_decay = 0.1f;
    st.t = s;
    for (const auto& r : decay_ranges(m.param_table(), 0, m.num_params()))
      kernels::adamw_update(m.params() + r.begin, m.grads() + r.begin, mom.data() + r.begin,
                            var.data() + r.begin, r.end - r.begin, r.decay, st);
  }
  return losses;
}

// Every kernel, GEMMs included, fixes its reduction order independently of the team size,
// so the loss and gradients are the same bits at 1, 2 and 3 threads.
TEST(GPT, SameBitsForAnyThreadCount) {
  // large enough for the threaded GEMM path
  const GPTConfig c{Arch::gpt2, 1, 128, 2, 0, 0, 64, 128, 128, 1e-5f, 10000.0f, true, {}, {}};
  for (DType compute : {DType::f32, DType::bf16}) {
    std::vector<std::vector<float>> grads;
    std::vector<double> losses;
    const int saved = omp_get_max_threads();
    for (int threads : {1, 2, 3}) {
      omp_set_num_threads(threads);
      GPT m(c, 4, true, nullptr, compute);
      m.init(21);
      Batch x(c, 4, 64, 22);
      m.zero_grads();
      losses.push_back(m.forward(x.tokens.data(), x.targets.data(), x.weights.data(), 4, 64));
      m.backward(1.0f / 256);
      grads.push_back(grads_of(m));
    }
    omp_set_num_threads(saved);
    for (int i = 1; i < 3; ++i) {
      EXPECT_EQ(losses[i], losses[0]) << i + 1 << " threads, " << dtype_name(compute);
      EXPECT_EQ(0, std::memcmp(grads[i].data(), grads[0].data(), grads[0].size() * 4))
          << i + 1 << " threads, " << dtype_name(compute);
    }
  }
}

// bf16 compute (bf16 matmul inputs, fp32 accumulation, bf16-stored matmul inputs, qkv, attention
// output and pre-GELU activations)
// against fp32 on the same weights and batch: the loss within 1%, every gradient within a
// few percent of its tensor's scale; and the activations take the expected bytes.
TEST(GPT, Bf16ComputeTracksFp32) {
  const GPTConfig c{Arch::gpt2, 2, 128, 4, 0, 0, 64, 128, 128, 1e-5f, 10000.0f, true, {}, {}};
  const int B = 4, T = 64;
  const int64_t N = int64_t(B) * T;
  std::vector<double> loss;
  std::vector<std::vector<float>> grads;
  std::vector<int64_t> act_bytes;
  for (DType compute : {DType::f32, DType::bf16}) {
    const int64_t before = memory_tracker().current(MemCategory::activations);
    GPT m(c, B, true, nullptr, compute);
    act_bytes.push_back(memory_tracker().current(MemCategory::activations) - before);
    m.init(31);
    Batch x(c, B, T, 32);
    m.zero_grads();
    loss.push_back(m.forward(x.tokens.data(), x.targets.data(), x.weights.data(), B, T));
    m.backward(1.0f / float(N));
    grads.push_back(grads_of(m));
  }
  EXPECT_NEAR(loss[1] / loss[0], 1.0, 1e-2);
  EXPECT_NE(loss[1], loss[0]);  // bf16 really ran
  const std::vector<ParamView> table = build_param_table(c);
  for (const ParamView& v : table) {
    const int64_t n = numel(v.shape);
    const std::vector<float> a(grads[0].begin() + v.offset, grads[0].begin() + v.offset + n),
        b(grads[1].begin() + v.offset, grads[1].begin() + v.offset + n);
    double diff = 0, scale = 0;
    for (int64_t i = 0; i < n; ++i) {
      diff = std::max(diff, std::fabs(double(a[i]) - b[i]));
      scale = std::max(scale, std::fabs(double(a[i])));
    }
    if (scale > 0) {
      EXPECT_LT(diff / scale, 0.05) << v.name;
    }
  }
  // ln1, ln2 (C each), qkv (3C), atty (C), fc and gelu (4C each) per layer and ln_f (C) move
  // from 4 to 2 bytes; each piece is padded to 64 bytes.
  const int64_t saved = (int64_t(c.layers) * 14 + 1) * N * c.dim * 2;
  EXPECT_NEAR(double(act_bytes[0] - act_bytes[1]), double(saved), 64.0 * (14 * c.layers + 1));
}

TEST(GPT, SameSeedSameLossBits) {
  const auto a = train_losses(5), b = train_losses(5);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i], b[i]) << i;
  EXPECT_LT(a.back(), a.front());  // and it learns (same batch distribution)
}

}  // namespace strata::model
