// The large-cluster estimate's activations: for a model strata runs (GPT-2 or Llama blocks)
// they are the engine's buffers (cost/activations.h, cost/stage_activations.h), so `strata
// plan` and `strata plan --local` agree; the pipeline's slots per chunk are the schedule's;
// MoE models keep Korthikanti et al.'s terms; a Llama whose tp exceeds its KV heads is
// strata's (the heads replicated on the tp ranks sharing them).
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
  g.recompute = r;
  g.recomputed_layers = r == Recompute::full ? 8 : 0;
  return g;
}

// A Llama of the same size (grouped-query attention 4:2, SwiGLU of 8h/3 rounded up to 256:
// 768, untied) and its shape.
TrainSetup llama_setup() {
  TrainSetup s = gpt_setup();
  s.model.name = "test-llama";
  apply_arch(s.model, "llama");
  s.model.kv_heads = 2, s.model.ffn = 768;
  return s;
}

strata::cost::GptShape llama_shape(Recompute r) {
  strata::cost::GptShape g = gpt_shape(r);
  g.llama = true, g.kv_heads = 2, g.ffn = 768, g.tied = false;
  return g;
}

// A preset on 8 H100s at tp 8 (SP, bf16), micro-batch 1, selective recomputation.
MemoryEstimate tp8_selective(const char* preset) {
  TrainSetup s;
  s.model = model_preset(preset);
  s.gpu = gpu_preset("h100-80g");
  s.gpus = 8;
  s.global_batch = 8;
  const Layout l{8, 1, 1, 1, 1, 0, 1, Recompute::selective};
  EXPECT_EQ(layout_problem(s, l), "");
  return estimate_memory(s, l);
}

}  // namespace

TEST(PlanActivations, GptAndLlamaModelsUseTheEngineFormula) {
  TrainSetup s = gpt_setup();
  EXPECT_TRUE(engine_describes(s.model));
  EXPECT_TRUE(engine_describes(llama_setup().model));
  for (const char* name : {"gpt2", "gpt3-175b", "llama2-7b", "llama2-70b", "llama3-405b"})
    EXPECT_TRUE(engine_describes(model_preset(name))) << name;
  EXPECT_FALSE(engine_describes(model_preset("mixtral-8x7b")));
  s.model.experts = 4, s.model.top_k = 2;
  EXPECT_FALSE(engine_describes(s.model));
  // A layer of neither kind: GPT-2's with RMSNorm.
  TrainSetup odd = gpt_setup();
  odd.model.layernorm = false;
  EXPECT_FALSE(engine_describes(odd.model));
  // strata's tp ranks take whole KV heads or share one: tp 2 and tp 4 over 2 KV heads both
  // run, 3 KV heads at tp 2 do not.
  TrainSetup l = llama_setup();
  EXPECT_TRUE(engine_runs(l.model, Layout{2, 1, 1, 1, 1, 0, 1, Recompute::none}));
  EXPECT_TRUE(engine_runs(l.model, Layout{4, 1, 1, 1, 1, 0, 1, Recompute::none}));
  l.model.heads = 6, l.model.kv_heads = 3;
  EXPECT_FALSE(engine_runs(l.model, Layout{2, 1, 1, 1, 1, 0, 1, Recompute::none}));
  EXPECT_NE(korthikanti_reason(l.model, Layout{2, 1, 1, 1, 1, 0, 1, Recompute::none})
                .find("3 KV heads neither divide nor are divisible by tp 2"),
            std::string::npos);
  EXPECT_NE(korthikanti_reason(model_preset("mixtral-8x7b"), Layout{}).find("MoE"),
            std::string::npos);
}

// One stage (pp 1): the estimate's activations per GPU are cost::activation_buffers' total on
// the largest tp rank (with cp, cost::cp_activation_bytes), for tp 1/2/4 (the Llama's 2 KV
// heads: split at tp 2, shared at tp 4), SP on and off, every policy, both precisions, GPT-2
// and Llama blocks.
TEST(PlanActivations, OneStageEqualsActivationBuffers) {
  for (const bool llama : {false, true}) {
    TrainSetup s = llama ? llama_setup() : gpt_setup();
    auto shape = [&](Recompute r) { return llama ? llama_shape(r) : gpt_shape(r); };
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
            const std::string what = std::string(llama ? "llama" : "gpt") + " tp " +
                                     std::to_string(tp) + " sp " + std::to_string(sp) + " rc " +
                                     recompute_name(r) + (p == Precision::bf16 ? " bf16" : " fp32");
            const bool bf16 = p == Precision::bf16;
            const int64_t want =
                strata::cost::activation_buffers(shape(r), tp, sp, tp - 1, 2, bf16).total();
            EXPECT_EQ(e.activations, double(want)) << what;
            EXPECT_TRUE(e.engine_activations) << what;
            EXPECT_EQ(e.in_flight, 1);
          }
    for (CpMode mode : {CpMode::ring, CpMode::ulysses}) {
      s.cp_mode = mode;
      s.gpus = 4;
      const Layout l{2, 1, 1, 2, 1, 0, 2, Recompute::selective};
      ASSERT_EQ(layout_problem(s, l), "");
      const int64_t want =
          strata::cost::cp_activation_bytes(shape(Recompute::selective), 2, s.seq_parallel, 1, 2,
                                            false, mode == CpMode::ring, 2, 512);
      EXPECT_EQ(estimate_memory(s, l).activations, double(want)) << int(mode) << " " << llama;
    }
  }
}

// Pipeline stages: the first and the last stage hold their chunks' blocks for the slots the
// schedule gives them (1F1B: the first holds min(p, m) micro-batches; GPipe m), the first
// the embedding, the last the head; the estimate reports the heavier stage.
TEST(PlanActivations, PipelineStagesHoldTheScheduleSlots) {
  struct Case {
    pl::ScheduleKind kind;
    int virt;
  };
  for (const bool llama : {false, true})
    for (const Case c : {Case{pl::ScheduleKind::one_f_one_b, 1}, Case{pl::ScheduleKind::gpipe, 1},
                         Case{pl::ScheduleKind::interleaved, 2}, Case{pl::ScheduleKind::zb, 1}})
      for (int pp : {2, 4})
        for (int tp : {1, 2})
          for (Recompute r : {Recompute::none, Recompute::full}) {
            TrainSetup s = llama ? llama_setup() : gpt_setup();
            s.precision = Precision::fp32;
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
                chunks.push_back({blocks, r == Recompute::full ? blocks : 0, v == 0,
                                  v == pp * c.virt - 1, slots});
              }
              want[i] = double(strata::cost::stage_activation_buffers(
                                   llama ? llama_shape(r) : gpt_shape(r), chunks,
                                   sched.split_backward, tp, tp > 1, tp - 1, 2, false)
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
            EXPECT_TRUE(e.engine_activations);
            const std::string what = std::string(llama ? "llama " : "gpt ") +
                                     pl::schedule_name(c.kind) + " pp " + std::to_string(pp) +
                                     " tp " + std::to_string(tp) + " rc " + recompute_name(r) +
                                     " " + e.stage;
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

// A published Llama (llama2-7b at tp 8 with SP, selective, bf16, the planner's defaults) is
// the engine's Llama buffers, written out here: 32 blocks of width 4096, 32 heads and KV heads,
// SwiGLU of 11008, sequences of 4096, 32000 rows, untied.
TEST(PlanActivations, LlamaPresetIsTheEngineFormula) {
  const MemoryEstimate e = tp8_selective("llama2-7b");
  EXPECT_TRUE(e.engine_activations);
  strata::cost::GptShape g;
  g.layers = 32, g.dim = 4096, g.heads = 32, g.max_seq = 4096, g.vocab = 32000;
  g.padded_vocab = 32000, g.recompute = strata::cost::Recompute::selective;
  g.llama = true, g.kv_heads = 32, g.ffn = 11008, g.tied = false;
  const strata::cost::ActivationBuffers b =
      strata::cost::activation_buffers(g, 8, true, 7, 1, /*bf16=*/true);
  EXPECT_EQ(e.activations, double(b.total()));
  // By hand, in floats per rank (N = 4096 rows, n = 512 under SP, Cl = 512; bf16 halves the
  // norm, qkv, attention and MLP outputs): a block keeps res2 and res3 (2nC), the rstds (2n),
  // qkv (3·N·Cl / 2), the attention output (N·Cl / 2), the log-sum-exp (N·4 heads), gate|up
  // (N·2·1376 / 2) and the SwiGLU output (N·1376 / 2); selective keeps one copy of the norm
  // outputs (2·nC / 2).
  const int64_t N = 4096, n = 512, C = 4096, Cl = 512, F = 1376;
  const int64_t block = 2 * n * C + 2 * n + 3 * N * Cl / 2 + N * Cl / 2 + N * 4 + N * F + N * F / 2;
  EXPECT_EQ(b.layers_kept, 4 * 32 * block);
  EXPECT_EQ(b.recompute, 4 * (n * C));
  EXPECT_EQ(b.head, 4 * (n * C / 2 + n + N * 4000 + 2 * N));
}

// MoE models keep Korthikanti et al.'s terms: the layers' bytes for the slots in flight, the
// final norm and head input, the fp32 logits.
TEST(PlanActivations, MoeKeepsKorthikanti) {
  const MemoryEstimate e = tp8_selective("mixtral-8x7b");
  EXPECT_FALSE(e.engine_activations);
  LayerShape x;
  x.s = 32768, x.s_kv = 32768, x.b = 1, x.h = 4096, x.a = 32, x.kv_hidden = 1024, x.ffn = 14336;
  x.gated = true, x.dropout = false, x.experts_per_token = 2;
  const double layers = 32 * layer_activation_bytes(x, 8, true, Recompute::selective);
  const double head = 4 * 32768.0 * 4096 / 8 + 4 * 32768.0 * 32000 / 8;
  EXPECT_NEAR(e.activations, layers + head, 1e-6 * e.activations);
}

// `strata plan` for a fixed layout and `strata plan --local` for the same run print the same
// activation bytes (the largest tp rank's): gpt2, and the Llama presets strata trains
// (llama-tiny: 4 x 256, 4 heads, 2 KV heads, SwiGLU 768, seq 256, vocab 256; llama-100m: 8 x
// 768, 12 heads, 4 KV heads, SwiGLU 2048, seq 1024, vocab 32000), given to the planner as an
// explicit `--arch llama` shape.
TEST(PlanActivations, PlanAndPlanLocalAgree) {
  using nlohmann::json;
  struct Model {
    std::string local, plan;
  };
  const Model models[] = {
      {"--model gpt2", "--model gpt2"},
      {"--model llama-tiny",
       "--arch llama --layers 4 --dim 256 --heads 4 --kv-heads 2 --seq 256 --vocab 256"},
      {"--model llama-100m",
       "--arch llama --layers 8 --dim 768 --heads 12 --kv-heads 4 "
       "--ffn 2048 --seq 1024 --vocab 32000"}};
  for (const Model& m : models)
    for (const std::string policy : {"none", "selective", "full"})
      for (const std::string tp : {"1", "2"})
        for (const std::string precision : {"fp32", "bf16"}) {
          const std::string run = " --tp " + tp + " --micro-batch 2 --precision " + precision +
                                  " --recompute " + policy + " --json";
          const std::string what = m.local + " tp " + tp + " " + policy + " " + precision;
          const strata::test::RunResult plan =
              strata::test::run_strata("plan " + m.plan + " --gpus " + tp +
                                           " --pp 1 --dp 1 --cp 1 --zero 0 --batch 2" + run,
                                       "", strata::test::Streams::separate);
          ASSERT_EQ(plan.status, 0) << what << ": " << plan.err;
          const strata::test::RunResult local = strata::test::run_strata(
              "plan --local " + m.local + run, "", strata::test::Streams::separate);
          ASSERT_EQ(local.status, 0) << what << ": " << local.err;
          int64_t most = 0;
          const json ranks = json::parse(local.out)["ranks"];
          for (const json& r : ranks) most = std::max(most, r["activations"].get<int64_t>());
          const json best = json::parse(plan.out)["best"];
          EXPECT_EQ(best["memory"]["activations"].get<double>(), double(most)) << what;
          EXPECT_EQ(best["memory"]["activations_model"], "strata") << what;
        }
}

// The memory table and the JSON name the formula: a Llama at tp 2 and at tp 4 over its 2 KV
// heads (shared) is strata's, an MoE model Korthikanti's, with the reason.
TEST(PlanActivations, TheReportNamesTheFormula) {
  using nlohmann::json;
  const std::string llama =
      "plan --arch llama --layers 4 --dim 256 --heads 4 --kv-heads 2 --seq 256 --vocab 256 "
      "--pp 1 --dp 1 --cp 1 --zero 0 --batch 2 --micro-batch 2";
  const strata::test::RunResult two = strata::test::run_strata(llama + " --gpus 2 --tp 2");
  ASSERT_EQ(two.status, 0) << two.out;
  EXPECT_NE(two.out.find("(strata's buffers, as `strata train` allocates them)"), std::string::npos)
      << two.out;
  const strata::test::RunResult four = strata::test::run_strata(
      llama + " --gpus 4 --tp 4 --json", "", strata::test::Streams::separate);
  ASSERT_EQ(four.status, 0) << four.err;
  EXPECT_EQ(json::parse(four.out)["best"]["memory"]["activations_model"], "strata");
  const strata::test::RunResult text = strata::test::run_strata(
      "plan --model mixtral-8x7b --gpus 8 --tp 4 --pp 1 --cp 1 --zero 1 --batch 8 "
      "--micro-batch 1");
  EXPECT_NE(text.out.find("Korthikanti et al.'s per-layer terms: MoE blocks are not in the "
                          "engine's formula"),
            std::string::npos)
      << text.out;
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
