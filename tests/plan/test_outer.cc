// `strata plan` with replica groups (DiLoCo, plan/outer.h): what crosses per sync and per step,
// the smallest H within the link share, the outer state in memory, and the recommendation when
// the inter-node link bounds data parallelism.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "nlohmann/json.hpp"
#include "plan_json.h"
#include "support/run.h"
#include "support/temp_dir.h"

namespace {

using nlohmann::json;
using strata::test::plan_json;
using strata::test::run_strata;
using strata::test::Streams;

TEST(PlanOuter, GroupsSendOneHthOfTheirShardPerStep) {
  const json j = plan_json("--model gpt2 --gpus 16 --batch 64 --replica-groups 2 --inner-steps 50");
  ASSERT_TRUE(j.contains("outer")) << j.dump(2);
  const json& o = j["outer"];
  EXPECT_EQ(o["groups"], 2);
  EXPECT_EQ(o["inner_steps"], 50);
  EXPECT_EQ(o["group_layout"]["dp"].get<int>() * 2 * o["group_layout"]["tp"].get<int>() *
                o["group_layout"]["pp"].get<int>() * o["group_layout"]["cp"].get<int>(),
            16);
  const double sync = o["sync_bytes_per_gpu"].get<double>();
  EXPECT_DOUBLE_EQ(o["bytes_per_step_per_gpu"].get<double>(), sync / 50);
  // fp32 parameters out, 8 bytes of global state per value kept: the two formulas agree.
  EXPECT_DOUBLE_EQ(o["state_bytes_per_gpu"].get<double>(), 2 * sync);
  EXPECT_DOUBLE_EQ(o["step_s"].get<double>(), o["group_step_s"].get<double>() + o["exposed_per_step_s"].get<double>());
  EXPECT_DOUBLE_EQ(o["tokens_per_s"].get<double>(), 64.0 * j["model"]["seq"].get<double>() / o["step_s"].get<double>());
  EXPECT_GT(o["ddp_bytes_per_step_per_gpu"].get<double>(), o["bytes_per_step_per_gpu"].get<double>());
  EXPECT_TRUE(o["inter_node"].get<bool>());
}

TEST(PlanOuter, SmallestInnerStepsKeepTheExchangeWithinTheShare) {
  for (const char* extra : {"", " --outer-dtype int4", " --fragments 4 --outer-overlap 2"}) {
    const std::string args = std::string("--model gpt2 --gpus 16 --batch 64 --replica-groups 2") + extra;
    const json o = plan_json(args)["outer"];
    const int h = o["min_inner_steps"].get<int>();
    ASSERT_EQ(o["inner_steps"], h) << args;  // no --inner-steps: the smallest
    const double step = o["group_step_s"].get<double>();
    const double exposed_round = o["exposed_per_step_s"].get<double>() * h;
    EXPECT_LE(exposed_round / h, 0.1 * step * (1 + 1e-9)) << args;
    const int floor = std::max({1, o["fragments"].get<int>(), o["overlap"].get<int>() + 1});
    if (h > floor) {
      EXPECT_GT(exposed_round / (h - 1), 0.1 * step) << args;
    }
  }
  // int4: 4.5 bits per value where fp32 sends 32.
  const json fp32 = plan_json("--model gpt2 --gpus 16 --batch 64 --replica-groups 2")["outer"];
  const json int4 = plan_json("--model gpt2 --gpus 16 --batch 64 --replica-groups 2 --outer-dtype int4")["outer"];
  EXPECT_NEAR(fp32["sync_bytes_per_gpu"].get<double>() / int4["sync_bytes_per_gpu"].get<double>(), 32 / 4.5, 0.01);
}

TEST(PlanOuter, RecommendedWhenTheInterNodeLinkBoundsDataParallelism) {
  strata::test::TempDir dir("plan_outer");
  const std::string slow = dir.file("slow.json");
  std::ofstream(slow) << R"({"base": "h100-80g", "inter_node_gbps": 0.125})";  // 1 Gbit/s between nodes
  const std::string model = "--model llama2-7b --gpus 16 --batch 512 ";
  auto text = run_strata("plan " + model + "--gpu " + slow, "", Streams::separate);
  ASSERT_EQ(text.status, 0) << text.err;
  EXPECT_NE(text.out.find("Replica groups (DiLoCo), recommended: inter-node data-parallel traffic is "),
            std::string::npos)
      << text.out;
  const json o = plan_json(model + "--gpu " + slow)["outer"];
  EXPECT_TRUE(o["recommended"].get<bool>());
  EXPECT_GE(o["ddp_inter_node_share"].get<double>(), 0.2);
  EXPECT_GT(o["tokens_per_s"].get<double>(), o["ddp_tokens_per_s"].get<double>());
  // On the preset's fast network the same model is not held back: no section.
  auto fast = run_strata("plan " + model, "", Streams::separate);
  ASSERT_EQ(fast.status, 0) << fast.err;
  EXPECT_EQ(fast.out.find("Replica groups"), std::string::npos) << fast.out;
}

TEST(PlanOuter, BadSettingsAreOneLine) {
  for (const auto& [args, needle] : std::vector<std::pair<std::string, std::string>>{
           {"--replica-groups 1", "--replica-groups must be at least 2 to plan groups (got 1)"},
           {"--inner-steps 10", "--inner-steps shapes the groups of --replica-groups R"},
           {"--replica-groups 2 --inner-steps 4 --outer-overlap 4", "--outer-overlap must be in [0, --inner-steps 4) (got 4)"},
           {"--replica-groups 2 --outer-error-feedback", "--outer-error-feedback corrects the rounding of"},
           {"--replica-groups 2 --outer-link-share 0", "--outer-link-share"},
       }) {
    auto r = run_strata("plan --model gpt2 --gpus 16 " + args, "", Streams::separate);
    EXPECT_NE(r.status, 0) << args;
    EXPECT_NE(r.err.find(needle), std::string::npos) << args << "\n" << r.err;
  }
  // Groups that the best layouts cannot split into are a line in the plan, not a failure.
  auto r = run_strata("plan --model gpt2 --gpus 16 --batch 64 --replica-groups 3", "", Streams::separate);
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("Replica groups (DiLoCo): not planned: the global batch 64 does not split over 3 groups"),
            std::string::npos)
      << r.out;
}

}  // namespace
