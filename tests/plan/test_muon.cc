// `strata plan --optimizer muon` (docs/muon.md): Muon's matrices keep one moment, its gathers
// and scatters are a communication row at ZeRO 1-3, the Newton-Schulz work is in the step, and
// layouts stay at tp 1 as `strata train` runs them.
#include <gtest/gtest.h>

#include <string>

#include "nlohmann/json.hpp"
#include "plan_json.h"
#include "support/run.h"

namespace {

using nlohmann::json;
using strata::test::plan_json;
using strata::test::run_strata;
using strata::test::Streams;

json best(const std::string& args) { return plan_json(args)["best"]; }

// GPT-2 small: 12 blocks of q, k, v, o (768²) and c_fc, c_proj (4·768²) are Muon's; each GPU of
// 16 keeps 4 bytes fewer for its shard of them (ceil(Ψ_muon / 16)), at ZeRO 0 for all of them.
TEST(PlanMuon, MatricesKeepOneMomentum) {
  const int64_t muon = 12 * 12 * 768 * 768;
  for (int zero : {0, 1, 3}) {
    const std::string layout = "--model gpt2 --gpus 16 --batch 64 --tp 1 --dp 16 --zero " + std::to_string(zero);
    const json a = best(layout), m = best(layout + " --optimizer muon");
    EXPECT_EQ(m["memory"]["muon_params"], muon);
    const int64_t saved = 4 * (zero >= 1 ? (muon + 15) / 16 : muon);
    EXPECT_EQ(a["memory"]["model_states"]["optimizer"].get<int64_t>() -
                  m["memory"]["model_states"]["optimizer"].get<int64_t>(),
              saved)
        << zero;
    bool row = false;
    for (const json& c : m["communication"]) {
      if (c["dim"] != "muon") continue;
      row = true;
      EXPECT_EQ(c["calls_per_step"], 2);
      EXPECT_DOUBLE_EQ(c["exposed_s"].get<double>(), c["time_s"].get<double>());  // after the backward
    }
    EXPECT_EQ(row, zero >= 1) << zero;
    EXPECT_GT(m["time"]["optimizer_s"].get<double>(), a["time"]["optimizer_s"].get<double>()) << zero;
  }
}

// Under tp each owned matrix's slices are gathered whole (4 bytes per element of the whole
// matrix); no layout shares a key/value head between tp ranks.
TEST(PlanMuon, TensorParallelGathersEachOwnedMatrixWhole) {
  const json m = best("--model gpt2 --gpus 16 --batch 64 --tp 2 --dp 8 --zero 1 --optimizer muon");
  bool row = false;
  for (const json& c : m["communication"])
    if (c["dim"] == "muon-tp") {
      row = true;
      EXPECT_DOUBLE_EQ(c["bytes_per_call"].get<double>(), 4.0 * 12 * 12 * 768 * 768 / 8);
    }
  EXPECT_TRUE(row) << m["communication"].dump();
  for (const json& l : plan_json("--model llama-3-8b --gpus 64 --batch 512 --optimizer muon")["ranking"]) EXPECT_LE(l["layout"]["tp"].get<int>(), 8) << l.dump();
  auto tp = run_strata("plan --model llama-3-8b --gpus 64 --batch 512 --optimizer muon --tp 16", "", Streams::separate);
  EXPECT_NE(tp.status, 0);
  EXPECT_NE(tp.err.find("--optimizer muon with --tp 16 and 8 key/value heads"), std::string::npos) << tp.err;
}

}  // namespace
