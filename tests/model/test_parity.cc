// strata's GPT against the PyTorch float64 reference in fixtures/parity_small.bin (written
// by tools/parity/gen_reference.py; see fixtures/README.md). No PyTorch needed here. Error
// measure: rel_err (parity_fixture.h).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <map>

#include "core/error.h"
#include "kernels/adamw.h"
#include "model/gpt.h"
#include "parity_fixture.h"
#include "support/temp_dir.h"

namespace strata::model {

namespace {

const std::string kPath = std::string(STRATA_SOURCE_DIR) + "/tests/model/fixtures/parity_small.bin";

GPTConfig config_of(const Fixture& f) {
  const auto& c = f.header["config"];
  GPTConfig g;  // GPT-2 blocks (named fields: the struct begins with the architecture)
  g.layers = c["layers"], g.dim = c["dim"], g.heads = c["heads"], g.seq = c["seq"];
  g.vocab = c["vocab"], g.padded_vocab = c["padded_vocab"];
  return g;
}

void load_params(GPT& m, const Fixture& f) {
  for (const ParamView& v : m.param_table()) {
    const auto p = f.get<float>("param." + v.name);
    ASSERT_EQ(int64_t(p.size()), numel(v.shape)) << v.name;
    std::memcpy(m.params() + v.offset, p.data(), p.size() * 4);
  }
}

}  // namespace

TEST(Parity, LossLogitsAndGradientsMatchPyTorch) {
  const Fixture f(kPath);
  const GPTConfig c = config_of(f);
  const int B = f.header["batch"], T = c.seq;
  GPT m(c, B);
  load_params(m, f);
  const auto tokens = f.get<int32_t>("tokens"), targets = f.get<int32_t>("targets");
  const auto weights = f.get<float>("weights");
  m.zero_grads();
  const double loss = m.forward(tokens.data(), targets.data(), weights.data(), B, T);
  const double ref = f.header["loss_sum"];
  EXPECT_LT(std::fabs(loss - ref) / std::fabs(ref), 1e-5) << loss << " vs " << ref;
  const double logit_err = rel_err(m.logits(nullptr, 0, 0), f.get<float>("logits"));
  EXPECT_LT(logit_err, 1e-4);
  m.backward(float(1.0 / double(f.header["weight_sum"])));
  double worst = 0;
  std::string worst_name;
  for (const ParamView& v : m.param_table()) {
    const double e = rel_err(m.grads() + v.offset, f.get<float>("grad." + v.name));
    EXPECT_LT(e, 1e-4) << v.name;
    if (e > worst) worst = e, worst_name = v.name;
  }
  std::printf("parity: loss rel err %.2e, logits %.2e, worst gradient %.2e (%s)\n",
              std::fabs(loss - ref) / std::fabs(ref), logit_err, worst, worst_name.c_str());
}

TEST(Parity, TenAdamWStepsMatchPyTorch) {
  const Fixture f(kPath);
  const GPTConfig c = config_of(f);
  const int B = f.header["batch"], T = c.seq;
  GPT m(c, B);
  load_params(m, f);
  const auto tokens = f.get<int32_t>("tokens"), targets = f.get<int32_t>("targets");
  const auto weights = f.get<float>("weights");
  const double wsum = f.header["weight_sum"];
  const auto ref = f.header["step_losses"].get<std::vector<double>>();
  const auto ref_norm = f.header["step_grad_norms"].get<std::vector<double>>();
  std::vector<float> mom(m.num_params()), var(m.num_params());
  const auto ranges = decay_ranges(m.param_table(), 0, m.num_params());
  double worst = 0;
  for (size_t s = 0; s < ref.size(); ++s) {
    m.zero_grads();
    const double loss = m.forward(tokens.data(), targets.data(), weights.data(), B, T) / wsum;
    m.backward(float(1.0 / wsum));
    const double sumsq = kernels::sum_squares(m.grads(), m.num_params());
    EXPECT_NEAR(std::sqrt(sumsq), ref_norm[s], 1e-4 * ref_norm[s]) << "step " << s;
    kernels::AdamWStep st;
    st.lr = f.header["lr"];
    st.beta1 = f.header["betas"][0];
    st.beta2 = f.header["betas"][1];
    st.eps = f.header["eps"];
    st.weight_decay = f.header["weight_decay"];
    st.t = int64_t(s) + 1;
    st.grad_scale = kernels::clip_scale(sumsq, f.header["grad_clip"]);
    for (const DecayRange& r : ranges)
      kernels::adamw_update(m.params() + r.begin, m.grads() + r.begin, mom.data() + r.begin,
                            var.data() + r.begin, r.end - r.begin, r.decay, st);
    EXPECT_NEAR(loss, ref[s], 1e-4) << "step " << s;
    worst = std::max(worst, std::fabs(loss - ref[s]));
  }
  std::printf("parity: 10 AdamW steps, worst |loss - torch| %.2e (losses %.4f .. %.4f)\n", worst,
              ref.front(), ref.back());
}

// The fixture's parameters are strata's own init for its seed: a change to the initialisation
// (or to the Philox/Box-Muller draw) shows up here first; regenerate the fixture then.
TEST(Parity, FixtureParamsAreStrataInit) {
  const Fixture f(kPath);
  GPT m(config_of(f), 1);
  m.init(f.header["seed"].get<uint64_t>());
  for (const ParamView& v : m.param_table()) {
    const auto p = f.get<float>("param." + v.name);
    EXPECT_EQ(0, std::memcmp(m.params() + v.offset, p.data(), p.size() * 4)) << v.name;
  }
}

TEST(Parity, CorruptFixtureIsAClearError) {
  strata::test::TempDir tmp;
  const std::string bad = tmp.file("bad_fixture.bin");
  {
    std::ofstream f(bad, std::ios::binary);
    f << "NOPE0000";
  }
  try {
    Fixture f(bad);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("bad magic"), std::string::npos);
  }
}

}  // namespace strata::model
