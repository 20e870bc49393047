// Pipeline parallelism (parallel/pipeline/): P stages as threads, each running its schedule
// with the executor, train the same 20 steps as one process: losses within 1e-5, final
// weights equal (assembled from the stages' pieces) within float rounding.
#include <gtest/gtest.h>

#include <cmath>

#include "harness.h"
#include "comm/process_group.h"
#include "model/context/context_comm.h"
#include "model/stage.h"
#include "model/block.h"
#include "model/tensor/collectives.h"
#include "parallel/pipeline/executor.h"

namespace strata::ptest {
namespace {

RunSpec pipeline_spec(int layers, int accum) {
  RunSpec s;
  s.model.layers = layers;
  s.accum = accum;
  s.batch = 2 * accum;  // two sequences per micro-batch
  return s;
}

// `ref`: run_reference(s), which several layouts of one spec may share.
void expect_same_as(const RunResult& ref, const RunSpec& s, const PpRun& run) {
  const RunResult pp = run_pipeline(s, run);
  SCOPED_TRACE(testing::Message() << run.schedule << " pp " << run.pp << " dp " << run.dp
                                  << " V " << run.virt << " M " << s.accum);
  EXPECT_LE(max_abs_diff(ref.losses, pp.losses), 1e-5);
  for (float x : pp.params) ASSERT_FALSE(std::isnan(x)) << "a weight no stage holds";
  // The tied wte gradient is a sum over two stages (another order of float additions), which
  // AdamW can amplify on near-zero gradients: the data-parallel tests' bound.
  EXPECT_LE(max_abs_diff(ref.params, pp.params), 1e-4);
  EXPECT_LT(ref.losses.back(), ref.losses.front() - 0.1) << "the test model does not learn";
}

void expect_same_as_one_process(const RunSpec& s, const PpRun& run) { expect_same_as(run_reference(s), s, run); }

TEST(Pipeline, GPipe1F1BAndZeroBubbleEqualOneProcess) {
  const RunSpec s = pipeline_spec(4, 4);
  const RunResult ref = run_reference(s);
  for (int P : {2, 3, 4})
    for (const char* sched : {"gpipe", "1f1b", "zb"}) {
      PpRun run;
      run.pp = P;
      run.schedule = sched;
      expect_same_as(ref, s, run);
    }
}

TEST(Pipeline, InterleavedEqualsOneProcess) {
  for (int P : {2, 3}) {
    PpRun run;
    run.pp = P;
    run.virt = 2;
    run.schedule = "interleaved";
    expect_same_as_one_process(pipeline_spec(2 * P, P), run);
  }
}

TEST(Pipeline, WithDataParallelAtZero0And1) {
  for (int zero : {0, 1}) {
    PpRun run;
    run.pp = 2;
    run.dp = 2;
    run.zero = zero;
    RunSpec s = pipeline_spec(4, 4);
    s.batch = 16;
    expect_same_as_one_process(s, run);
  }
}

// The stage's engine is the data-parallel/ZeRO engine: every schedule at every ZeRO stage
// over dp 2 (zero-bubble at ZeRO 0-1: at 2-3 it is refused, train/pipeline_rank.cc), 8 steps.
TEST(Pipeline, EveryScheduleAtEveryZeroStage) {
  for (int P : {2, 3, 4})
    for (const char* sched : {"gpipe", "1f1b", "interleaved", "zb"}) {
      const bool inter = std::string(sched) == "interleaved", zb = std::string(sched) == "zb";
      RunSpec s = pipeline_spec(inter ? 2 * P : P, inter ? P : 4);
      s.batch = 2 * 2 * s.accum;  // dp 2
      s.steps = 8;
      const RunResult ref = run_reference(s);  // the same for every ZeRO stage
      for (int zero : {0, 1, 2, 3}) {
        if (zb && zero >= 2) continue;
        PpRun run;
        run.pp = P;
        run.dp = 2;
        run.zero = zero;
        run.schedule = sched;
        run.virt = inter ? 2 : 1;
        SCOPED_TRACE(testing::Message() << "zero " << zero);
        expect_same_as(ref, s, run);
      }
    }
}

TEST(Pipeline, UnevenSplitAndFewerMicroBatchesThanStages) {
  PpRun run;
  run.pp = 2;
  run.split = {3, 1};
  expect_same_as_one_process(pipeline_spec(4, 1), run);
  run.pp = 3;
  run.split = {};
  expect_same_as_one_process(pipeline_spec(3, 2), run);
}

// Every schedule (interleaved with V = 2 on 2P layers, M = P; the others on P layers, M = 4)
// at P = 3 and 4, each stage laid out as `base` says (tp, dp), two sequences per micro-batch
// and dp rank; zero-bubble with ZeRO 1 when dp > 1.
void expect_every_schedule_at_three_and_four_stages(const PpRun& base) {
  for (int P : {3, 4}) {
    RunSpec plain = pipeline_spec(P, 4);  // gpipe, 1f1b and zb train the same model
    plain.batch = 2 * base.dp * plain.accum;
    const RunResult plain_ref = run_reference(plain);
    for (const char* sched : {"gpipe", "1f1b", "zb", "interleaved"}) {
      PpRun run = base;
      run.pp = P;
      run.schedule = sched;
      run.zero = std::string(sched) == "zb" && run.dp > 1 ? 1 : 0;
      const bool inter = std::string(sched) == "interleaved";
      run.virt = inter ? 2 : 1;
      if (!inter) {
        expect_same_as(plain_ref, plain, run);
        continue;
      }
      RunSpec s = pipeline_spec(2 * P, P);
      s.batch = 2 * run.dp * s.accum;
      expect_same_as_one_process(s, run);
    }
  }
}

// Pipeline x tensor parallel (threads): every schedule at P = 3 and 4 with stages of tp 2
// (6 and 8 ranks), sequence parallel, and zero-bubble without it and with dp 2 (at pp 2
// and 3: 8 and 12 ranks): one process's losses and weights.
TEST(Pipeline, TensorParallelStagesEqualOneProcess) {
  PpRun run;
  run.tp = 2;
  expect_every_schedule_at_three_and_four_stages(run);
  run.pp = 3;
  run.sp = false;
  run.schedule = "zb";
  expect_same_as_one_process(pipeline_spec(3, 4), run);
  run.sp = true;
  run.dp = 2;
  for (int P : {2, 3}) {  // 8 and 12 ranks
    run.pp = P;
    RunSpec s = pipeline_spec(4, 4);
    s.batch = 16;  // two sequences per micro-batch and dp rank
    expect_same_as_one_process(s, run);
  }
}

// Three and four stages with dp 2 (6 and 8 ranks), every schedule, ZeRO 1 for zero-bubble.
TEST(Pipeline, DataParallelAtThreeAndFourStagesEqualsOneProcess) {
  PpRun run;
  run.dp = 2;
  expect_every_schedule_at_three_and_four_stages(run);
}

// The split backward's stash is counted in a tensor-parallel stage's activation bytes:
// B·T·(2C + 7C/T) floats per block and slot.
TEST(Pipeline, TensorParallelStashIsCountedInActivationBytes) {
  const model::GPTConfig cfg = pipeline_spec(2, 1).model;
  const model::StageChunk ch{0, 2, true, false};
  const int B = 2, slots = 3;
  auto world = comm::make_thread_world(2);
  for (bool sp : {true, false}) {
    model::TensorComm tc(*world[0], sp);
    auto bytes = [&](bool split) {
      return model::StageModel(cfg, {ch}, {slots}, B, DType::f32, split, &tc).activation_bytes();
    };
    const int64_t N = int64_t(B) * cfg.seq;
    EXPECT_EQ(bytes(true) - bytes(false),
              int64_t(sizeof(float)) * slots * 2 *
                  model::block_stash_floats(
                      N, model::LocalWidths({false, cfg.dim, cfg.heads, cfg.heads, 4 * cfg.dim}, 2)))
        << "sp " << sp;
  }
}

// The tensor-parallel split backward (zero-bubble's B then W) computes the fused backward's
// products in the same order per gradient: the weights after 20 steps equal 1F1B's bit for
// bit, with and without sequence parallelism, in fp32 and bf16; and its two passes together
// move the fused pass's tensor-parallel bytes (the weight pass re-gathers the norm outputs
// the input pass does not need).
TEST(Pipeline, TensorParallelSplitBackwardEqualsFused) {
  for (DType compute : {DType::f32, DType::bf16})
    for (bool sp : {true, false}) {
      RunSpec s = pipeline_spec(4, 4);
      s.compute = compute;
      PpRun run;
      run.pp = 2;
      run.tp = 2;
      run.sp = sp;
      run.schedule = "1f1b";
      int64_t fused_bytes = 0, split_bytes = 0;
      const RunResult fused = run_pipeline(s, run, &fused_bytes);
      run.schedule = "zb";
      const RunResult split = run_pipeline(s, run, &split_bytes);
      SCOPED_TRACE(testing::Message() << dtype_name(compute) << " sp " << sp);
      EXPECT_EQ(fused.losses, split.losses);
      EXPECT_EQ(fused.params, split.params);
      EXPECT_GT(fused_bytes, 0);
      EXPECT_EQ(fused_bytes, split_bytes);
    }
}

// Activation memory follows the schedule's in-flight count: GPipe holds M micro-batches on
// every stage, 1F1B P − s on stage s, so stage 0's slots cost M / P times less under 1F1B.
TEST(Pipeline, ActivationSlotsFollowInFlightCount) {
  namespace pl = parallel::pipeline;
  const model::GPTConfig cfg = RunSpec().model;
  const int P = 4, M = 8;
  const pl::Schedule g = pl::make_schedule(pl::ScheduleKind::gpipe, P, M);
  const pl::Schedule f = pl::make_schedule(pl::ScheduleKind::one_f_one_b, P, M);
  EXPECT_EQ(pl::slots_for(g, 0), std::vector<int>{M});
  EXPECT_EQ(pl::slots_for(f, 0), std::vector<int>{P});
  EXPECT_EQ(pl::slots_for(f, P - 1), std::vector<int>{1});
  const model::StageChunk ch{0, 1, true, false};
  auto bytes = [&](int slots) { return model::StageModel(cfg, {ch}, {slots}, 2).activation_bytes(); };
  const int64_t per_slot = bytes(2) - bytes(1);
  EXPECT_GT(per_slot, 0);
  EXPECT_EQ(bytes(M) - bytes(P), (M - P) * per_slot);  // slots are the whole difference
}

// A tensor-parallel stage: with sequence parallelism each tp rank keeps, receives and sends
// its 1/T row slice of the activation; without it the whole activation. Its shard holds the
// units' local parameters, under the one-process count. A context-parallel stage sends its
// 1/C of the rows.
TEST(Pipeline, TensorParallelStageSendsItsSlice) {
  const model::GPTConfig cfg = RunSpec().model;
  const model::StageChunk ch{0, 1, true, false};
  const int B = 2, T = cfg.seq, C = cfg.dim;
  std::vector<int32_t> tokens(size_t(B * T), 1);
  auto world = comm::make_thread_world(2);
  model::StageModel one(cfg, {ch}, {1}, B);
  for (bool sp : {true, false}) {
    model::TensorComm tc(*world[1], sp);
    model::StageModel st(cfg, {ch}, {1}, B, DType::f32, false, &tc);
    st.set_inputs({{tokens.data(), tokens.data(), nullptr, B, T}});
    EXPECT_EQ(st.message_floats(0), int64_t(B) * T * C / (sp ? 2 : 1)) << "sp " << sp;
    EXPECT_LT(st.num_params(), one.num_params());
    EXPECT_GT(st.wte_range().second, st.wte_range().first);
    EXPECT_EQ(st.wte_range().second - st.wte_range().first,
              (one.wte_range().second - one.wte_range().first) / 2);
  }
  // A context-parallel stage (cp 2) keeps, receives and sends its B·T/C rows, whole units.
  model::ContextComm cc(*world[1], {});
  model::StageModel st(cfg, {ch}, {1}, B, DType::f32, false, nullptr, &cc);
  st.set_inputs({{tokens.data(), tokens.data(), nullptr, B, T}});
  EXPECT_EQ(st.message_floats(0), int64_t(B) * T * C / 2);
  EXPECT_EQ(st.num_params(), one.num_params());
  EXPECT_LT(st.activation_bytes(), one.activation_bytes());
}

// Pipeline x context parallel: each stage's cp ranks keep their chunks of every micro-batch
// and run ring or Ulysses attention over the stage's cp group; zigzag and contiguous chunks,
// every schedule (zero-bubble's input pass runs the cp attention backward), with tp 2 and
// with dp 2 under ZeRO 1 (8 ranks): one process's losses and weights.
TEST(Pipeline, ContextParallelStagesEqualOneProcess) {
  struct Case {
    const char* schedule;
    model::CpMode mode;
    model::CpChunks chunks;
    int tp, dp, zero;
  };
  using M = model::CpMode;
  using K = model::CpChunks;
  for (const Case& c : {Case{"1f1b", M::ring, K::zigzag, 1, 1, 0},
                        Case{"gpipe", M::ulysses, K::zigzag, 1, 1, 0},
                        Case{"zb", M::ulysses, K::contiguous, 1, 1, 0},
                        Case{"zb", M::ring, K::zigzag, 1, 1, 0},
                        Case{"zb", M::ring, K::zigzag, 2, 1, 0},
                        Case{"1f1b", M::ulysses, K::zigzag, 1, 2, 1}}) {
    PpRun run;
    run.cp = 2;
    run.cp_opt = {c.mode, c.chunks};
    run.schedule = c.schedule;
    run.tp = c.tp;
    run.dp = c.dp;
    run.zero = c.zero;
    SCOPED_TRACE(testing::Message() << "cp 2 " << model::cp_mode_name(c.mode) << " "
                                    << model::cp_chunks_name(c.chunks) << " tp " << c.tp);
    RunSpec s = pipeline_spec(4, 4);
    s.batch = 8 * c.dp;
    expect_same_as_one_process(s, run);
  }
  PpRun run;  // interleaved: Ulysses keeps each layer's output per slot
  run.cp = 2;
  run.cp_opt = {model::CpMode::ulysses, model::CpChunks::zigzag};
  run.virt = 2;
  run.schedule = "interleaved";
  expect_same_as_one_process(pipeline_spec(4, 2), run);
}

}  // namespace
}  // namespace strata::ptest
