// Muon's arithmetic (kernels/muon.h) against the float64 PyTorch reference written from the
// published algorithm (tools/parity/gen_muon_reference.py, fixtures/muon_reference.bin), and
// which parameters take Muon and which rank orthogonalises each (parallel/muon.h).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "cost/flops.h"
#include "kernels/gemm.h"
#include "kernels/muon.h"
#include "model/model_part.h"
#include "model/parity_fixture.h"
#include "parallel/muon.h"
#include "harness.h"

namespace strata {
namespace {

const std::string kPath = std::string(STRATA_SOURCE_DIR) + "/tests/parallel/fixtures/muon_reference.bin";
const std::vector<std::pair<int, int>> kShapes = {{16, 24}, {24, 16}, {12, 12}};

kernels::MuonStep fixture_step(const model::Fixture& f) {
  kernels::MuonStep s;
  s.lr = f.header["lr"].get<float>();
  s.momentum = f.header["mu"].get<float>();
  s.weight_decay = f.header["weight_decay"].get<float>();
  s.lr_scale = f.header["lr_scale"].get<float>();
  s.grad_scale = f.header["grad_scale"].get<float>();
  s.ns_steps = f.header["ns_steps"].get<int>();
  return s;
}

// Newton-Schulz on the reference's own input equals the float64 iteration within fp32 error,
// wide, tall and square; with a coefficient changed it would not (the test can fail).
TEST(Muon, NewtonSchulzEqualsTheFloat64Reference) {
  const model::Fixture f(kPath);
  for (size_t i = 0; i < kShapes.size(); ++i) {
    const auto [rows, cols] = kShapes[i];
    std::vector<float> x = f.get<float>(cat("m", i, ".u0"));
    const std::vector<float> want = f.get<float>(cat("m", i, ".ns0"));
    std::vector<float> scratch(size_t(kernels::ns5_scratch_elems(rows, cols)));
    kernels::orthogonalise_ns5(x.data(), rows, cols, 5, scratch.data());
    EXPECT_LT(model::rel_err(x.data(), want), 2e-6) << rows << "x" << cols;
    std::vector<float> four = f.get<float>(cat("m", i, ".u0"));
    kernels::orthogonalise_ns5(four.data(), rows, cols, 4, scratch.data());
    EXPECT_GT(model::rel_err(four.data(), want), 1e-3) << "one iteration fewer is another matrix";
  }
}

// What the quintic promises: the singular values of its output lie near 1 (Jordan's
// coefficients trade exactness for speed: roughly [0.7, 1.2]), so X Xᵀ is near the identity.
TEST(Muon, NewtonSchulzOutputIsNearlyOrthogonal) {
  const model::Fixture f(kPath);
  const auto [rows, cols] = kShapes[0];  // wide: X Xᵀ is rows x rows
  std::vector<float> x = f.get<float>("m0.u0");
  std::vector<float> scratch(size_t(kernels::ns5_scratch_elems(rows, cols)));
  kernels::orthogonalise_ns5(x.data(), rows, cols, 5, scratch.data());
  std::vector<float> g(size_t(rows * rows));
  kernels::gemm(kernels::Op::N, kernels::Op::T, rows, rows, cols, 1.0f, x.data(), cols, x.data(), cols, 0.0f,
                g.data(), rows);
  for (int i = 0; i < rows; ++i) {
    EXPECT_GT(g[size_t(i * rows + i)], 0.45f) << i;  // squared singular values in ~[0.5, 1.45]
    EXPECT_LT(g[size_t(i * rows + i)], 1.45f) << i;
  }
}

// Three whole steps (momentum, Nesterov, Newton-Schulz, RMS matching, decoupled decay) equal
// the reference's parameters after each step.
TEST(Muon, ThreeStepsEqualThePyTorchReference) {
  const model::Fixture f(kPath);
  const kernels::MuonStep s = fixture_step(f);
  for (size_t i = 0; i < kShapes.size(); ++i) {
    const auto [rows, cols] = kShapes[i];
    const size_t n = size_t(rows * cols);
    std::vector<float> p = f.get<float>(cat("m", i, ".p0")), m(n, 0.0f), u(n);
    std::vector<float> scratch(size_t(kernels::ns5_scratch_elems(rows, cols)));
    for (int t = 0; t < 3; ++t) {
      const std::vector<float> g = f.get<float>(cat("m", i, ".g", t));
      kernels::muon_momentum(g.data(), m.data(), u.data(), int64_t(n), s);
      kernels::orthogonalise_ns5(u.data(), rows, cols, s.ns_steps, scratch.data());
      kernels::muon_apply(p.data(), u.data(), int64_t(n), rows, cols, true, s);
      const std::vector<float> want = f.get<float>(cat("m", i, ".p", t + 1));
      EXPECT_LT(model::rel_err(p.data(), want), 1e-6) << rows << "x" << cols << " step " << t + 1;
    }
  }
}

// The split of the table: GPT-2's fused c_attn is three matrices; embeddings, norms, biases
// and routers stay with AdamW.
TEST(Muon, MatricesOfTheBlocksOnly) {
  model::GPTConfig cfg = ptest::small_config();  // 2 blocks of dim 64
  const auto table = model::build_param_table(cfg);
  const auto ms = parallel::muon_matrices(table);
  ASSERT_EQ(ms.size(), 2u * 6);  // q, k, v, attn c_proj, c_fc, mlp c_proj per block
  const int64_t C = 64;
  EXPECT_EQ(ms[0].rows, C);
  EXPECT_EQ(ms[0].cols, C);
  EXPECT_EQ(ms[1].begin, ms[0].begin + C * C);
  EXPECT_EQ(ms[4].rows, 4 * C);  // c_fc (4C, C)
  EXPECT_EQ(ms[5].cols, 4 * C);  // c_proj (C, 4C)
  EXPECT_EQ(parallel::muon_numel(table), 2 * 12 * C * C);
  for (const model::ParamView& v : table)
    EXPECT_EQ(parallel::is_muon_view(v), v.shape.size() == 2 && v.name.rfind("h.", 0) == 0) << v.name;
  cfg.moe.experts = 4;
  int routers = 0;
  for (const model::ParamView& v : model::build_param_table(cfg)) {
    if (v.name.find("router") == std::string::npos) continue;
    EXPECT_FALSE(parallel::is_muon_view(v)) << v.name;
    ++routers;
  }
  EXPECT_GT(routers, 0);
}

// Owners: every rank gets matrices, the costliest first to the least loaded, the same list on
// every call; with one rank, rank 0 owns all.
TEST(Muon, OwnersBalanceTheNewtonSchulzFlops) {
  model::GPTConfig cfg = ptest::small_config();
  cfg.layers = 4;
  const auto ms = parallel::muon_matrices(model::build_param_table(cfg));
  for (int ranks : {1, 2, 3, 4}) {
    const std::vector<int> owner = parallel::muon_owners(ms, ranks, 5);
    EXPECT_EQ(owner, parallel::muon_owners(ms, ranks, 5));
    std::vector<double> load(size_t(ranks), 0);
    for (size_t i = 0; i < ms.size(); ++i) load[size_t(owner[i])] += cost::newton_schulz_flops(ms[i].rows, ms[i].cols, 5);
    const double most = *std::max_element(load.begin(), load.end());
    const double least = *std::min_element(load.begin(), load.end());
    double biggest = 0;
    for (const auto& m : ms) biggest = std::max(biggest, cost::newton_schulz_flops(m.rows, m.cols, 5));
    EXPECT_GT(least, 0) << ranks;
    EXPECT_LE(most - least, biggest) << ranks;  // greedy: within one matrix of even
  }
}

}  // namespace
}  // namespace strata
