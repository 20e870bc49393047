// `strata plan` with fine-grained and shared experts (--expert-ffn, --shared-experts;
// docs/planner.md): the planner's counts by hand, and equal to the engine's (model/shard.h)
// on both paths, the search's ModelSpec and --local's GPTConfig.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "model/gpt.h"
#include "model/shard.h"
#include "nlohmann/json.hpp"
#include "plan/estimate.h"
#include "plan/model_spec.h"
#include "plan_json.h"
#include "support/run.h"

namespace {

using nlohmann::json;
using namespace strata::plan;
using strata::test::plan_json;
using strata::test::run_strata;
using strata::test::Streams;

// 2 GPT-2 layers of width 64, each an MoE block of 8 routed experts of 32 hidden units (top-2)
// and 2 shared experts (one MLP of 64 units).
ModelSpec fine_grained() {
  ModelSpec m;
  apply_arch(m, "gpt");
  m.layers = 2, m.hidden = 64, m.heads = 4, m.kv_heads = 4, m.ffn = 256, m.seq = 32, m.vocab = 100;
  m.experts = 8, m.top_k = 2, m.expert_ffn = 32, m.shared_experts = 2;
  return m;
}

// The same model as `strata train` builds it.
strata::model::GPTConfig engine_model() {
  strata::model::GPTConfig g;
  g.layers = 2, g.dim = 64, g.heads = 4, g.seq = 32, g.vocab = 100, g.padded_vocab = 128;
  g.moe.experts = 8, g.moe.top_k = 2, g.moe.expert_ffn = 32, g.moe.shared_experts = 2;
  g.validate();
  return g;
}

const std::string kShape =
    "--layers 2 --dim 64 --heads 4 --seq 32 --vocab 100 --experts 8 --top-k 2 --expert-ffn 32 "
    "--shared-experts 2 ";

}  // namespace

// Per layer: attention 4·64² + 4·64 = 16640, norms 4·64 = 256, a routed expert 2·64·32 + 32 + 64
// = 4192, the shared MLP (64 units) 2·64·64 + 64 + 64 = 8320, the router 64·8 = 512. Outside the
// layers: embedding 128·64, positions 32·64, final norm 128 (tied head).
TEST(PlanMoE, ActiveAndTotalParamsByHand) {
  const ParamCounts c = count_params(fine_grained());
  EXPECT_EQ(c.expert_mlp, 4192);
  EXPECT_EQ(c.shared, 8320);
  EXPECT_EQ(c.router, 512);
  EXPECT_EQ(c.per_layer(), 16640 + 256 + 8 * 4192 + 512 + 8320);
  EXPECT_EQ(c.per_layer_active(), 16640 + 256 + 2 * 4192 + 512 + 8320);
  const int64_t outside = 128 * 64 + 32 * 64 + 128;
  EXPECT_EQ(c.total(), 2 * 59264 + outside);
  EXPECT_EQ(c.active(), 2 * 34112 + outside);
  EXPECT_EQ(c.total() - c.active(), 2 * (8 - 2) * 4192);  // the experts a token skips
  EXPECT_EQ(c.expert_total(), 2 * 8 * 4192);              // routed only
  EXPECT_EQ(c.shared_total(), 2 * 8320);
  // Without the flags the experts are the dense MLP's width and there are no shared ones.
  ModelSpec plain = fine_grained();
  plain.expert_ffn = plain.shared_experts = 0;
  const ParamCounts p = count_params(plain);
  EXPECT_EQ(p.expert_mlp, 2 * 64 * 256 + 256 + 64);
  EXPECT_EQ(p.shared, 0);
  // SwiGLU experts have three matrices and no biases.
  ModelSpec llama = fine_grained();
  apply_arch(llama, "llama");
  EXPECT_EQ(count_params(llama).expert_mlp, 3 * 64 * 32);
  EXPECT_EQ(count_params(llama).shared, 3 * 64 * 64);
}

// The search's ModelSpec counts what the engine holds: the whole model, and on each tp rank of
// each layout its dense part (the router and shared experts included) and its E/ep experts.
TEST(PlanMoE, SearchCountsEqualTheEngine) {
  const ModelSpec m = fine_grained();
  const strata::model::GPTConfig g = engine_model();
  EXPECT_EQ(count_params(m).total(), g.num_params());
  for (int tp : {1, 2, 4})
    for (int ep : {1, 2, 4, 8}) {
      Layout l;
      l.tp = tp, l.ep = ep, l.dp = 8;
      const StageParams p = stage_params(m, l, true, true);
      EXPECT_EQ(p.expert, strata::model::expert_params(g, ep, tp)) << tp << " " << ep;
      EXPECT_EQ(p.dense + p.expert, strata::model::local_num_params(g, {tp, tp - 1}, {ep, 0}))
          << tp << " " << ep;
    }
}

// The command line: --local's ranks and the search's best layout hold the same parameters, and
// both report the model's total and active counts.
TEST(PlanMoE, LocalAndSearchAgreeOnTheFlags) {
  const json local = plan_json("--local " + kShape + "--max-seq 32 --tp 2 --dp 2 --ep 2");
  const json search =
      plan_json(kShape + "--gpus 4 --tp 2 --dp 2 --ep 2 --pp 1 --cp 1 --batch 4 --micro-batch 1");
  const strata::model::GPTConfig g = engine_model();
  const ParamCounts c = count_params(fine_grained());
  ASSERT_EQ(local["ranks"].size(), 2u);
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(local["ranks"][r]["params"], strata::model::local_num_params(g, {2, r}, {2, 0}));
    EXPECT_EQ(local["ranks"][r]["expert_params"], strata::model::expert_params(g, 2, 2));
  }
  const json& mem = search["best"]["memory"];
  EXPECT_EQ(mem["dense_params"].get<int64_t>() + mem["expert_params"].get<int64_t>(),
            local["ranks"][1]["params"].get<int64_t>());
  EXPECT_EQ(mem["expert_params"], local["ranks"][1]["expert_params"]);
  for (const json* j : {&local["moe"], &search["model"]}) {
    EXPECT_EQ((*j)["params"], c.total());
    EXPECT_EQ((*j)["active_params"], c.active());
    EXPECT_EQ((*j)["routed_expert_params"], c.expert_total());
    EXPECT_EQ((*j)["shared_expert_params"], c.shared_total());
    EXPECT_EQ((*j)["expert_ffn"], 32);
    EXPECT_EQ((*j)["shared_experts"], 2);
  }
  // Rows are C wide whatever the experts' width: the all-to-all bytes are the plain MoE's.
  const json plain = plan_json(
      "--local --layers 2 --dim 64 --heads 4 --seq 32 --vocab 100 --experts 8 --top-k 2 "
      "--max-seq 32 --tp 2 --dp 2 --ep 2");
  EXPECT_EQ(local["ep_bytes_per_step_per_group"], plain["ep_bytes_per_step_per_group"]);
  EXPECT_GT(local["ep_bytes_per_step_per_group"].get<int64_t>(), 0);
  // The text shows the width, the shared experts and the active count.
  const auto text = run_strata("plan " + kShape + "--gpus 4 --batch 4");
  ASSERT_EQ(text.status, 0) << text.out;
  EXPECT_NE(text.out.find("8 experts of ffn 32, top-2, 2 shared"), std::string::npos) << text.out;
}

TEST(PlanMoE, BadExpertFlagsAreOneLine) {
  const std::string dense = "plan --layers 2 --dim 64 --heads 4 --seq 32 --vocab 100 --batch 4 ";
  for (const auto& [args, says] : std::vector<std::pair<std::string, std::string>>{
           {dense + "--shared-experts 1", "--shared-experts 1 needs routed experts"},
           {dense + "--expert-ffn 32", "--expert-ffn 32 needs routed experts"},
           {dense + "--experts 4 --expert-ffn 0", "--expert-ffn must be positive (got 0)"},
           {dense + "--experts 4 --expert-ffn -8", "--expert-ffn must be positive (got -8)"},
           {dense + "--experts 4 --shared-experts -1", "--shared-experts must not be negative"},
           {dense + "--experts 4 --expert-ffn 33 --tp 2 --gpus 2", "hidden width 33"},
           {dense + "--local --shared-experts 1", "--shared-experts 1 needs routed experts"},
           {dense + "--local --experts 4 --expert-ffn 0", "--expert-ffn must be positive (got 0)"},
           {dense + "--local --experts 4 --expert-ffn 33 --tp 2", "hidden width 33"}}) {
    const auto r = run_strata(args);
    EXPECT_EQ(r.status, 1) << args << "\n" << r.out;
    EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << args << "\n" << r.out;
    EXPECT_NE(r.out.find(says), std::string::npos) << args << "\n" << r.out;
  }
}

// Node-limited routing (--route-groups G --route-max-groups M): a token's rows go to at most
// min(K, P, R) ranks, R the ranks its M groups lie on (cost/comm.h). 8 experts on ep 4 in 4
// groups, each token within 1: R = 1 rank, half the rows of top-2.
TEST(PlanMoE, GroupLimitLowersTheAllToAllBound) {
  const std::string local = "--local " + kShape + "--max-seq 32 --dp 4 --ep 4 --micro-batch 1";
  const std::string limit = " --route-groups 4 --route-max-groups 1";
  const json plain = plan_json(local), limited = plan_json(local + limit);
  // 2 MoE blocks x 4 ranks x 32 tokens x rows per token; each row 16 · 64 + 16 · 2 bytes, and
  // per block the counts 4 · 8 · 8 + 4 · 4 · 8.
  EXPECT_EQ(plain["ep_rows_per_token"], 2);
  EXPECT_EQ(limited["ep_rows_per_token"], 1);
  EXPECT_EQ(plain["ep_rows_per_step_per_group"], 2 * 4 * 32 * 2);
  EXPECT_EQ(limited["ep_rows_per_step_per_group"], 2 * 4 * 32 * 1);
  EXPECT_EQ(plain["ep_bytes_per_step_per_group"], 2 * (256 + 128) + 512 * 1056);
  EXPECT_EQ(limited["ep_bytes_per_step_per_group"], 2 * (256 + 128) + 256 * 1056);
  EXPECT_EQ(limited["ep_bytes_per_row"], plain["ep_bytes_per_row"]);
  EXPECT_EQ(limited["moe"]["route_groups"], 4);
  EXPECT_EQ(limited["moe"]["route_max_groups"], 1);
  const auto text = run_strata("plan " + local + limit);
  ASSERT_EQ(text.status, 0) << text.out;
  EXPECT_NE(text.out.find(" 271104, rows 256 (1 per token and block: top-2 within 1 of 4 expert groups)"),
            std::string::npos)
      << text.out;
  // The search: each rank's dispatch buffer, 32 tokens x 64 x 2 bytes a row, one row a token
  // instead of two.
  const std::string search = kShape + "--gpus 4 --tp 1 --dp 4 --ep 4 --pp 1 --cp 1 --batch 4 --micro-batch 1";
  auto ep_item = [](const json& j) {
    for (const json& c : j["best"]["communication"])
      if (c["dim"] == "ep") return c;
    ADD_FAILURE() << "no ep item: " << j["best"].dump();
    return json();
  };
  const json s_plain = ep_item(plan_json(search)), s_limited = ep_item(plan_json(search + limit));
  EXPECT_EQ(s_plain["bytes_per_call"], 32 * 64 * 2 * 2);
  EXPECT_EQ(s_limited["bytes_per_call"], 32 * 64 * 2 * 1);
  EXPECT_NE(s_limited["what"].get<std::string>().find("1 row(s) per token"), std::string::npos) << s_limited;
  EXPECT_NE(s_limited["what"].get<std::string>().find("1 of 4 expert groups"), std::string::npos) << s_limited;
  // Bad pairs are one line, on both paths.
  for (const std::string& path : {std::string("--local "), std::string()})
    for (const auto& [args, says] : std::vector<std::pair<std::string, std::string>>{
             {"--route-groups 3 --route-max-groups 1", "--experts 8 do not divide into --route-groups 3"},
             {"--route-max-groups 1", "--route-max-groups 1 needs --route-groups G"},
             {"--route-groups 4", "--route-groups 4 needs --route-max-groups M"},
             {"--route-groups 8 --route-max-groups 1", "experts per group is fewer than --top-k 2"}}) {
      const auto r = run_strata("plan " + path + kShape + "--gpus 4 --batch 4 " + args);
      EXPECT_EQ(r.status, 1) << path << args << "\n" << r.out;
      EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << path << args << "\n" << r.out;
      EXPECT_NE(r.out.find(says), std::string::npos) << path << args << "\n" << r.out;
    }
}
