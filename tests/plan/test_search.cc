// Layout checks, the memory and time model's structure, the search and its explanations,
// the smallest-cluster scan, RLHF memory, α-β costs and hardware descriptions.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>

#include "cost/comm.h"
#include "parallel/parallel_layout.h"
#include "plan/planner.h"

using namespace strata::plan;

namespace {

TrainSetup setup(const char* model, const char* gpu, int64_t gpus) {
  TrainSetup s;
  s.model = model_preset(model);
  s.gpu = gpu_preset(gpu);
  s.gpus = gpus;
  s.global_batch = s.model.global_batch;
  return s;
}

std::string problem(const TrainSetup& s, Layout l) { return layout_problem(s, l); }

}  // namespace

TEST(Layout, ProblemsNameTheNumbers) {
  TrainSetup s = setup("llama2-70b", "h100-80g", 1024);
  EXPECT_EQ(problem(s, {8, 4, 32, 1, 1, 1, 1, Recompute::none}), "");
  std::string p = problem(s, {8, 4, 16, 1, 1, 1, 1, Recompute::none});
  EXPECT_NE(p.find("tp 8 × pp 4 × cp 1 × dp 16 = 512 GPUs, but --gpus is 1024"), std::string::npos)
      << p;
  s.gpus = 96;
  s.global_batch = 96;
  s.gpu.gpus_per_node = 6;
  p = problem(s, {3, 1, 32, 1, 1, 0, 1, Recompute::none});
  EXPECT_NE(p.find("64 attention heads are not divisible by tp 3"), std::string::npos) << p;
  s.gpus = 1024;
  s.global_batch = 1024;
  s.gpu.gpus_per_node = 8;
  p = problem(s, {16, 1, 64, 1, 1, 0, 1, Recompute::none});
  EXPECT_NE(p.find("inside a node of 8"), std::string::npos) << p;
  p = problem(s, {8, 1, 128, 1, 2, 0, 1, Recompute::none});
  EXPECT_NE(p.find("mixture-of-experts"), std::string::npos) << p;
  p = problem(s, {1, 1, 1024, 1, 1, 5, 1, Recompute::none});
  EXPECT_NE(p.find("ZeRO stage 5"), std::string::npos) << p;
  s.global_batch = 1000;
  p = problem(s, {8, 1, 128, 1, 1, 0, 1, Recompute::none});
  EXPECT_NE(p.find("global batch 1000 is not divisible by dp 128"), std::string::npos) << p;
}

// The planner refuses what `strata train` refuses, by the same rules
// (parallel/parallel_layout.h): zero-bubble with ZeRO 2 as with ZeRO 3.
TEST(Layout, ZeroBubbleRefusesTheZeroStagesTrainRefuses) {
  namespace pl = strata::parallel::pipeline;
  TrainSetup s = setup("gpt3-175b", "a100-80g", 1024);
  s.schedule = pl::ScheduleKind::zb;
  for (int zero : {0, 1, 2, 3}) {
    const std::string p = problem(s, {8, 16, 8, 1, 1, zero, 1, Recompute::selective});
    EXPECT_EQ(p.empty(), strata::parallel::zero_bubble_allows_zero(s.schedule, zero))
        << zero << ": " << p;
    if (zero >= 2) {
      EXPECT_NE(p.find("zero " + std::to_string(zero)), std::string::npos) << p;
    }
  }
}

TEST(Layout, CheckFixedRejectsBeforeSearching) {
  TrainSetup s = setup("llama2-7b", "h100-80g", 1024);
  FixedLayout f;
  f.tp = 8, f.pp = 4, f.cp = 1, f.dp = 16;
  try {
    check_fixed(s, f);
    FAIL();
  } catch (const strata::Error& e) {
    EXPECT_STREQ(e.what(), "tp 8 × pp 4 × cp 1 × dp 16 = 512 GPUs, but --gpus is 1024");
  }
  FixedLayout g;
  g.tp = 3;
  EXPECT_THROW(check_fixed(s, g), strata::Error);
  FixedLayout h;
  h.pp = 3;
  try {
    check_fixed(s, h);
    FAIL();
  } catch (const strata::Error& e) {
    EXPECT_STREQ(e.what(), "pp 3 = 3 does not divide --gpus 1024");
  }
}

// Under 1F1B the first stage holds min(p, m) micro-batches; with L/p layers each, its
// activation memory for the layers is that of the whole model for one micro-batch
// (Korthikanti et al.'s terms, which MoE models keep: independent of p; no dropout mask).
// GPT-2 and Llama models (the engine's buffers): tests/plan/test_activations.cc.
TEST(Memory, FirstStageHoldsPMicroBatches) {
  TrainSetup s = setup("mixtral-8x7b", "a100-80g", 64);
  s.global_batch = 64;
  Layout l{8, 8, 1, 1, 1, 1, 1, Recompute::selective};
  MemoryEstimate m = estimate_memory(s, l);
  EXPECT_EQ(std::string(m.stage), "first");
  EXPECT_EQ(m.in_flight, 8);
  Layout l4 = l;
  l4.pp = 4, l4.dp = 2;
  MemoryEstimate m4 = estimate_memory(s, l4);
  EXPECT_EQ(m4.in_flight, 4);
  EXPECT_FALSE(m.engine_activations);
  // 32 layers × one micro-batch either way.
  EXPECT_NEAR(m.activations / m4.activations, 1.0, 1e-9);
  // Fewer micro-batches than stages: only m are in flight.
  s.global_batch = 2;
  Layout few{8, 8, 1, 1, 1, 1, 1, Recompute::selective};
  EXPECT_EQ(estimate_memory(s, few).in_flight, 2);
}

TEST(Memory, ShardingShrinksStatesAsExpected) {
  TrainSetup s = setup("llama2-7b", "h100-80g", 8);
  s.global_batch = 8;
  const int64_t psi = count_params(s.model).total();
  Layout dp8{1, 1, 8, 1, 1, 0, 1, Recompute::none};
  EXPECT_EQ(estimate_memory(s, dp8).states.total(), 16 * psi);
  dp8.zero = 3;
  EXPECT_EQ(estimate_memory(s, dp8).states.total(), 16 * ((psi + 7) / 8));
  Layout tp8{8, 1, 1, 1, 1, 0, 1, Recompute::none};
  MemoryEstimate t = estimate_memory(s, tp8);
  // Matrices split 8 ways; norms replicated: a little over Ψ/8.
  EXPECT_GT(t.dense_params, psi / 8);
  EXPECT_LT(t.dense_params, psi / 8 + 32 * 2 * 4096 + 4096 + 1);
}

TEST(Memory, MixtureOfExpertsShardsExpertsOverEp) {
  TrainSetup s = setup("mixtral-8x7b", "h100-80g", 64);
  s.global_batch = 64;
  Layout a{1, 1, 64, 1, 1, 1, 1, Recompute::full};
  Layout b = a;
  b.ep = 8;
  MemoryEstimate ma = estimate_memory(s, a), mb = estimate_memory(s, b);
  EXPECT_EQ(ma.expert_params, 8 * mb.expert_params);
  EXPECT_EQ(ma.dense_params, mb.dense_params);
  // Expert optimizer states are ZeRO-sharded over dp·cp/ep = 8 ranks instead of 64.
  const int64_t per_rank_expert = (mb.expert_params + 7) / 8 * 12;
  EXPECT_EQ(mb.states.optimizer, (mb.dense_params + 63) / 64 * 12 + per_rank_expert);
}

TEST(Time, BubbleIsPMinusOneMicroBatches) {
  TrainSetup s = setup("gpt3-175b", "a100-80g", 1024);
  Layout l{8, 16, 8, 1, 1, 1, 1, Recompute::selective};
  Estimate e = evaluate(s, l);
  EXPECT_EQ(e.micro_batches, 1536 / 8);
  // 1F1B without its transfers: (p − 1)·t_mb, (P−1)/(M+P−1) of the schedule; the
  // stage-to-stage transfers come on top, as exposed pipeline communication.
  EXPECT_NEAR(e.time.bubble, 15 * e.time.t_micro, 1e-9 * e.time.bubble);
  EXPECT_NEAR(e.pipeline_bubble_ideal, 15.0 / 207, 1e-12);
  EXPECT_DOUBLE_EQ(e.pipeline_formula, 15.0 / 207);
  EXPECT_GT(e.time.pp, 0);
  EXPECT_GT(e.bubble_fraction(), e.pipeline_bubble_ideal);
  const TimeBreakdown& t = e.time;
  EXPECT_NEAR(t.step_s,
              t.compute + t.recompute + t.tp + t.cp + t.ep + t.pp + t.zero_micro + t.bubble +
                  t.dp_final + t.optimizer,
              1e-9);
  EXPECT_GT(e.mfu, 0.2);
  EXPECT_LT(e.mfu, s.gpu.efficiency);
}

TEST(Time, TensorParallelAcrossNodesIsNeverSearched) {
  TrainSetup s = setup("llama2-70b", "h100-80g", 64);
  SearchResult r = search_layouts(s, {});
  ASSERT_FALSE(r.ranked.empty());
  for (const Estimate& e : r.ranked) {
    EXPECT_LE(e.layout.tp, 8);
    EXPECT_TRUE(e.fits);
    EXPECT_LE(e.mem.total(), e.usable_bytes);
  }
  for (size_t i = 1; i < r.ranked.size(); ++i)
    EXPECT_LE(r.ranked[i - 1].time.step_s, r.ranked[i].time.step_s);
  // 70B does not fit with pure data parallelism and no ZeRO: the planner must shard.
  const Layout& b = r.ranked[0].layout;
  EXPECT_GT(int64_t(b.tp) * b.pp * (b.zero >= 1 ? b.dp : 1), 1);
}

TEST(Search, FixedDegreesAreRespected) {
  TrainSetup s = setup("llama2-70b", "h100-80g", 64);
  FixedLayout f;
  f.tp = 4;
  f.zero = 1;
  f.recompute = Recompute::selective;
  SearchResult r = search_layouts(s, f);
  ASSERT_FALSE(r.ranked.empty());
  for (const Estimate& e : r.ranked) {
    EXPECT_EQ(e.layout.tp, 4);
    EXPECT_EQ(e.layout.zero, 1);
    EXPECT_EQ(e.layout.recompute, Recompute::selective);
  }
}

TEST(Search, ExplanationNamesBestAndRunnersUp) {
  TrainSetup s = setup("llama2-70b", "h100-80g", 256);
  SearchResult r = search_layouts(s, {});
  std::vector<std::string> lines = explain(r, s, 3);
  ASSERT_GE(lines.size(), 3u);
  EXPECT_EQ(lines[0].rfind("best: " + r.ranked[0].layout.str(), 0), 0u) << lines[0];
  int runners = 0;
  for (const std::string& l : lines) runners += l.rfind("runner-up", 0) == 0;
  EXPECT_EQ(runners, 3);
  for (const std::string& l : lines)
    if (l.rfind("runner-up", 0) == 0) {
      EXPECT_TRUE(l.find("mostly") != std::string::npos || l.find("a tie") != std::string::npos)
          << l;
    }
}

TEST(Search, FitsNowhereFindsTheSmallestCluster) {
  TrainSetup s = setup("llama3-405b", "a100-40g", 8);
  SearchResult r = search_layouts(s, {});
  EXPECT_TRUE(r.ranked.empty());
  ASSERT_TRUE(r.least_memory.has_value());
  EXPECT_GT(r.least_memory->mem.total(), r.least_memory->usable_bytes);
  ClusterFit c = smallest_fitting_cluster(s, {});
  ASSERT_TRUE(c.found);
  EXPECT_GT(c.gpus, 8);
  EXPECT_EQ(c.gpus % 8, 0);
  TrainSetup at = s;
  at.gpus = c.gpus;
  EXPECT_EQ(layout_problem(at, c.layout), "");
  EXPECT_LE(estimate_memory(at, c.layout).total(), at.gpu.memory_bytes() * 0.9);
  // One node fewer does not fit with any layout (smallest micro-batch, full recomputation).
  TrainSetup below = s;
  below.gpus = c.gpus - 8;
  FixedLayout lean;
  lean.micro_batch = 1;
  lean.recompute = Recompute::full;
  EXPECT_TRUE(search_layouts(below, lean).ranked.empty());
}

TEST(Rlhf, FourModelsAndKvCache) {
  RlhfSetup r;
  r.actor = model_preset("llama2-7b");
  r.critic = model_preset("llama2-7b");
  r.gpu = gpu_preset("a100-80g");
  r.gpus = 8;
  r.zero = 3;
  r.rollout_batch = 8;
  RlhfEstimate e = estimate_rlhf(r);
  ASSERT_EQ(e.models.size(), 4u);
  const int64_t psi = count_params(r.actor).total();
  EXPECT_EQ(e.models[0].states.total(), 16 * ((psi + 7) / 8));  // actor, ZeRO-3 over 8
  const int64_t head = r.critic.hidden + 1;  // the critic's value head, replicated
  EXPECT_EQ(e.models[1].states.total(), 16 * ((psi + 7) / 8) + 16 * head);  // critic
  EXPECT_EQ(e.models[2].states.total(), 2 * ((psi + 7) / 8));   // reference, inference
  EXPECT_FALSE(e.models[3].trained);
  EXPECT_DOUBLE_EQ(e.kv_cache, 8.0 * 4096 * 32 * 2 * 4096 * 2);  // b·s·L·2·kv·2 bytes
  r.zero = 1;
  RlhfEstimate e1 = estimate_rlhf(r);
  EXPECT_EQ(e1.models[2].states.total(), 2 * psi);  // replicated without ZeRO-3
  EXPECT_FALSE(e1.fits());
  // Stage 1 keeps parameters and gradients of both trained models (4Ψ each) and both frozen
  // models (2Ψ each) whole on every GPU: 12Ψ = 81 GB > 72 GiB usable at any size.
  EXPECT_EQ(smallest_rlhf_cluster(r), 0);
  r.zero = 3;
  r.gpus = 1;
  EXPECT_FALSE(estimate_rlhf(r).fits());
  const int64_t n = smallest_rlhf_cluster(r);
  ASSERT_GT(n, 1);
  r.gpus = n;
  EXPECT_TRUE(estimate_rlhf(r).fits());
  if (n > 8) {
    r.gpus = n - 8;
    EXPECT_FALSE(estimate_rlhf(r).fits());
  }
}

// With no overlap, ZeRO-3's per-micro-batch gathers and reduce-scatter are all exposed; with
// full overlap they hide behind the compute they run beside.
TEST(Time, OverlapHidesDataParallelTraffic) {
  TrainSetup s = setup("llama2-7b", "a100-80g", 64);
  Layout l{1, 1, 64, 1, 1, 3, 1, Recompute::full};
  s.overlap = 0;
  Estimate none = evaluate(s, l);
  double comm = 0;
  for (const CommItem& c : none.comm)
    if (c.dim == "dp") comm += c.time_s;
  EXPECT_GT(comm, 0);
  EXPECT_NEAR(none.time.zero_micro, comm, 1e-9 * comm);
  s.overlap = 1;
  Estimate full = evaluate(s, l);
  EXPECT_LT(full.time.zero_micro, none.time.zero_micro);
  EXPECT_NEAR(none.time.step_s - full.time.step_s, none.time.zero_micro - full.time.zero_micro,
              1e-9);
}

// The schedule decides the bubble (parallel/pipeline/predict.h): GPipe and 1F1B share one,
// interleaving and zero-bubble shrink it, and each is its formula without transfers.
TEST(Time, PipelineScheduleSetsTheBubble) {
  namespace pl = strata::parallel::pipeline;
  TrainSetup s = setup("gpt3-175b", "a100-80g", 1024);
  const Layout l{8, 16, 8, 1, 1, 1, 1, Recompute::selective};
  auto with = [&](pl::ScheduleKind k, int V) {
    TrainSetup x = s;
    x.schedule = k;
    x.virtual_stages = V;
    EXPECT_EQ(layout_problem(x, l), "");
    return evaluate(x, l);
  };
  const Estimate g = with(pl::ScheduleKind::gpipe, 1), o = with(pl::ScheduleKind::one_f_one_b, 1),
                 i = with(pl::ScheduleKind::interleaved, 2), z = with(pl::ScheduleKind::zb, 1);
  EXPECT_NEAR(g.pipeline_bubble_ideal, o.pipeline_bubble_ideal, 1e-12);
  EXPECT_NEAR(i.pipeline_bubble_ideal, 15.0 / (2 * 192 + 15), 1e-9);
  EXPECT_LT(i.time.bubble, o.time.bubble);
  EXPECT_LT(z.time.bubble, o.time.bubble);
  EXPECT_LT(z.bubble_fraction(), o.bubble_fraction());
  EXPECT_LT(g.time.pp, o.time.pp);  // GPipe's transfers are exposed once, 1F1B's per round trip
  for (const Estimate* e : {&g, &o, &i, &z})
    EXPECT_NEAR(e->time.step_s,
                e->time.compute + e->time.recompute + e->time.tp + e->time.cp + e->time.ep +
                    e->time.pp + e->time.zero_micro + e->time.bubble + e->time.dp_final +
                    e->time.optimizer,
                1e-9 * e->time.step_s);
  // The schedule's conditions, as `strata train` has them.
  TrainSetup x = s;
  x.schedule = pl::ScheduleKind::interleaved;
  x.virtual_stages = 4;
  EXPECT_NE(layout_problem(x, Layout{8, 16, 8, 1, 1, 1, 1, Recompute::none}).find("do not divide"),
            std::string::npos);
  x.virtual_stages = 2;
  x.micro_batches = 96;
  EXPECT_NE(layout_problem(x, l).find("--micro-batches 96 but global batch 1536"), std::string::npos);
  x.schedule = pl::ScheduleKind::zb;
  x.micro_batches = 0;
  x.virtual_stages = 1;
  EXPECT_NE(layout_problem(x, Layout{8, 16, 8, 1, 1, 3, 1, Recompute::none}).find("zero 3"),
            std::string::npos);
}
