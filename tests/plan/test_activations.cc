// The large-cluster estimate's activations: for a model strata's GPT describes they are the
// engine's buffers (cost/activations.h, cost/stage_activations.h), so `strata plan` and
// `strata plan --local` agree; the pipeline's slots per chunk are the schedule's; Llama and
// MoE models keep Korthikanti et al.'s terms.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "cost/stage_activations.h"
#include "nlohmann/json.hpp"
#include "parallel/pipeline/schedule.h"
#include "plan/planner.h"
#include "support/run.h"

using namespace strata::plan;
namespace pl = strata::parallel::pipeline;

namespace {

// A GPT-2-style model small enough for every pipeline split below (8 layers).
TrainSetup gpt_setup() {
  TrainSetup s;
  s.model.name = "test-gpt";
  s.model.layers = 8, s.model.hidden = 256, s.model.heads = 4, s.model.kv_heads = 4;
  s.model.ffn = 1024, s.model.seq = 512, s.model.vocab = 1000;
  apply_arch(s.model, "gpt");
  s.gpu = gpu_preset("h100-80g");
  return s;
}

// The same model as the engine's cost models see it, written out here.
strata::cost::GptShape gpt_shape(Recompute r) {
  strata::cost::GptShape g;
  g.layers = 8, g.dim = 256, g.heads = 4, g.max_seq = 512, g.vocab = 1000, g.padded_vocab = 1024;
  g.recompute = int(r);
  g.recomputed_layers = r == Recompute::full ? 8 : 0;
  return g;
}

}  // namespace

TEST(PlanActivations, GptModelsUseTheEngineFormula) {
  TrainSetup s = gpt_setup();
  EXPECT_TRUE(engine_describes(s.model));
  EXPECT_TRUE(engine_describes(model_preset("gpt2")));
  EXPECT_TRUE(engine_describes(model_preset("gpt3-175b")));
  for (const char* other : {"llama2-7b", "llama2-70b", "mixtral-8x7b"})
    EXPECT_FALSE(engine_describes(model_preset(other))) << other;
  s.model.experts = 4, s.model.top_k = 2;
  EXPECT_FALSE(engine_describes(s.model));
}

// One stage (pp 1): the estimate's activations per GPU are cost::activation_buffers' total on
// the largest tp rank (with cp, cost::cp_activation_bytes), for tp 1/2/4, SP on and off, every
// policy, both precisions.
TEST(PlanActivations, OneStageEqualsActivationBuffers) {
  TrainSetup s = gpt_setup();
  for (int tp : {1, 2, 4})
    for (bool sp : {true, false})
      for (Recompute r : {Recompute::none, Recompute::selective, Recompute::full})
        for (Precision p : {Precision::bf16, Precision::fp32}) {
          s.seq_parallel = sp;
          s.precision = p;
          s.gpus = tp;
          s.global_batch = 4;
          const Layout l{tp, 1, 1, 1, 1, 0, 2, r};
          ASSERT_EQ(layout_problem(s, l), "");
          const MemoryEstimate e = estimate_memory(s, l);
          const bool bf16 = p == Precision::bf16;
          const int64_t want =
              strata::cost::activation_buffers(gpt_shape(r), tp, sp, tp - 1, 2, bf16).total();
          EXPECT_EQ(e.activations, double(want)) << tp << " " << sp << " " << int(r) << " " << bf16;
          EXPECT_TRUE(e.engine_activations);
          EXPECT_EQ(e.in_flight, 1);
        }
  for (CpMode mode : {CpMode::ring, CpMode::ulysses}) {
    s.cp_mode = mode;
    s.gpus = 4;
    const Layout l{2, 1, 1, 2, 1, 0, 2, Recompute::selective};
    ASSERT_EQ(layout_problem(s, l), "");
    const int64_t want =
        strata::cost::cp_activation_bytes(gpt_shape(Recompute::selective), 2, s.seq_parallel, 1, 2,
                                          false, mode == CpMode::ring, 2, 512);
    EXPECT_EQ(estimate_memory(s, l).activations, double(want)) << int(mode);
  }
}

// Pipeline stages: the first and the last stage hold their chunks' blocks for the slots the
// schedule gives them (1F1B: the first holds min(p, m) micro-batches; GPipe m), the first
// the embedding, the last the head; the estimate reports the heavier stage.
TEST(PlanActivations, PipelineStagesHoldTheScheduleSlots) {
  TrainSetup s = gpt_setup();
  s.precision = Precision::fp32;
  struct Case {
    pl::ScheduleKind kind;
    int virt;
  };
  for (const Case c : {Case{pl::ScheduleKind::one_f_one_b, 1}, Case{pl::ScheduleKind::gpipe, 1},
                       Case{pl::ScheduleKind::interleaved, 2}, Case{pl::ScheduleKind::zb, 1}})
    for (int pp : {2, 4})
      for (int tp : {1, 2})
        for (Recompute r : {Recompute::none, Recompute::full}) {
          s.schedule = c.kind;
          s.virtual_stages = c.virt;
          s.gpus = int64_t(pp) * tp;
          s.global_batch = 16;  // 8 micro-batches of 2
          const Layout l{tp, pp, 1, 1, 1, 0, 2, r};
          ASSERT_EQ(layout_problem(s, l), "") << pp << " " << tp;
          const pl::Schedule sched = pl::make_schedule(c.kind, pp, 8, c.virt);
          double want[2];
          int held[2];
          for (int i = 0; i < 2; ++i) {
            const int stage = i == 0 ? 0 : pp - 1;
            std::vector<strata::cost::ChunkSlots> chunks;
            const int64_t blocks = 8 / (pp * c.virt);
            held[i] = 0;
            for (int ch = 0; ch < c.virt; ++ch) {
              const int v = sched.virtual_stage(stage, ch);
              const int slots = std::max(1, pl::chunk_slots(sched, stage, ch));
              held[i] += slots;
              chunks.push_back(
                  {blocks, r == Recompute::full ? blocks : 0, v == 0, v == pp * c.virt - 1, slots});
            }
            want[i] =
                double(strata::cost::stage_activation_buffers(
                           gpt_shape(r), chunks, sched.split_backward, tp, tp > 1, tp - 1, 2, false)
                           .total());
          }
          if (c.kind == pl::ScheduleKind::one_f_one_b) {
            EXPECT_EQ(held[0], pp);
            EXPECT_EQ(held[1], 1);
          }
          if (c.kind == pl::ScheduleKind::gpipe) {
            EXPECT_EQ(held[0], 8);
          }
          const MemoryEstimate e = estimate_memory(s, l);
          const int i = std::string(e.stage) == "first" ? 0 : 1;
          const std::string what = std::string(pl::schedule_name(c.kind)) + " pp " +
                                   std::to_string(pp) + " tp " + std::to_string(tp) + " rc " +
                                   recompute_name(r) + " " + e.stage;
          EXPECT_EQ(e.activations, want[i]) << what;
          EXPECT_EQ(e.in_flight, held[i]) << what;
        }
}

// The planner sizes slots from a schedule of at most about 4p micro-batches (not the step's
// m): the same slots as the whole schedule, for every kind, stage and chunk.
TEST(PlanActivations, CappedScheduleGivesTheSameSlots) {
  TrainSetup s = gpt_setup();
  for (pl::ScheduleKind kind : {pl::ScheduleKind::one_f_one_b, pl::ScheduleKind::gpipe,
                                pl::ScheduleKind::interleaved, pl::ScheduleKind::zb})
    for (int P : {2, 3, 4, 8})
      for (int M = 1; M <= 12 * P; ++M) {
        const int V = kind == pl::ScheduleKind::interleaved ? 2 : 1;
        if (kind == pl::ScheduleKind::interleaved && M % P) continue;
        s.schedule = kind;
        s.virtual_stages = V;
        const pl::Schedule whole = pl::make_schedule(kind, P, M, V);
        for (int stage = 0; stage < P; ++stage) {
          std::vector<int> want;
          for (int c = 0; c < V; ++c) want.push_back(std::max(1, pl::chunk_slots(whole, stage, c)));
          EXPECT_EQ(chunk_slots_of(s, P, M, stage), want)
              << pl::schedule_name(kind) << " P " << P << " M " << M << " stage " << stage;
        }
      }
}

// Llama models keep Korthikanti et al.'s terms: the layers' bytes for the slots in flight.
TEST(PlanActivations, LlamaKeepsKorthikanti) {
  TrainSetup s;
  s.model = model_preset("llama2-7b");
  s.gpu = gpu_preset("h100-80g");
  s.gpus = 8;
  s.global_batch = 8;
  const Layout l{8, 1, 1, 1, 1, 0, 1, Recompute::selective};
  const MemoryEstimate e = estimate_memory(s, l);
  EXPECT_FALSE(e.engine_activations);
  LayerShape x;
  x.s = 4096, x.b = 1, x.h = 4096, x.a = 32, x.kv_hidden = 4096, x.ffn = 11008;
  x.gated = true, x.dropout = false;
  const double layers = 32 * layer_activation_bytes(x, 8, true, Recompute::selective);
  const double head = 4 * 4096.0 * 4096 / 8 + 4 * 4096.0 * 32000 / 8;
  EXPECT_NEAR(e.activations, layers + head, 1e-6 * e.activations);
}

// `strata plan` for a fixed layout of gpt2 and `strata plan --local` for the same run print the
// same activation bytes (the largest tp rank's).
TEST(PlanActivations, PlanAndPlanLocalAgree) {
  using nlohmann::json;
  for (const std::string policy : {"none", "selective", "full"})
    for (const std::string tp : {"1", "2"}) {
      const std::string run = " --model gpt2 --tp " + tp +
                              " --micro-batch 2 --precision fp32 --recompute " + policy + " --json";
      const strata::test::RunResult plan = strata::test::run_strata(
          "plan --gpus " + tp + " --pp 1 --dp 1 --cp 1 --zero 0 --global-batch 2" + run, "",
          strata::test::Streams::separate);
      ASSERT_EQ(plan.status, 0) << plan.err;
      const strata::test::RunResult local =
          strata::test::run_strata("plan --local" + run, "", strata::test::Streams::separate);
      ASSERT_EQ(local.status, 0) << local.err;
      int64_t most = 0;
      const json ranks = json::parse(local.out)["ranks"];
      for (const json& r : ranks) most = std::max(most, r["activations"].get<int64_t>());
      const json best = json::parse(plan.out)["best"];
      EXPECT_EQ(best["memory"]["activations"].get<double>(), double(most))
          << policy << " tp " << tp;
      EXPECT_EQ(best["memory"]["activations_model"], "strata");
    }
}

// The engine's formula counts in int64: a shape whose buffers could pass 2^62 bytes (here 2^30
// tokens of a 2^30-row vocabulary per sequence) is reported with the floating-point terms, not
// an overflowed count.
TEST(PlanActivations, ShapesPastInt64KeepTheFloatingPointTerms) {
  TrainSetup s = gpt_setup();
  s.model.seq = int64_t(1) << 30, s.model.vocab = int64_t(1) << 30;
  s.gpus = 1;
  s.global_batch = 8;
  const MemoryEstimate e = estimate_memory(s, Layout{1, 1, 1, 1, 1, 0, 8, Recompute::full});
  EXPECT_FALSE(e.engine_activations);
  EXPECT_GT(e.activations, 4.0 * 8 * double(s.model.seq) * double(s.model.vocab));  // the logits
  s.model.seq = 512, s.model.vocab = 1000;
  EXPECT_TRUE(estimate_memory(s, Layout{1, 1, 1, 1, 1, 0, 8, Recompute::full}).engine_activations);
}
