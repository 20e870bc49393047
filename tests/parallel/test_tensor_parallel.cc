// Tensor parallelism (with and without sequence parallelism) trains the one-process model:
// losses, gradient norms and final weights (gathered from every tp rank's pieces) match the
// plain reference loop for tp x dp x ZeRO stage x precision (bf16 layouts: bf16 matmuls on
// the tp ranks and in the reference alike). The CI subset below covers each
// dimension and the combinations most likely to break, and a fixed sample of the layouts
// it does not list runs beside it; STRATA_TP_SWEEP=1 runs the whole
// product tp {1,2,3,4} x dp {1,2} x zero 0-3 x fp32/bf16 (docs/tensor_parallel.md).
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <set>
#include <string>

#include "comm/process_group.h"
#include "core/rng.h"
#include "cost/comm.h"
#include "gtest/gtest.h"
#include "harness.h"
#include "kernels/crossentropy.h"
#include "model/shard.h"
#include "model/tensor/collectives.h"
#include "model/tensor/vocab.h"
#include "parallel/mesh.h"

namespace strata::ptest {
namespace {

using parallel::DataParallelOptions;
using cost::Precision;

// heads 4 (tp 1, 2, 4) on the harness's model; heads 6 and a vocabulary of 61 padded to 64
// (which 3 does not divide) for tp 3.
model::GPTConfig config_for(int tp) {
  model::GPTConfig c = small_config();
  if (tp == 3) c.dim = 48, c.heads = 6, c.vocab = 61, c.padded_vocab = 64;
  return c;
}

// The matmul precision of a layout: bf16 layouts compute in bf16 (tp ranks and reference).
DType compute_of(Precision p) { return p == Precision::bf16 ? DType::bf16 : DType::f32; }

const RunResult& reference(int tp, Precision p) {
  static std::map<std::pair<int, Precision>, RunResult> cache;
  const std::pair<int, Precision> key{tp == 3 ? 3 : 1, p};
  auto it = cache.find(key);
  if (it == cache.end()) {
    RunSpec s;
    s.model = config_for(tp);
    s.compute = compute_of(p);
    it = cache.emplace(key, run_reference(s)).first;
  }
  return it->second;
}

struct Case {
  int tp, dp, stage;
  Precision precision;
  bool sp = true;
  int accum = 1;
};

std::string name(const Case& c) {
  return "tp" + std::to_string(c.tp) + "_dp" + std::to_string(c.dp) + "_zero" +
         std::to_string(c.stage) + (c.precision == Precision::bf16 ? "_bf16" : "_fp32") +
         (c.sp ? "" : "_nosp") + (c.accum > 1 ? "_accum" + std::to_string(c.accum) : "");
}

// The run of a case: the model for its tp, several gradient buckets on the small model.
RunResult run_case(const Case& c, int steps = 20, int64_t* tp_bytes = nullptr) {
  RunSpec s;
  s.model = config_for(c.tp);
  s.accum = c.accum;
  s.steps = steps;
  s.compute = compute_of(c.precision);
  TpRun run;
  run.tp = c.tp;
  run.dp = c.dp;
  run.sp = c.sp;
  run.opts.stage = c.stage;
  run.opts.precision = c.precision;
  run.opts.bucket_mb = 0.02;
  return run_tensor_parallel(s, run, tp_bytes);
}

void check_case(const Case& c) {
  const RunResult got = run_case(c);
  const RunResult& ref = reference(c.tp, c.precision);
  ASSERT_EQ(got.losses.size(), ref.losses.size());
  EXPECT_LT(ref.losses.back(), ref.losses.front() - 0.1) << "the reference does not learn";
  const double dl = max_abs_diff(got.losses, ref.losses);
  const double dw = max_abs_diff(got.params, ref.params);
  // The first step's gradient norm: same weights on both sides, so only the passes differ.
  const double dg = std::fabs(got.grad_norms[0] - ref.grad_norms[0]) / ref.grad_norms[0];
  if (getenv("STRATA_TEST_VERBOSE"))
    printf("%s: loss diff %.3g, weight diff %.3g, first gradient norm rel. diff %.3g\n",
           name(c).c_str(), dl, dw, dg);
  // Weights: 1e-4 (fp32), the bound of the data-parallel tests. Plain data parallelism
  // already differs by 2.8e-5 (fp32, dp 2) from the reference after 20 AdamW steps: m/sqrt(v)
  // turns reduction-order rounding of near-zero gradients into lr-sized steps
  // (docs/tensor_parallel.md). Under bf16 compute that rounding crosses bf16 steps of the
  // activations, and the engine on one rank (tp 1, dp 1) is already 5.5e-2 from the bf16
  // reference (lr 3e-3: 20 steps of lr is 6e-2); tp layouts measure 3.9e-2 .. 5.8e-2, so the
  // bound is 8e-2, with the loss (1e-2) and the first gradient norm (1e-3 relative; measured
  // <= 1.7e-4) as the checks that the passes agree.
  if (c.precision == Precision::fp32) {
    EXPECT_LE(dl, 1e-5) << name(c);
    EXPECT_LE(dw, 1e-4) << name(c);
    for (size_t i = 0; i < ref.grad_norms.size(); ++i)
      EXPECT_NEAR(got.grad_norms[i], ref.grad_norms[i], 1e-5 * ref.grad_norms[i]) << "step " << i;
  } else {
    EXPECT_LE(dl, 1e-2) << name(c);
    EXPECT_LE(dg, 1e-3) << name(c);
    EXPECT_LE(dw, 8e-2) << name(c);
    EXPECT_LT(got.losses.back(), got.losses.front() - 0.1);
  }
}

class TensorParallel : public ::testing::TestWithParam<Case> {};

TEST_P(TensorParallel, MatchesSingleProcess) { check_case(GetParam()); }

const Case kCi[] = {
    {2, 1, 0, Precision::fp32},        {2, 1, 0, Precision::fp32, false},
    {4, 1, 2, Precision::fp32},        {3, 1, 1, Precision::fp32},
    {2, 2, 1, Precision::fp32},        {2, 2, 3, Precision::fp32, true, 2},
    {2, 2, 3, Precision::bf16},        {3, 1, 0, Precision::bf16, false},
};
INSTANTIATE_TEST_SUITE_P(Ci, TensorParallel, ::testing::ValuesIn(kCi),
                         [](const auto& info) { return name(info.param); });

// A fixed sample of the sweep's layouts that kCi does not list, so CI reaches tp 1 and tp 4
// under dp 2, bf16 under tp 4 and ZeRO 2, tp 3 under dp 2 and no-sp under dp 2 (each axis
// value at least once; the test below checks both properties). The whole product stays
// behind STRATA_TP_SWEEP=1.
const Case kSample[] = {
    {1, 2, 0, Precision::fp32},        {1, 1, 3, Precision::bf16},
    {4, 2, 1, Precision::fp32},        {4, 1, 3, Precision::bf16, false},
    {3, 2, 2, Precision::fp32},        {3, 2, 3, Precision::bf16},
    {2, 2, 2, Precision::bf16, false}, {2, 1, 1, Precision::fp32, false},
    {4, 2, 0, Precision::bf16},
};
INSTANTIATE_TEST_SUITE_P(Sample, TensorParallel, ::testing::ValuesIn(kSample),
                         [](const auto& info) { return name(info.param); });

// The sample adds layouts (none already in kCi) and, with kCi, names every axis value.
TEST(TensorParallelSweep, SampleCoversEveryAxisValue) {
  std::set<std::string> ci;
  for (const Case& c : kCi) ci.insert(name(c));
  std::set<int> tps, dps, stages;
  std::set<bool> bf16s, sps;
  for (const Case& c : kSample) {
    EXPECT_FALSE(ci.count(name(c))) << name(c) << " is already a CI layout";
    tps.insert(c.tp), dps.insert(c.dp), stages.insert(c.stage), sps.insert(c.sp);
    bf16s.insert(c.precision == Precision::bf16);
  }
  EXPECT_EQ(tps, (std::set<int>{1, 2, 3, 4}));
  EXPECT_EQ(dps, (std::set<int>{1, 2}));
  EXPECT_EQ(stages, (std::set<int>{0, 1, 2, 3}));
  EXPECT_EQ(bf16s, (std::set<bool>{false, true}));
  EXPECT_EQ(sps, (std::set<bool>{false, true}));
}

// The whole product, behind STRATA_TP_SWEEP=1 (about 2 minutes on 2 cores).
TEST(TensorParallelSweep, EveryLayout) {
  if (!getenv("STRATA_TP_SWEEP")) GTEST_SKIP() << "set STRATA_TP_SWEEP=1 for the full sweep";
  for (int tp : {1, 2, 3, 4})
    for (int dp : {1, 2})
      for (int stage = 0; stage <= 3; ++stage)
        for (Precision p : {Precision::fp32, Precision::bf16})
          for (bool sp : {true, false}) {
            if (tp == 1 && !sp) continue;
            SCOPED_TRACE(name({tp, dp, stage, p, sp}));
            check_case({tp, dp, stage, p, sp});
          }
}

// Vocab-parallel cross-entropy equals the full softmax, including a padded vocabulary that
// the rank count does not divide (Vp 70 over 3 and 4 ranks) with padding columns holding
// large values that must get no probability.
TEST(VocabParallel, CrossEntropyEqualsFullSoftmax) {
  const int64_t N = 9;
  const int V = 67, Vp = 70;
  std::vector<float> logits(N * Vp), weights(N, 1.0f);
  std::vector<int32_t> targets(N);
  Rng rng(3, 0);
  for (float& x : logits) x = 4.0f * (rng.uniform() - 0.5f);
  for (int64_t n = 0; n < N; ++n) {
    targets[size_t(n)] = int32_t(rng.below(V));
    for (int v = V; v < Vp; ++v) logits[size_t(n * Vp + v)] = 50.0f;  // padding: ignored
  }
  weights[4] = 0.0f;
  std::vector<float> ref_losses(N), ref_lse(N), ref_grad = logits;
  const double ref_sum = kernels::crossentropy_forward(ref_losses.data(), ref_lse.data(),
                                                       logits.data(), targets.data(),
                                                       weights.data(), N, V, Vp);
  kernels::crossentropy_backward(ref_grad.data(), ref_lse.data(), targets.data(), weights.data(),
                                 0.5f, N, V, Vp);
  for (int T : {2, 3, 4}) {
    comm::run_threads(T, [&](comm::ProcessGroup& pg) {
      model::TensorComm tc(pg, true);
      const model::VocabSlice vs = model::vocab_slice(Vp, {T, pg.rank()});
      std::vector<float> mine(N * vs.size()), losses(N), lse(N), stats(2 * N);
      for (int64_t n = 0; n < N; ++n)
        for (int64_t j = 0; j < vs.size(); ++j)
          mine[size_t(n * vs.size() + j)] = logits[size_t(n * Vp + vs.begin + j)];
      const double sum = model::tensor::crossentropy_forward(
          tc, losses.data(), lse.data(), mine.data(), targets.data(), weights.data(), stats.data(),
          N, vs.begin, vs.size(), V);
      EXPECT_NEAR(sum, ref_sum, 1e-5 * std::abs(ref_sum)) << "tp " << T;
      for (int64_t n = 0; n < N; ++n) EXPECT_NEAR(losses[n], ref_losses[n], 1e-5) << "row " << n;
      model::tensor::crossentropy_backward(mine.data(), lse.data(), targets.data(), weights.data(),
                                           0.5f, N, vs.begin, vs.size(), V);
      for (int64_t n = 0; n < N; ++n)
        for (int64_t j = 0; j < vs.size(); ++j)
          EXPECT_NEAR(mine[size_t(n * vs.size() + j)], ref_grad[size_t(n * Vp + vs.begin + j)],
                      1e-6)
              << "tp " << T << " row " << n << " column " << vs.begin + j;
    });
  }
}

// Every rank's pieces tile its flat buffer without gaps, and the primary pieces of the tp
// ranks cover every global tensor exactly once.
// Every rank's pieces tile its local buffer, and the primary ones cover each global element
// exactly once: GPT-2 at tp 1-3, and Llama blocks whose key/value heads the tp ranks split
// (kv 4 at tp 2, 4) or share (kv 1 at tp 2, 4; kv 2 at tp 4: each head on tp/kv ranks, its
// first holder primary).
void expect_pieces_tile_and_cover(const model::GPTConfig& c, int T) {
  const std::vector<model::ParamView> table = model::build_param_table(c);
  std::vector<int> covered(size_t(c.num_params()), 0);
  for (int r = 0; r < T; ++r) {
    const TensorLayout layout = model::tensor_layout(c, {T, r});
    int64_t at = 0;
    for (const TensorPiece& p : layout) {
      ASSERT_EQ(p.local_offset, at) << p.name;
      at += p.numel();
      if (!p.primary) continue;
      for (const model::ParamView& v : table) {
        if (v.name != p.name) continue;
        for (int64_t q = 0; q < p.numel(); ++q) {
          int64_t e = p.offsets[0] + q;
          if (p.extents.size() == 2)
            e = (p.offsets[0] + q / p.extents[1]) * p.global_shape[1] + p.offsets[1] +
                q % p.extents[1];
          ++covered[size_t(v.offset + e)];
        }
      }
    }
    EXPECT_EQ(at, model::local_num_params(c, {T, r})) << "tp " << T << " rank " << r;
  }
  for (size_t i = 0; i < covered.size(); ++i)
    ASSERT_EQ(covered[i], 1) << "element " << i << " at tp " << T << ", kv " << c.kv();
}

model::GPTConfig llama_config(int kv_heads, int heads = 4) {
  model::GPTConfig c = small_config();
  c.arch = model::Arch::llama;
  c.heads = heads;
  c.dim = 16 * heads;
  c.kv_heads = kv_heads;
  c.ffn = 96;
  c.validate();
  return c;
}

TEST(TensorLayoutTest, PiecesTileLocalAndCoverGlobalOnce) {
  for (int T : {1, 2, 3}) expect_pieces_tile_and_cover(config_for(3), T);
  for (int kv : {1, 2, 4})
    for (int T : {1, 2, 4}) expect_pieces_tile_and_cover(llama_config(kv), T);
}

// Shared key/value heads: tp rank r of T holds head r / (T/NKV) of k_proj and v_proj, the
// same rows as the other ranks sharing it, replicated and primary on the first of them only
// (so the gradient norm and checkpoints count it once).
TEST(TensorLayoutTest, SharedKeyValueHeadsAreReplicatedOnTheRanksSharingThem) {
  const model::GPTConfig c = llama_config(2);
  const int T = 4, hs = c.head_dim();
  for (int r = 0; r < T; ++r) {
    int seen = 0;
    for (const model::ShardedView& v : model::build_sharded_table(c, {T, r})) {
      const bool kv = v.view.name.find("k_proj") != std::string::npos ||
                      v.view.name.find("v_proj") != std::string::npos;
      if (!kv) continue;
      ++seen;
      ASSERT_EQ(v.pieces.size(), 1u);
      EXPECT_EQ(v.pieces[0].offsets[0], (r / 2) * hs) << v.view.name << " rank " << r;
      EXPECT_EQ(v.view.shape, (Shape{hs, c.dim}));
      EXPECT_TRUE(v.view.replicated);
      EXPECT_EQ(v.view.primary, r % 2 == 0) << v.view.name << " rank " << r;
      EXPECT_EQ(v.pieces[0].primary, v.view.primary);
    }
    EXPECT_EQ(seen, 2 * c.layers);
  }
  EXPECT_EQ(cost::tp_kv_share(2, 4), 2);
  EXPECT_EQ(cost::tp_kv_heads(2, 4), 1);
  EXPECT_EQ(cost::tp_kv_share(4, 2), 1);
  EXPECT_EQ(cost::tp_kv_heads(4, 2), 2);
}

// The planner's tensor-parallel cost model (cost/comm.h) predicts what the engine holds
// and what the model sends: model-state bytes and tp payload bytes per step, to the byte.
TEST(TensorParallelPlan, ModelStatesAndTpBytesEqualThePrediction) {
  for (const Case& c : {Case{2, 2, 1, Precision::fp32, true, 2},
                        Case{3, 1, 3, Precision::bf16, false, 1},
                        Case{4, 1, 2, Precision::fp32, true, 1}}) {
    int64_t bytes = 0;
    const RunResult got = run_case(c, 2, &bytes);
    const RunSpec s;
    const cost::GptShape m = model::gpt_shape(config_for(c.tp));
    const int micro = s.batch / (c.dp * c.accum);
    EXPECT_EQ(bytes, c.accum * cost::tp_comm_bytes_per_micro(m, c.tp, c.sp, micro, s.T))
        << name(c);
    EXPECT_EQ(got.memory.model_states(),
              cost::zero_model_state_bytes(cost::local_params(m, c.tp, 0), c.dp, c.stage,
                                           c.precision)
                  .total())
        << name(c);
  }
}

TEST(TensorParallelChecks, HeadsAndSequenceMustDivide) {
  model::GPTConfig c = small_config();
  EXPECT_THROW(model::check_tensor_parallel(c, 3, true, 16), Error);  // 4 heads
  EXPECT_THROW(model::check_tensor_parallel(c, 2, true, 15), Error);  // seq 15 with --sp
  EXPECT_NO_THROW(model::check_tensor_parallel(c, 2, false, 15));
  // Key/value heads: split (4 over 2), shared (1 or 2 over 4), but not 3 over 2.
  for (int kv : {1, 2, 4}) EXPECT_NO_THROW(model::check_tensor_parallel(llama_config(kv), 4, true, 16));
  EXPECT_THROW(model::check_tensor_parallel(llama_config(3, 6), 2, true, 16), Error);
}

}  // namespace
}  // namespace strata::ptest
