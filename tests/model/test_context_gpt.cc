// A context-parallel GPT (cp ranks as threads, each holding its chunks of the sequences)
// against one process: the same loss, the same logits, and gradients whose sum over the cp
// ranks is the one-process gradient, for ring (zigzag and contiguous) and Ulysses.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "comm/process_group.h"
#include "core/rng.h"
#include "model/context/context_comm.h"
#include "model/context/cp_cost.h"
#include "model/gpt.h"
#include "model/shard.h"

namespace strata::model {
namespace {

// 2 layers, width 24, 6 heads (Ulysses over 2 and 3 ranks), seq 48, vocab 50; local rows
// (2 x 48 / cp) are multiples of 16, so buffers carve without alignment padding.
const GPTConfig kCfg{2, 24, 6, 48, 50, 64};

double max_rel(const float* a, const float* b, int64_t n) {
  double d = 0, s = 0;
  for (int64_t i = 0; i < n; ++i) {
    d = std::max(d, std::fabs(double(a[i]) - b[i]));
    s = std::max(s, std::fabs(double(b[i])));
  }
  return d / s;
}

struct GptCase {
  int cp;
  CpOptions opt;
  DType compute;
};

class ContextGpt : public ::testing::TestWithParam<GptCase> {};

TEST_P(ContextGpt, MatchesOneProcess) {
  const GptCase p = GetParam();
  const int B = 2, T = 48;
  std::vector<int32_t> tokens, targets;
  std::vector<float> weights;
  Rng r(5, 0);
  for (int i = 0; i < B * T; ++i) {
    tokens.push_back(int32_t(r.below(kCfg.vocab)));
    targets.push_back(int32_t(r.below(kCfg.vocab)));
    weights.push_back(i % 7 == 2 ? 0.0f : 1.0f);
  }
  GPT one(kCfg, B, true, nullptr, p.compute);
  one.init(3);
  one.zero_grads();
  const double want = one.forward(tokens.data(), targets.data(), weights.data(), B, T);
  one.backward(0.01f);
  const std::vector<float> want_logits = [&] {
    const float* l = one.logits(tokens.data(), 1, 11);  // a prompt the layout must pad
    return std::vector<float>(l, l + 11 * kCfg.padded_vocab);
  }();

  std::vector<double> loss(size_t(p.cp));
  std::vector<float> grads(size_t(one.num_params()));
  std::vector<std::vector<float>> logits(size_t(p.cp));
  comm::run_threads(p.cp, [&](comm::ProcessGroup& pg) {
    ContextComm cc(pg, p.opt);
    GPT m(kCfg, B, true, nullptr, p.compute, &cc);
    m.init(3);
    m.zero_grads();
    loss[size_t(pg.rank())] = m.forward(tokens.data(), targets.data(), weights.data(), B, T);
    m.backward(0.01f);
    EXPECT_EQ(cc.buffer_bytes(), cp_buffer_bytes(p.opt.mode, p.cp, kCfg.layers, B, T / p.cp,
                                                 kCfg.dim, kCfg.heads));
    // What `strata plan --local --cp` and --max-activation-mb predict for this rank.
    EXPECT_EQ(m.activation_bytes() + cc.buffer_bytes(),
              cp_activation_bytes(tp_model(kCfg), 1, false, 0, B, p.compute == DType::bf16,
                                  p.opt.mode, p.cp, T));
    pg.all_reduce(m.grads(), size_t(m.num_params()));  // what dp_cp's reduction does
    if (pg.rank() == 0) std::copy(m.grads(), m.grads() + m.num_params(), grads.begin());
    const float* l = m.logits(tokens.data(), 1, 11);
    logits[size_t(pg.rank())].assign(l, l + 11 * kCfg.padded_vocab);
  });
  const double tol = p.compute == DType::bf16 ? 1e-3 : 2e-6;
  for (int c = 0; c < p.cp; ++c) {
    EXPECT_NEAR(loss[size_t(c)], want, tol * std::fabs(want)) << "cp rank " << c;
    EXPECT_LT(max_rel(logits[size_t(c)].data(), want_logits.data(), int64_t(want_logits.size())),
              p.compute == DType::bf16 ? 2e-2 : 2e-5);
  }
  EXPECT_LT(max_rel(grads.data(), one.grads(), one.num_params()),
            p.compute == DType::bf16 ? 3e-2 : 2e-5);
}

INSTANTIATE_TEST_SUITE_P(
    Modes, ContextGpt,
    ::testing::Values(GptCase{2, {CpMode::ring, CpChunks::zigzag}, DType::f32},
                      GptCase{2, {CpMode::ring, CpChunks::contiguous}, DType::f32},
                      GptCase{3, {CpMode::ring, CpChunks::zigzag}, DType::f32},
                      GptCase{2, {CpMode::ulysses, CpChunks::zigzag}, DType::f32},
                      GptCase{3, {CpMode::ulysses, CpChunks::contiguous}, DType::f32},
                      GptCase{2, {CpMode::ring, CpChunks::zigzag}, DType::bf16},
                      GptCase{2, {CpMode::ulysses, CpChunks::zigzag}, DType::bf16}),
    [](const auto& info) {
      const GptCase& c = info.param;
      return std::string(cp_mode_name(c.opt.mode)) + cp_chunks_name(c.opt.chunks) + "Cp" +
             std::to_string(c.cp) + (c.compute == DType::bf16 ? "Bf16" : "F32");
    });

}  // namespace
}  // namespace strata::model
