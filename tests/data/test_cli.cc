// `strata data plan` and `strata data info` through the real binary: the JSON plan agrees
// with the library planner, --rank and --resume-from select the right part, bad flags fail.
#include <gtest/gtest.h>

#include <string>

#include "data/sampler.h"
#include "nlohmann/json.hpp"
#include "support/run.h"

namespace strata::data {
namespace {

using Result = test::RunResult;
using test::run_strata;

TEST(DataCli, PlanJsonMatchesThePlanner) {
  Result r = run_strata("data plan --samples 23 --world 3 --micro-batch 2 --accum 2 --seed 9 --epoch 4 "
                 "--policy pad --json");
  ASSERT_EQ(r.status, 0) << r.out;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["global_batch"], 12);
  EXPECT_EQ(j["steps_in_epoch"], 2);
  EXPECT_EQ(j["padded"], 1);
  SamplerConfig cfg;
  cfg.world = 3;
  cfg.micro_batch = 2;
  cfg.accum = 2;
  cfg.seed = 9;
  cfg.policy = TailPolicy::pad;
  Sampler s(23, cfg);
  LoaderState at{4, 0};
  ASSERT_EQ(j["steps"].size(), 2u);
  for (const auto& step : j["steps"]) {
    StepPlan sp = s.plan(at);
    EXPECT_EQ(step["consumed"], at.consumed);
    for (int r2 = 0; r2 < 3; ++r2)
      for (int m = 0; m < 2; ++m) {
        const auto& micro = step["ranks"][size_t(r2)]["micro"][size_t(m)];
        ASSERT_EQ(micro["samples"].size(), sp.ranks[size_t(r2)].micro[size_t(m)].size());
        for (size_t i = 0; i < micro["samples"].size(); ++i) {
          EXPECT_EQ(micro["samples"][i], sp.ranks[size_t(r2)].micro[size_t(m)][i].sample);
          EXPECT_EQ(micro["pad"][i], sp.ranks[size_t(r2)].micro[size_t(m)][i].pad);
        }
      }
    at = sp.after;
  }
  int pads = 0;
  for (const auto& rank : j["steps"][1]["ranks"])
    for (const auto& micro : rank["micro"])
      for (const auto& p : micro["pad"]) pads += p.get<bool>();
  EXPECT_EQ(pads, 1);
}

TEST(DataCli, RankAndResumeSelectTheRightPart) {
  Result all = run_strata("data plan --samples 40 --world 4 --micro-batch 2 --seed 1 --json");
  Result one = run_strata("data plan --samples 40 --world 4 --micro-batch 2 --seed 1 --rank 2 --json");
  Result resumed = run_strata("data plan --samples 40 --world 4 --micro-batch 2 --seed 1 "
                       "--resume-from 16 --json");
  ASSERT_EQ(all.status, 0) << all.out;
  ASSERT_EQ(one.status, 0) << one.out;
  ASSERT_EQ(resumed.status, 0) << resumed.out;
  auto ja = nlohmann::json::parse(all.out), jo = nlohmann::json::parse(one.out),
       jr = nlohmann::json::parse(resumed.out);
  ASSERT_EQ(ja["steps"].size(), 5u);
  ASSERT_EQ(jr["steps"].size(), 3u);
  for (size_t k = 0; k < 5; ++k) {
    ASSERT_EQ(jo["steps"][k]["ranks"].size(), 1u);
    EXPECT_EQ(jo["steps"][k]["ranks"][0], ja["steps"][k]["ranks"][2]);
  }
  for (size_t k = 0; k < 3; ++k) EXPECT_EQ(jr["steps"][k]["ranks"], ja["steps"][k + 2]["ranks"]);
}

TEST(DataCli, TableAndInfoAreReadable) {
  Result t = run_strata("data plan --samples 7 --world 2 --policy uneven --accum 2");
  ASSERT_EQ(t.status, 0) << t.out;
  EXPECT_NE(t.out.find("global batch 4"), std::string::npos) << t.out;
  EXPECT_NE(t.out.find("step"), std::string::npos);
  Result info = run_strata("data info --data synthetic:100000 --seq 64 --json");
  ASSERT_EQ(info.status, 0) << info.out;
  auto j = nlohmann::json::parse(info.out);
  EXPECT_EQ(j["train"]["tokens"], 100000);
  EXPECT_EQ(j["train"]["samples"], (100000 - 65) / 64 + 1);
  EXPECT_GT(j["train"]["entropy_floor"].get<double>(), 0.5);
}

TEST(DataCli, BadFlagsFailWithOneLine) {
  Result drop = run_strata("data plan --samples 5 --world 3 --micro-batch 2");
  EXPECT_EQ(drop.status, 1);
  EXPECT_NE(drop.out.find("cannot be formed from 5 samples"), std::string::npos) << drop.out;
  Result policy = run_strata("data plan --samples 5 --policy sideways");
  EXPECT_EQ(policy.status, 1);
  EXPECT_NE(policy.out.find("sideways"), std::string::npos) << policy.out;
  Result rank = run_strata("data plan --samples 5 --world 2 --rank 2");
  EXPECT_EQ(rank.status, 1);
  Result resume = run_strata("data plan --samples 5 --resume-from 6");
  EXPECT_EQ(resume.status, 1);
  EXPECT_NE(resume.out.find("--resume-from 6"), std::string::npos) << resume.out;
  EXPECT_EQ(run_strata("data plan").status, 2);  // --samples is required
  EXPECT_EQ(run_strata("data plan --samples 5 --bogus").status, 2);
  Result missing = run_strata("data info --data /nonexistent/x.bin");
  EXPECT_EQ(missing.status, 1);
  EXPECT_NE(missing.out.find("/nonexistent/x.bin"), std::string::npos);
}

}  // namespace
}  // namespace strata::data
