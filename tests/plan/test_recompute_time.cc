// What recomputation costs in the planner's step time and hardware FLOPs: strata's selective
// recomputation is elementwise (the two norms and, under fp32, the GELU/SwiGLU output;
// docs/recompute.md), timed as the slower of its operations and its bytes; full is one more
// forward of every block; zero-bubble's weight pass recomputes again; a model on Korthikanti
// et al.'s activation terms (MoE) keeps their selective cost, the attention core again.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "plan/planner.h"

using namespace strata::plan;
namespace pl = strata::parallel::pipeline;

namespace {

// 8 blocks of width 256, sequences of 512: GPT-2 blocks (MLP 4C = 1024) or Llama blocks (4
// heads, 2 KV heads, SwiGLU of 768).
TrainSetup setup(bool llama) {
  TrainSetup s;
  s.model.name = llama ? "test-llama" : "test-gpt";
  s.model.layers = 8, s.model.hidden = 256, s.model.heads = 4, s.model.kv_heads = 4;
  s.model.ffn = 1024, s.model.seq = 512, s.model.vocab = 1000;
  apply_arch(s.model, llama ? "llama" : "gpt");
  if (llama) s.model.kv_heads = 2, s.model.ffn = 768;
  s.gpu = gpu_preset("h100-80g");
  s.global_batch = 8;
  return s;
}

Estimate at(TrainSetup s, int tp, Recompute r, int pp = 1) {
  s.gpus = int64_t(tp) * pp;
  const Layout l{tp, pp, 1, 1, 1, 0, 2, r};
  EXPECT_EQ(layout_problem(s, l), "");
  return evaluate(s, l);
}

std::string name(bool llama, int tp, Precision p) {
  return std::string(llama ? "llama" : "gpt") + " tp " + std::to_string(tp) +
         (p == Precision::bf16 ? " bf16" : " fp32");
}

}  // namespace

// Selective: per micro-batch (2 sequences of 512 = 1024 tokens) and block, the norms run
// on the residual region's rows (1024 / tp under sequence parallelism) over C = 256, the MLP
// activation on 1024 rows of F / tp. Operations per element: LayerNorm 8, RMSNorm 4, GELU 20,
// SwiGLU 17; bytes: a norm reads 4 and writes 4 (fp32) or 2 (bf16), GELU reads and writes 4
// each, SwiGLU reads 8 and writes 4; bf16 keeps the activation (no MLP term). The time is the
// slower of the operations at the sustained rate and the bytes at HBM bandwidth (here the
// bytes: elementwise work is memory-bound on an H100), and nothing else in the step changes.
TEST(PlanRecompute, SelectiveIsStrataElementwiseWork) {
  for (const bool llama : {false, true})
    for (int tp : {1, 2})
      for (Precision p : {Precision::fp32, Precision::bf16}) {
        TrainSetup s = setup(llama);
        s.precision = p;
        const bool fp32 = p == Precision::fp32;
        const double C = 256, F = llama ? 768 : 1024, rows = 1024, norm_rows = rows / tp;
        const double ops =
            norm_rows * 2 * (llama ? 4 : 8) * C + (fp32 ? rows * (llama ? 17 : 20) * F / tp : 0);
        const double bytes = norm_rows * 2 * (4 + (fp32 ? 4 : 2)) * C +
                             (fp32 ? rows * (llama ? 12 : 8) * F / tp : 0);
        const double flops = s.gpu.peak_flops() * s.gpu.efficiency;
        const double hbm = s.gpu.hbm_gbps * 1e9;
        ASSERT_GT(bytes / hbm, ops / flops);
        const Estimate none = at(s, tp, Recompute::none), sel = at(s, tp, Recompute::selective);
        const double M = 4;  // micro-batches per step
        EXPECT_NEAR(sel.time.recompute, M * 8 * bytes / hbm, 1e-12 * sel.time.recompute)
            << name(llama, tp, p);
        EXPECT_DOUBLE_EQ(sel.time.compute, none.time.compute);
        EXPECT_DOUBLE_EQ(none.time.recompute, 0);
        // Hardware FLOPs: the elementwise operations once per token and block, the whole job:
        // GPT-2 96·C (fp32) or 16·C (bf16), Llama 8·C + 17·F or 8·C.
        const double per_token = (llama ? 8 * C : 16 * C) + (fp32 ? (llama ? 17 : 20) * F : 0);
        EXPECT_NEAR(sel.hardware_flops_per_step - none.hardware_flops_per_step,
                    8.0 * 512 * 8 * per_token, 1e-6 * 8 * 512 * 8 * per_token)
            << name(llama, tp, p);
      }
}

// Full: one more forward of every block, without the logits: a third of the forward and
// backward compute less the logits' 2·h·V per token; and the same in hardware FLOPs.
TEST(PlanRecompute, FullIsOneMoreForwardOfEveryBlock) {
  for (const bool llama : {false, true})
    for (int tp : {1, 2}) {
      const TrainSetup s = setup(llama);
      const Estimate none = at(s, tp, Recompute::none), full = at(s, tp, Recompute::full);
      const double flops = s.gpu.peak_flops() * s.gpu.efficiency;
      const double logits_s = 8.0 * 512 * 2 * 256 * 1024 / tp / flops;  // the step's logits
      EXPECT_NEAR(full.time.recompute, none.time.compute / 3 - logits_s, 1e-9 * full.time.recompute)
          << name(llama, tp, s.precision);
      const double logits_flops = 8.0 * 512 * 2 * 256 * 1024;
      EXPECT_NEAR(full.hardware_flops_per_step - none.hardware_flops_per_step,
                  none.hardware_flops_per_step / 3 - logits_flops,
                  1e-9 * none.hardware_flops_per_step);
    }
}

// Zero-bubble's weight pass needs the activations again after other micro-batches used the
// working layer, so strata recomputes twice per micro-batch under it (selective and full),
// and a full recomputation's tp collectives run twice more too.
TEST(PlanRecompute, ZeroBubbleRecomputesTwice) {
  for (Recompute r : {Recompute::selective, Recompute::full}) {
    TrainSetup s = setup(false);
    const Estimate f1b = at(s, 2, r, 2);
    s.schedule = pl::ScheduleKind::zb;
    const Estimate zb = at(s, 2, r, 2);
    EXPECT_NEAR(zb.time.recompute, 2 * f1b.time.recompute, 1e-12 * zb.time.recompute)
        << recompute_name(r);
    if (r == Recompute::full) {
      EXPECT_NEAR(zb.time.tp / f1b.time.tp, (4.0 + 4) / (4 + 2), 1e-9);
    }
  }
}

// MoE keeps Korthikanti et al.'s activations, so its selective recomputation is theirs: the
// attention core (4·s·h FLOPs per token and layer) again, at the sustained rate.
TEST(PlanRecompute, MoeSelectiveIsTheAttentionCore) {
  TrainSetup s = setup(false);
  s.model.experts = 4, s.model.top_k = 2;
  const Estimate sel = at(s, 2, Recompute::selective);
  EXPECT_FALSE(sel.mem.engine_activations);
  const double flops = s.gpu.peak_flops() * s.gpu.efficiency;
  EXPECT_NEAR(sel.time.recompute, 4 * 8 * 1024 * 4.0 * 512 * 256 / 2 / flops,
              1e-12 * sel.time.recompute);
}
