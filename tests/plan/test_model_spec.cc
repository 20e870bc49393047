// plan::ModelSpec and cost::GptShape describe one model: the round trip keeps every preset's
// shape, and the planner's parameter counts are the engine's (cost::local_params) summed over
// tensor-parallel ranks, for the presets and for shapes only the planner has (a GELU MLP of
// another width, an untied GPT, rotary GPT blocks, mixed blocks, fine-grained MoE).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/error.h"
#include "cost/flops.h"
#include "cost/shapes.h"
#include "model/gpt.h"
#include "model/shard.h"
#include "plan/estimate.h"
#include "plan/model_spec.h"

using namespace strata;
using plan::ModelSpec;

namespace {

// Every field that says what the model is (not its name, source or published batch).
void expect_same_shape(const ModelSpec& a, const ModelSpec& b, const std::string& what) {
  EXPECT_EQ(a.layers, b.layers) << what;
  EXPECT_EQ(a.hidden, b.hidden) << what;
  EXPECT_EQ(a.heads, b.heads) << what;
  EXPECT_EQ(a.kv_heads, b.kv_heads) << what;
  EXPECT_EQ(a.ffn, b.ffn) << what;
  EXPECT_EQ(a.seq, b.seq) << what;
  EXPECT_EQ(a.vocab, b.vocab) << what;
  EXPECT_EQ(a.experts, b.experts) << what;
  EXPECT_EQ(a.top_k, b.top_k) << what;
  EXPECT_EQ(a.expert_ffn, b.expert_ffn) << what;
  EXPECT_EQ(a.shared_experts, b.shared_experts) << what;
  EXPECT_EQ(a.route_groups, b.route_groups) << what;
  EXPECT_EQ(a.route_max_groups, b.route_max_groups) << what;
  EXPECT_EQ(a.mlp, b.mlp) << what;
  EXPECT_EQ(a.biases, b.biases) << what;
  EXPECT_EQ(a.layernorm, b.layernorm) << what;
  EXPECT_EQ(a.learned_pos, b.learned_pos) << what;
  EXPECT_EQ(a.tied, b.tied) << what;
  EXPECT_EQ(a.dropout, b.dropout) << what;
}

void expect_same_shape(const cost::GptShape& a, const cost::GptShape& b, const std::string& what) {
  EXPECT_EQ(a.layers, b.layers) << what;
  EXPECT_EQ(a.dim, b.dim) << what;
  EXPECT_EQ(a.heads, b.heads) << what;
  EXPECT_EQ(cost::kv_heads_of(a), cost::kv_heads_of(b)) << what;
  EXPECT_EQ(cost::dense_ffn(a), cost::dense_ffn(b)) << what;
  EXPECT_EQ(a.max_seq, b.max_seq) << what;
  EXPECT_EQ(a.vocab, b.vocab) << what;
  EXPECT_EQ(a.padded_vocab, b.padded_vocab) << what;
  EXPECT_EQ(a.moe_layers, b.moe_layers) << what;
  EXPECT_EQ(a.experts, b.experts) << what;
  EXPECT_EQ(a.top_k, b.top_k) << what;
  EXPECT_EQ(a.expert_ffn, b.expert_ffn) << what;
  EXPECT_EQ(a.shared_ffn, b.shared_ffn) << what;
  EXPECT_EQ(a.route_groups, b.route_groups) << what;
  EXPECT_EQ(a.route_max_groups, b.route_max_groups) << what;
  EXPECT_EQ(a.llama, b.llama) << what;
  EXPECT_EQ(a.tied, b.tied) << what;
  EXPECT_TRUE(cost::block_parts(a) == cost::block_parts(b)) << what;
}

// The presets and the shapes only the planner describes.
std::vector<ModelSpec> planner_shapes() {
  std::vector<ModelSpec> out;
  for (const std::string& name : plan::model_preset_names())
    out.push_back(plan::model_preset(name));
  ModelSpec wide = plan::model_preset("gpt2");  // a GELU MLP of 3h, untied, rotary
  wide.name = "gpt2 (ffn 3h, untied, rotary)";
  wide.ffn = 3 * wide.hidden, wide.tied = false, wide.learned_pos = false;
  out.push_back(wide);
  ModelSpec mixed = plan::model_preset("llama-tiny");  // SwiGLU with LayerNorm and biases
  mixed.name = "llama-tiny (LayerNorm, biases)";
  mixed.layernorm = mixed.biases = true;
  out.push_back(mixed);
  ModelSpec gqa = plan::model_preset("gpt2");  // GELU blocks with grouped-query attention
  gqa.name = "gpt2 (4 KV heads, no biases)";
  gqa.kv_heads = 4, gqa.biases = false;
  out.push_back(gqa);
  ModelSpec moe = plan::model_preset("llama-tiny");  // DeepSeekMoE-style: fine-grained, shared
  moe.name = "llama-tiny (16 experts of 128, top-4, 2 shared, 4 groups)";
  moe.experts = 16, moe.top_k = 4, moe.expert_ffn = 128, moe.shared_experts = 2;
  moe.route_groups = 4, moe.route_max_groups = 2;
  out.push_back(moe);
  ModelSpec gpt_moe = plan::model_preset("tiny");  // GPT blocks, MoE with biases
  gpt_moe.name = "tiny (8 experts, top-2)";
  gpt_moe.experts = 8, gpt_moe.top_k = 2;
  out.push_back(gpt_moe);
  return out;
}

// Whether T tp ranks split every width of m evenly (whole heads, whole KV heads, MLP columns,
// vocabulary rows), where a sum over ranks is the whole model plus what each rank repeats.
bool divides(const ModelSpec& m, int T) {
  return m.heads % T == 0 && m.kv_heads % T == 0 && m.ffn % T == 0 &&
         m.expert_width() % T == 0 && m.shared_width() % T == 0 && m.padded_vocab() % T == 0;
}

// What every tp rank holds whole, counted here from the model's description: the norms (two
// a block and the final one), the position table, the row-parallel biases (attention's output,
// each MLP's down projection) and an MoE block's router.
int64_t replicated_by_hand(const ModelSpec& m) {
  const int64_t C = m.hidden, norm = m.layernorm ? 2 * C : C;
  const int64_t mlps = m.moe() ? m.experts + (m.shared_experts > 0 ? 1 : 0) : 1;
  const int64_t block = 2 * norm + (m.biases ? C + mlps * C : 0) + (m.moe() ? m.experts * C : 0);
  return m.layers * block + norm + (m.learned_pos ? m.seq * C : 0);
}

}  // namespace

// ModelSpec -> GptShape -> ModelSpec keeps every preset's shape and the planner's own shapes;
// a shape keeps its GptShape the other way round.
TEST(ModelSpecShape, RoundTripKeepsTheShape) {
  for (const ModelSpec& m : planner_shapes()) {
    const cost::GptShape g = plan::gpt_shape(m);
    const ModelSpec back = plan::model_spec(g);
    expect_same_shape(m, back, m.name);
    expect_same_shape(g, plan::gpt_shape(back), m.name);
  }
}

// strata's own configs (every preset as `strata train` builds it, and MoE blocks on every
// layer with fine-grained and shared experts) as the engine's shape, through the planner and
// back.
TEST(ModelSpecShape, EngineShapesRoundTripThroughThePlanner) {
  std::vector<model::GPTConfig> configs;
  for (const model::ModelPreset& p : model::model_presets())
    configs.push_back(model::GPTConfig::preset(p.name));
  model::GPTConfig moe = model::GPTConfig::preset("llama-tiny");
  moe.moe.experts = 8, moe.moe.top_k = 2, moe.moe.expert_ffn = 192, moe.moe.shared_experts = 1;
  moe.moe.route_groups = 4, moe.moe.route_max_groups = 2;
  configs.push_back(moe);
  for (const model::GPTConfig& c : configs) {
    const cost::GptShape g = model::gpt_shape(c);
    const ModelSpec m = plan::model_spec(g);
    const std::string what = std::to_string(c.layers) + " x " + std::to_string(c.dim);
    expect_same_shape(g, plan::gpt_shape(m), what);
    EXPECT_EQ(plan::count_params(m).total(), c.num_params()) << what;
  }
  // MoE blocks on some layers only are not a planner model, and say so.
  model::GPTConfig every2 = moe;
  every2.moe.every = 2;
  EXPECT_THROW(plan::model_spec(model::gpt_shape(every2)), Error);
}

// The planner's total is cost::local_params at tp 1, and at tp 2 and 4 (where the widths
// divide) the sum over the ranks less what each further rank repeats; a rank's share of a
// one-stage layout is that rank's local_params.
TEST(ModelSpecShape, PlannerParamsAreTheEngineCountOverTpRanks) {
  for (const ModelSpec& m : planner_shapes()) {
    const cost::GptShape g = plan::gpt_shape(m);
    const int64_t total = plan::count_params(m).total();
    EXPECT_EQ(total, cost::local_params(g, 1, 0)) << m.name;
    for (int T : {2, 4}) {
      if (!divides(m, T)) continue;
      int64_t sum = 0;
      for (int r = 0; r < T; ++r) sum += cost::local_params(g, T, r);
      EXPECT_EQ(sum, total + (T - 1) * replicated_by_hand(m)) << m.name << " tp " << T;
      plan::Layout l;
      l.tp = T;
      const plan::StageParams p = plan::stage_params(m, l, true, true);
      EXPECT_EQ(p.dense + p.expert, cost::local_params(g, T, T - 1)) << m.name << " tp " << T;
    }
    if (m.moe())
      for (int ep : {2, 4}) {
        plan::Layout l;
        l.ep = ep;
        const plan::StageParams p = plan::stage_params(m, l, true, true);
        EXPECT_EQ(p.dense + p.expert, cost::local_params(g, 1, 0, ep)) << m.name << " ep " << ep;
      }
  }
}

// One FLOP count: the planner's model FLOPs per token are cost::model_flops_per_token, 6N +
// 12·L·h·s with N every weight a token multiplies by: Llama 2 7B's released 6,738,415,616
// parameters less its input embedding (V·h) and final norm (h); GPT-2's 124,475,904 less its
// position table (s·h) and final LayerNorm (2h), its tied embedding being the head.
TEST(ModelSpecShape, ModelFlopsCountTheWeightsATokenMultipliesBy) {
  const ModelSpec llama = plan::model_preset("llama2-7b");
  const double n7 = 6'738'415'616.0 - 32000.0 * 4096 - 4096;
  EXPECT_DOUBLE_EQ(plan::model_flops_per_token(llama), 6 * n7 + 12.0 * 32 * 4096 * 4096);
  const ModelSpec gpt2 = plan::model_preset("gpt2");
  const double n2 = 124'475'904.0 - 1024.0 * 768 - 2 * 768;
  EXPECT_DOUBLE_EQ(plan::model_flops_per_token(gpt2), 6 * n2 + 12.0 * 12 * 768 * 1024);
  // A layer's forward is the engine's block count (cost::block_forward_flops_per_token, what
  // model/stage_cost.h balances stages by): 2 per matrix weight, 4·s·h for the scores and values.
  EXPECT_DOUBLE_EQ(plan::layer_forward_flops_per_token(plan::model_preset("gpt3-175b"), 2048),
                   24.0 * 12288 * 12288 + 4.0 * 2048 * 12288);
  EXPECT_DOUBLE_EQ(plan::layer_forward_flops_per_token(llama, 4096),
                   2.0 * (4 * 4096.0 * 4096 + 3 * 4096.0 * 11008) + 4.0 * 4096 * 4096);
  EXPECT_DOUBLE_EQ(plan::layer_forward_flops_per_token(llama, 4096),
                   cost::block_forward_flops_per_token(4096, 4096, 32, 32, 11008, true));
  for (const ModelSpec& m : planner_shapes())
    EXPECT_DOUBLE_EQ(plan::model_flops_per_token(m),
                     cost::model_flops_per_token(plan::gpt_shape(m), m.seq))
        << m.name;
}
