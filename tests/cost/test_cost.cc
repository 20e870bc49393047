// The closed-form costs (src/cost/) against hand counts, and the formulas that two parts of
// the project once computed apart held to one answer.
#include <gtest/gtest.h>

#include "cost/bubble.h"
#include "cost/comm.h"
#include "cost/flops.h"
#include "cost/reliability.h"
#include "cost/shapes.h"
#include "cost/stage_activations.h"

namespace strata::cost {
namespace {

// Two blocks of width 8, vocabulary 50 padded to 64, 16 positions; block 1 of 2 is MoE with
// 4 experts.
GptShape small_moe() { return {2, 8, 2, 16, 50, 64, 1, 4, 2}; }

TEST(CostShapes, ParametersEqualTheHandCount) {
  // wte 64·8 + wpe 16·8 + 2 blocks of (ln 16 + qkv 216 + proj 72 + ln 16 + MLP 552) + ln_f 16.
  const int64_t dense = 512 + 128 + 2 * (16 + 216 + 72 + 16 + 552) + 16;
  EXPECT_EQ(mlp_params(8, 1), 552);
  GptShape m = small_moe();
  // The MoE block: its router (4·8) and 4 expert MLPs in place of one.
  EXPECT_EQ(local_params(m, 1, 0), dense + 32 + 3 * 552);
  EXPECT_EQ(local_params(m, 1, 0, 2), dense + 32 + 552);  // 2 experts per ep rank
  EXPECT_EQ(local_params(m, 1, 0, 4), dense + 32);        // one: where the dense MLP was
  m.moe_layers = 0;
  EXPECT_EQ(local_params(m, 1, 0), dense);
  int64_t rows = 0;
  for (int r = 0; r < 3; ++r) rows += tp_vocab_rows(64, 3, r);
  EXPECT_EQ(rows, 64);
}

// The width rules every description of a model shares (model/, plan/ and the cost models).
TEST(CostShapes, WidthRules) {
  EXPECT_EQ(padded_vocab(50257), 50304);
  EXPECT_EQ(padded_vocab(32000), 32000);
  EXPECT_EQ(padded_vocab(1), 64);
  EXPECT_EQ(llama_ffn(256), 768);     // 8·256/3 = 682, up to 768
  EXPECT_EQ(llama_ffn(4096), 11008);  // Llama 2 7B's
  EXPECT_EQ(default_ffn(false, 768), 3072);
  EXPECT_EQ(default_ffn(true, 256), 768);
  GptShape m;
  m.dim = 256;
  EXPECT_EQ(dense_ffn(m), 1024);
  m.llama = true;
  EXPECT_EQ(dense_ffn(m), 768);
  EXPECT_EQ(align64(int64_t(0)), 0);
  EXPECT_EQ(align64(int64_t(65)), 128);
  EXPECT_EQ(round_up(uint64_t(4097), 4096), 8192u);
}

// A block of neither strata's GPT-2 nor its Llama parts (a planner's shape): a GELU MLP of
// 2C without biases, LayerNorm, rotary positions, one key/value head, an untied head.
TEST(CostShapes, MixedBlockPartsEqualTheHandCount) {
  GptShape m;
  m.layers = 2, m.dim = 8, m.heads = 2, m.kv_heads = 1, m.ffn = 16;
  m.max_seq = 16, m.vocab = 50, m.padded_vocab = 64, m.tied = false;
  m.parts = BlockParts{false, false, true, false};
  // wte and lm_head 64·8 each; a block: 2 LayerNorms 2·16, q and o 2·64, k and v 2·8·4, fc and
  // proj 2·8·16; ln_f 16.
  EXPECT_EQ(local_params(m, 1, 0), 2 * 512 + 2 * (32 + 128 + 64 + 256) + 16);
  // tp 2: 32 rows of each, q and o of one head (2·8·4), the key/value head on both (2·8·4),
  // the MLP's half (2·8·8); the norms on both.
  EXPECT_EQ(local_params(m, 2, 1), 2 * 256 + 2 * (32 + 64 + 64 + 128) + 16);
}

TEST(CostFlops, ThreeBlockForwardsAreTheTrainingCount) {
  // A block's forward and backward (3 forwards) over its 12C² matmul parameters is PaLM's
  // 6N + 12·L·d·T for those parameters.
  const int64_t L = 4, C = 64, T = 32;
  EXPECT_DOUBLE_EQ(3.0 * L * block_forward_flops_per_token(C, T),
                   train_flops_per_token(double(L * 12 * C * C), L, C, T));
  EXPECT_DOUBLE_EQ(mfu(1000, 2e6, 4e9), 0.5);
  EXPECT_DOUBLE_EQ(mfu(1000, 2e6, 0), 0);
}

TEST(CostBubble, ClosedFormsPerSchedule) {
  EXPECT_DOUBLE_EQ(pipeline_bubble(4, 8), 3.0 / 11);
  EXPECT_DOUBLE_EQ(pipeline_bubble(4, 8, 2), 3.0 / 19);
  EXPECT_DOUBLE_EQ(zero_bubble_bubble(4, 8), 3.0 / 27);
  EXPECT_DOUBLE_EQ(pipeline_bubble(1, 5), 0);
  EXPECT_DOUBLE_EQ(gpipe_makespan(3, 4, 1, 2, 0.5), 6 * 3 + 4 * 0.5);
}

TEST(CostReliability, FreeCheckpointsLeaveOnlyTheRestarts) {
  // δ = 0: Daly's interval is 0 and the overhead is the restarts' R/M, as the checkpointer's
  // advice computes it; the planner once answered 1 (every second lost).
  const double M = 3600, R = 36;
  EXPECT_DOUBLE_EQ(daly_interval_s(0, M), 0);
  EXPECT_DOUBLE_EQ(checkpoint_overhead_fraction(0, 0, M, R), R / M);
  CheckpointPlanInput in;
  in.gpus = 1;
  in.gpu_mtbf_s = M;
  in.restart_s = R;  // no storage bandwidth given: writing takes 0 s
  EXPECT_DOUBLE_EQ(plan_checkpoints(in).overhead_fraction, R / M);
  // A stall with no interval, or no MTBF, loses everything.
  EXPECT_DOUBLE_EQ(checkpoint_overhead_fraction(0, 10, M, R), 1);
  EXPECT_DOUBLE_EQ(checkpoint_overhead_fraction(100, 10, 0, R), 1);
  EXPECT_DOUBLE_EQ(checkpoint_overhead_fraction(100, 10, M, R), 10.0 / 100 + (50 + R) / M);
}

TEST(CostReliability, LostWorkPerFailureByRecoveryMode) {
  // From disk every τ: τ/2 on average; from in-memory copies every K steps of t: at most K·t.
  EXPECT_DOUBLE_EQ(lost_work_per_failure_s(Recovery::disk, 600, 90), 300 + 90);
  EXPECT_DOUBLE_EQ(lost_work_per_failure_s(Recovery::memory, 2 * 1.5, 90), 3 + 90);
  EXPECT_DOUBLE_EQ(expected_loss_per_failure_s(600, 90), 390);
  CheckpointPlanInput in;
  in.gpus = 1;
  in.gpu_mtbf_s = 86400;
  in.stall_s = 30;
  in.restart_s = 600;
  CheckpointPlan p = plan_checkpoints(in);
  EXPECT_DOUBLE_EQ(p.disk_lost_per_failure_s, p.daly_s / 2 + 600);
  EXPECT_EQ(p.memory_lost_per_failure_s, 0) << "no step time: no in-memory figure";
  in.step_s = 4;
  in.mem_every = 3;
  p = plan_checkpoints(in);
  EXPECT_DOUBLE_EQ(p.memory_lost_per_failure_s, 12 + 600);
  EXPECT_DOUBLE_EQ(p.memory_restart_fraction, 612.0 / 86400);
  EXPECT_LT(p.memory_lost_per_failure_s, p.disk_lost_per_failure_s);
}

TEST(CostComm, ExpertAndGradientBytes) {
  const GptShape m = small_moe();
  // 2 ranks, 3 tokens each, top-2: at most 12 rows (one per token and owner), each travelling
  // 4 times as 8 floats with 2 entries of (expert, slot) and gate both ways; the counts.
  EXPECT_EQ(ep_group_bytes_per_micro(m, 2, 3), 2 * 4 * 8 + 2 * 2 * 8 + 12 * (4 * 8 * 4 + 2 * 16));
  EXPECT_EQ(ep_group_bytes_per_micro(m, 1, 3), 0);
  EXPECT_EQ(grad_reduce_bytes_per_step(1000, 2, 1, 4, Precision::bf16), 2000);
  EXPECT_EQ(grad_reduce_bytes_per_step(1000, 2, 2, 4, Precision::fp32), 16000);
  EXPECT_EQ(grad_reduce_bytes_per_step(1000, 1, 2, 4, Precision::fp32), 0);
}

// Node-limited routing: a token's rows go to at most min(K, P, R) ranks, R the most ranks M of
// the G expert groups lie on (cost/comm.h), by hand.
TEST(CostComm, ExpertRowsWithTheGroupLimit) {
  GptShape m = small_moe();  // 4 experts, top-2, one MoE block
  EXPECT_EQ(ep_group_rows_per_micro(m, 2, 3), 1 * 2 * 3 * 2);  // no limit: min(2, 2) per token
  // 2 groups of 2 experts = the 2 ranks' experts; each token within 1 group: one rank.
  m.route_groups = 2, m.route_max_groups = 1;
  EXPECT_EQ(ep_group_rows_per_token(m, 2), 1);
  EXPECT_EQ(ep_group_rows_per_micro(m, 2, 3), 1 * 2 * 3 * 1);
  EXPECT_EQ(ep_group_bytes_per_micro(m, 2, 3), 2 * 4 * 8 + 2 * 2 * 8 + 6 * (4 * 8 * 4 + 2 * 16));
  m.route_max_groups = 2;  // every group: no limit
  EXPECT_EQ(ep_group_rows_per_token(m, 2), 2);
  // R of (E, P, G, M). No limit: P.
  EXPECT_EQ(ep_group_limit_ranks(8, 4, 0, 0), 4);
  EXPECT_EQ(ep_group_limit_ranks(8, 4, 4, 4), 4);
  // G divides P: groups of P/G whole ranks, M of them.
  EXPECT_EQ(ep_group_limit_ranks(16, 8, 2, 1), 4);
  EXPECT_EQ(ep_group_limit_ranks(16, 8, 4, 3), 6);
  EXPECT_EQ(ep_group_limit_ranks(8, 4, 4, 2), 2);
  // P divides G: a group within one rank, M ranks at most (and at most P).
  EXPECT_EQ(ep_group_limit_ranks(8, 2, 4, 1), 1);
  EXPECT_EQ(ep_group_limit_ranks(16, 2, 8, 3), 2);
  // Neither: E 12, G 6 (experts 0-1, 2-3, ...), P 4 (experts 0-2, 3-5, ...): group 1 is on
  // ranks 0 and 1, group 4 (8-9) on 2 and 3; two groups reach all 4.
  EXPECT_EQ(ep_group_limit_ranks(12, 4, 6, 1), 2);
  EXPECT_EQ(ep_group_limit_ranks(12, 4, 6, 2), 4);
  // E 12, G 4 (0-2, 3-5, 6-8, 9-11), P 6 (0-1, 2-3, ...): ranks {0,1}, {1,2}, {3,4}, {4,5}.
  // Two groups reach 4 ranks ({0,1,3,4}); any three share a rank: 5, not 6.
  EXPECT_EQ(ep_group_limit_ranks(12, 6, 4, 1), 2);
  EXPECT_EQ(ep_group_limit_ranks(12, 6, 4, 2), 4);
  EXPECT_EQ(ep_group_limit_ranks(12, 6, 4, 3), 5);
  // Top-6 of 12 experts on 6 ranks within 3 of 4 groups: 5 rows per token, not 6.
  GptShape w = m;
  w.experts = 12, w.top_k = 6, w.route_groups = 4, w.route_max_groups = 3;
  EXPECT_EQ(ep_group_rows_per_token(w, 6), 5);
  w.top_k = 4;
  EXPECT_EQ(ep_group_rows_per_token(w, 6), 4);  // K is the smaller
}

// A pipeline stage's formula (cost/stage_activations.h) and the one-process model's: one
// chunk with the embedding and the head in one slot is the one-process model less its copy of
// the inputs (with cp too); each further slot adds the per-slot pieces again, the working layer
// and scratch once; a chunk between the ends keeps two messages per slot; the split backward's
// stash is per block and slot.
TEST(CostActivations, AStageOfOneChunkIsTheOneProcessModel) {
  for (int policy : {0, 1, 2})
    for (int tp : {1, 2})
      for (bool bf16 : {false, true}) {
        GptShape m{4, 32, 4, 64, 100, 128};
        m.recompute = Recompute(policy);
        m.recomputed_layers = policy == 2 ? 3 : 0;
        const ChunkSlots whole{4, m.recomputed_layers, true, true, 1};
        const ActivationBuffers one = activation_buffers(m, tp, true, tp - 1, 2, bf16);
        const StageActivationBuffers st = stage_activation_buffers(m, {whole}, false, tp, true, tp - 1, 2, bf16);
        EXPECT_EQ(st.total() + one.inputs, one.total()) << policy << " " << tp << " " << bf16;
        EXPECT_EQ(st.messages, 0);
        for (bool ring : {true, false}) {
          const int64_t cp = stage_activation_buffers(m, {whole}, false, tp, true, tp - 1, 2, bf16, 2, ring, 64).total();
          EXPECT_EQ(cp + 12 * 2 * 32, cp_activation_bytes(m, tp, true, tp - 1, 2, bf16, ring, 2, 64))
              << policy << " " << tp << " " << bf16 << " " << ring;
        }
        ChunkSlots three = whole;
        three.slots = 3;
        const StageActivationBuffers st3 = stage_activation_buffers(m, {three}, false, tp, true, tp - 1, 2, bf16);
        EXPECT_EQ(st3.total() - st.total(), 2 * (st.input + st.layers_kept + st.head));
        EXPECT_EQ(st3.recompute + st3.scratch, st.recompute + st.scratch);
        const ChunkSlots middle{2, 0, false, false, 2};
        const int64_t n = tp > 1 ? 128 / tp : 128;  // rows of 2 sequences of 64, SP
        EXPECT_EQ(stage_activation_buffers(m, {middle}, false, tp, true, tp - 1, 2, bf16).messages,
                  2 * 2 * 4 * n * 32);
        EXPECT_EQ(stage_activation_buffers(m, {middle}, true, tp, true, tp - 1, 2, bf16).stash,
                  2 * 2 * 4 * (2 * 128 * 32 + 7 * 128 * 32 / tp));
      }
}

}  // namespace
}  // namespace strata::cost
