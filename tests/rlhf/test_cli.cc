// strata rlhf reward / ppo / generate end to end at tiny size, and their bad input: one line
// naming the flag and file, a non-zero exit, and no rollout started.
#include <sys/stat.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "nlohmann/json.hpp"
#include "rlhf/model_io.h"
#include "support/run.h"
#include "support/temp_dir.h"
#include "tiny.h"

namespace strata::rlhf {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using strata::test::run_strata;

// One line on stderr, nothing else there.
void expect_one_line(const strata::test::RunResult& r, const std::string& needle) {
  EXPECT_NE(r.status, 0) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_NE(r.err.find(needle), std::string::npos) << r.err;
}

class RlhfCli : public ::testing::Test {
 protected:
  void SetUp() override {
    const model::GPTConfig cfg = test::tiny_config(16);
    save_model(dir_.file("actor.safetensors"), cfg, test::tiny_params(cfg, 2).data(), {});
    model::GPTConfig wide = cfg;
    wide.dim = 64;
    save_model(dir_.file("wide.safetensors"), wide, test::tiny_params(wide, 2).data(), {});
  }
  std::string f(const std::string& name) const { return dir_.file(name); }
  strata::test::TempDir dir_{"rlhf_cli"};
};

// PPO's metrics.jsonl streams through the checked log: a FIFO in its place blocked the open
// forever (and, on a resume, the read of the old records); now it is refused by its kind.
TEST_F(RlhfCli, PpoLogThatIsAFifoIsRefused) {
  auto r = run_strata("rlhf reward --init " + f("actor.safetensors") +
                      " --pairs synthetic --num-pairs 16 --steps 1 --batch 4 --prompt-len 4 "
                      "--response-len 8 -o " + f("rm.safetensors"));
  ASSERT_EQ(r.status, 0) << r.out;
  std::filesystem::create_directories(f("run"));
  ASSERT_EQ(::mkfifo(f("run/metrics.jsonl").c_str(), 0644), 0);
  r = run_strata("rlhf ppo --actor " + f("actor.safetensors") + " --reward " + f("rm.safetensors") +
                     " --run-dir " + f("run") + " --iterations 1 --rollout-batch 4 --minibatch 4 --epochs 1"
                     " --prompt-len 4 --response-len 8",
                 "", strata::test::Streams::separate, 30);
  expect_one_line(r, f("run/metrics.jsonl") + ": is a FIFO");
}

// The actor's and critic's trunks under selective and full recomputation: every metric of
// every iteration bit-identical to the run without it (timings aside), at ZeRO 0 and 3.
TEST_F(RlhfCli, PpoRecomputationChangesNoNumber) {
  auto r = run_strata("rlhf reward --init " + f("actor.safetensors") +
                      " --pairs synthetic --num-pairs 16 --steps 1 --batch 4 --prompt-len 4 "
                      "--response-len 8 -o " + f("rm.safetensors"));
  ASSERT_EQ(r.status, 0) << r.out;
  auto metrics = [&](const std::string& extra, const std::string& run) {
    auto p = run_strata("rlhf ppo --actor " + f("actor.safetensors") + " --reward " + f("rm.safetensors") +
                            " --run-dir " + f(run) + " --iterations 2 --rollout-batch 8 --minibatch 4 --epochs 2"
                            " --prompt-len 4 --response-len 8 " + extra,
                        "", strata::test::Streams::separate);
    EXPECT_EQ(p.status, 0) << p.err;
    std::vector<json> out;
    std::ifstream in(f(run + "/metrics.jsonl"));
    for (std::string l; std::getline(in, l);) {
      json j = json::parse(l);
      for (const char* timing : {"time", "share", "gen_tokens_per_s"}) j.erase(timing);
      out.push_back(j);
    }
    return out;
  };
  // The trained trunks' activation buffers (summary.json's memory), which the policy shrinks.
  auto activations = [&](const std::string& run, const char* role) {
    std::ifstream in(f(run + "/summary.json"));
    return json::parse(in)["memory"][role]["activations"].get<int64_t>();
  };
  for (const std::string zero : {"--zero 0", "--zero 3 --nproc 2"}) {
    const std::string plain_run = "plain" + zero.substr(7, 1);
    const std::vector<json> plain = metrics(zero, plain_run);
    ASSERT_EQ(plain.size(), 2u) << zero;
    for (const std::string policy : {"--recompute selective", "--recompute full", "--recompute full --recompute-layers 1"}) {
      const std::string run = "rc" + zero.substr(7, 1) + std::to_string(policy.size());
      EXPECT_EQ(metrics(zero + " " + policy, run), plain) << zero << " " << policy;
      // One recomputed block saves nothing: the shared working layer holds what it drops.
      const bool one = policy.find("layers 1") != std::string::npos;
      for (const char* role : {"actor", "critic"})
        if (one)
          EXPECT_EQ(activations(run, role), activations(plain_run, role)) << zero << " " << role;
        else
          EXPECT_LT(activations(run, role), activations(plain_run, role)) << zero << " " << policy << " " << role;
    }
  }
  expect_one_line(run_strata("rlhf ppo --actor " + f("actor.safetensors") + " --reward " + f("actor.safetensors") +
                                 " --recompute partial",
                             "", strata::test::Streams::separate),
                  "--recompute partial: must be none, selective or full");
}

TEST_F(RlhfCli, RewardThenPpoEndToEnd) {
  auto r = run_strata("rlhf reward --init " + f("actor.safetensors") +
                      " --pairs synthetic --num-pairs 48 --steps 6 --batch 8 --prompt-len 4 "
                      "--response-len 8 --save-pairs " + f("pairs.txt") + " -o " + f("rm.safetensors"));
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("held-out pair accuracy"), std::string::npos) << r.out;
  // The saved pairs train a model as a file too.
  r = run_strata("rlhf reward --init " + f("actor.safetensors") + " --pairs " + f("pairs.txt") +
                 " --steps 2 --batch 4 -o " + f("rm2.safetensors"));
  ASSERT_EQ(r.status, 0) << r.out;
  r = run_strata("rlhf ppo --actor " + f("actor.safetensors") + " --reward " + f("rm.safetensors") +
                 " --run-dir " + f("run") + " --iterations 2 --rollout-batch 8 --minibatch 4 --epochs 1"
                 " --prompt-len 4 --response-len 8 --kl-target 2 --json",
                 "", strata::test::Streams::separate);
  ASSERT_EQ(r.status, 0) << r.out << r.err;
  std::ifstream in(f("run/metrics.jsonl"));
  int n = 0;
  for (std::string l; std::getline(in, l); ++n) {
    const json j = json::parse(l);
    for (const char* k : {"reward", "gold", "kl", "clip_frac", "approx_kl", "entropy", "value_loss",
                          "explained_variance", "share", "gen_tokens_per_s"})
      EXPECT_TRUE(j.contains(k)) << k;
  }
  EXPECT_EQ(n, 2);
  std::ifstream sin(f("run/summary.json"));
  const json s = json::parse(sin);
  for (const char* m : {"actor", "reference", "reward", "critic"})
    EXPECT_GT(s["memory"][m]["parameters"].get<int64_t>(), 0) << m;
  EXPECT_EQ(s["memory"]["reference"]["gradients"], 0);
  EXPECT_GT(s["memory"]["actor"]["kv_cache"].get<int64_t>(), 0);
  EXPECT_TRUE(fs::exists(f("run/actor.safetensors")));
  // The trained critic carries a value head: it can be the reward model of another run.
  r = run_strata("rlhf ppo --actor " + f("run/actor.safetensors") + " --reward " + f("run/critic.safetensors") +
                 " --iterations 1 --rollout-batch 4 --minibatch 4 --epochs 1 --prompt-len 4 --response-len 4");
  EXPECT_EQ(r.status, 0) << r.out;
}

// A tiny --temperature makes a prompt's two responses alike, so nearly every pair ties on the
// gold rule: the search for pairs looped for a time growing as 1/T; it is bounded by the yield.
TEST_F(RlhfCli, RewardPairsAtATinyTemperatureStopInOneLine) {
  for (const char* t : {"1e-6", "1e-30"}) {
    auto r = run_strata("rlhf reward --init " + f("actor.safetensors") +
                            " --pairs synthetic --num-pairs 48 --steps 2 --batch 8 --prompt-len 4 "
                            "--response-len 8 --temperature " + t + " -o " + f("rm.safetensors"),
                        "", strata::test::Streams::separate, 120);
    expect_one_line(r, "synthetic pairs: ");
    EXPECT_NE(r.err.find("raise --temperature"), std::string::npos) << r.err;
    EXPECT_FALSE(fs::exists(f("rm.safetensors")));
  }
}

TEST_F(RlhfCli, GenerateFromATrainingRunAgreesWithAndWithoutCache) {
  auto r = run_strata("train --layers 1 --dim 32 --heads 2 --max-seq 32 --steps 2 --batch 2 --ckpt-every 2"
                      " --sample-tokens 0 --run-dir " + f("sft"));
  ASSERT_EQ(r.status, 0) << r.out;
  r = run_strata("rlhf generate --actor " + f("sft") + " --batch 3 --prompt-len 4 --response-len 12 "
                 "--temperature 0 --repeats 1 --json", "", strata::test::Streams::separate);
  ASSERT_EQ(r.status, 0) << r.out << r.err;
  const json j = json::parse(r.out);
  EXPECT_TRUE(j["same_tokens"].get<bool>());
}

// A Llama actor (grouped-query attention, untied lm_head): its reward model and critic are
// Llama trunks with a value head, rollouts go through its KV cache, and the model states equal
// the planner's Llama formula.
TEST_F(RlhfCli, LlamaActorRewardAndPpo) {
  auto r = run_strata("train --model llama-tiny --layers 2 --dim 32 --heads 4 --kv-heads 2 --ffn 48 "
                      "--max-seq 32 --steps 2 --batch 2 --ckpt-every 2 --sample-tokens 0 --run-dir " +
                      f("llama"));
  ASSERT_EQ(r.status, 0) << r.out;
  r = run_strata("rlhf generate --actor " + f("llama") + " --batch 3 --prompt-len 4 --response-len 12 "
                 "--temperature 0 --repeats 1 --json", "", strata::test::Streams::separate);
  ASSERT_EQ(r.status, 0) << r.out << r.err;
  EXPECT_TRUE(json::parse(r.out)["same_tokens"].get<bool>());
  r = run_strata("rlhf reward --init " + f("llama") + " --pairs synthetic --num-pairs 16 --steps 2 --batch 4 "
                 "--prompt-len 4 --response-len 8 -o " + f("llama-rm.safetensors"));
  ASSERT_EQ(r.status, 0) << r.out;
  r = run_strata("rlhf ppo --actor " + f("llama") + " --reward " + f("llama-rm.safetensors") + " --run-dir " +
                     f("llama-run") + " --iterations 2 --rollout-batch 4 --minibatch 4 --epochs 1"
                     " --prompt-len 4 --response-len 8 --json",
                 "", strata::test::Streams::separate);
  ASSERT_EQ(r.status, 0) << r.out << r.err;
  std::ifstream sin(f("llama-run/summary.json"));
  const json s = json::parse(sin);
  EXPECT_TRUE(s["memory"]["model_states_match_plan"].get<bool>()) << s["memory"].dump();
}

TEST_F(RlhfCli, PpoOverTwoProcessesIsTheOneProcessRun) {
  const model::GPTConfig cfg = test::tiny_config(16);
  std::vector<float> head(size_t(cfg.dim) + 1);
  for (size_t i = 0; i < head.size(); ++i) head[i] = 0.05f * float(int(i % 7) - 3);
  save_model(f("rm.safetensors"), cfg, test::tiny_params(cfg, 3).data(), head);
  const std::string ppo = "rlhf ppo --actor " + f("actor.safetensors") + " --reward " + f("rm.safetensors") +
                          " --iterations 2 --rollout-batch 8 --minibatch 4 --epochs 1 --prompt-len 4 --response-len 8";
  auto r = run_strata(ppo + " --run-dir " + f("one"));
  ASSERT_EQ(r.status, 0) << r.out;
  // Two processes with actor and critic at ZeRO-3 (the engine's shards, gathered per layer).
  r = run_strata(ppo + " --nproc 2 --zero 3 --run-dir " + f("two"), "OMP_NUM_THREADS=1");
  ASSERT_EQ(r.status, 0) << r.out;
  std::ifstream a(f("one/metrics.jsonl")), b(f("two/metrics.jsonl"));
  int n = 0;
  for (std::string la, lb; std::getline(a, la) && std::getline(b, lb); ++n) {
    const json ja = json::parse(la), jb = json::parse(lb);
    for (const char* k : {"reward", "gold", "kl", "policy_loss", "value_loss"})
      EXPECT_NEAR(jb[k].get<double>(), ja[k].get<double>(), 1e-5 * std::max(1.0, std::abs(ja[k].get<double>()))) << k;
  }
  EXPECT_EQ(n, 2);
  std::ifstream sin(f("two/summary.json"));
  const json two = json::parse(sin);
  EXPECT_EQ(two["ranks"], 2);
  EXPECT_EQ(two["memory"]["zero"], 3);
  EXPECT_TRUE(two["memory"]["model_states_match_plan"].get<bool>()) << two["memory"].dump(1);
  EXPECT_NE(r.out.find("at ZeRO 3 (parameters / gradients / optimizer bytes; strata plan --rlhf --algo ppo predicts the same)"),
            std::string::npos)
      << r.out;
}

TEST_F(RlhfCli, BadInputIsOneLineBeforeAnyRollout) {
  const auto S = strata::test::Streams::separate;
  const std::string ppo = "rlhf ppo --prompt-len 4 --iterations 1 --rollout-batch 4 "
                          "--minibatch 4 --run-dir " + f("bad") + " --actor " + f("actor.safetensors");
  auto r = run_strata(ppo + " --response-len 8 --reward " + f("actor.safetensors"), "", S);
  expect_one_line(r, "--reward " + f("actor.safetensors") + ": no value head");
  save_model(f("rm.safetensors"), test::tiny_config(16), test::tiny_params(test::tiny_config(16), 3).data(),
             std::vector<float>(33, 0.1f));
  r = run_strata(ppo + " --response-len 8 --reward " + f("rm.safetensors") + " --reference " + f("wide.safetensors"), "", S);
  expect_one_line(r, "--reference " + f("wide.safetensors") + " (layers 2, dim 64");
  r = run_strata(ppo + " --reward " + f("rm.safetensors") + " --response-len 13", "", S);
  expect_one_line(r, "--response-len 13 + --prompt-len 4 = 17 positions, beyond the context of --actor (16)");
  r = run_strata(ppo + " --response-len 8 --zero 4 --reward " + f("rm.safetensors"), "", S);
  expect_one_line(r, "--zero 4: ZeRO stage must be 0, 1, 2 or 3");
  r = run_strata(ppo + " --response-len 8 --reward " + f("missing.safetensors"), "", S);
  expect_one_line(r, "--reward " + f("missing.safetensors") + ": no such file");
  EXPECT_FALSE(fs::exists(f("bad/metrics.jsonl")));

  const std::string reward = "rlhf reward --init " + f("actor.safetensors") + " -o " + f("out.safetensors") + " --pairs ";
  std::ofstream(f("empty.txt")).flush();
  r = run_strata(reward + f("empty.txt"), "", S);
  expect_one_line(r, "--pairs " + f("empty.txt") + ": no pairs in the file");
  std::ofstream(f("bad.txt")) << "1 2 3 | 4 5 | 6 7\n1 2 3 | 4 5\n";
  r = run_strata(reward + f("bad.txt"), "", S);
  expect_one_line(r, "--pairs " + f("bad.txt") + ":2: expected 'PROMPT | CHOSEN | REJECTED'");
  std::ofstream(f("long.txt")) << "1 2 3 4 5 6 7 8 9 | 1 2 3 4 5 6 7 8 | 1 2 3 4 5 6 7 8\n";
  r = run_strata(reward + f("long.txt"), "", S);
  expect_one_line(r, "beyond the context of --init");
  EXPECT_FALSE(fs::exists(f("out.safetensors")));
}

// GRPO, RLOO and DPO from the command line: bad settings are one line before any model is
// loaded (a missing model file is not even opened); a pairs line without its rejected answer
// is one line naming the file and line; each runs end to end on 2 processes at ZeRO 3 and
// reports its models' states equal to the plan's.
TEST_F(RlhfCli, GrpoRlooAndDpoBadInputAndTwoProcessRuns) {
  const auto S = strata::test::Streams::separate;
  const std::string missing = " --actor " + f("missing.safetensors") + " --reward " + f("missing.safetensors");
  expect_one_line(run_strata("rlhf grpo --group-size 1" + missing, "", S),
                  "--group-size must be >= 2 for GRPO (got 1): the advantages compare the responses to one prompt");
  expect_one_line(run_strata("rlhf rloo --group-size 1" + missing, "", S), "--group-size must be >= 2 for RLOO (got 1)");
  expect_one_line(run_strata("rlhf rloo --minibatch 6" + missing, "", S),
                  "--minibatch 6 must be >= 1 and divide the responses per iteration 64 (--rollout-batch 16 x --group-size 4)");
  expect_one_line(run_strata("rlhf grpo --kl-in both" + missing, "", S), "--kl-in");
  expect_one_line(run_strata("rlhf ppo --nproc 2 --rollout-ranks 2" + missing, "", S),
                  "--rollout-ranks 2 leaves no trainer of --nproc 2");
  expect_one_line(run_strata("rlhf dpo --beta 0 --policy " + f("missing.safetensors"), "", S), "--beta must be > 0 (got 0)");
  expect_one_line(run_strata("rlhf dpo --beta -0.5 --policy " + f("missing.safetensors"), "", S),
                  "--beta must be > 0 (got -0.5)");
  std::ofstream(f("half.txt")) << "1 2 3 | 4 5 | 6 7\n1 2 3 | 4 5 |\n";
  expect_one_line(run_strata("rlhf dpo --policy " + f("actor.safetensors") + " --pairs " + f("half.txt"), "", S),
                  "--pairs " + f("half.txt") + ":2:");

  const model::GPTConfig cfg = test::tiny_config(16);
  std::vector<float> head(size_t(cfg.dim) + 1, 0.05f);
  save_model(f("rm.safetensors"), cfg, test::tiny_params(cfg, 3).data(), head);
  for (const char* algo : {"grpo", "rloo"}) {
    auto r = run_strata(std::string("rlhf ") + algo + " --actor " + f("actor.safetensors") + " --reward " +
                            f("rm.safetensors") + " --iterations 2 --rollout-batch 2 --group-size 4 --minibatch 4 " +
                            "--prompt-len 4 --response-len 8 --nproc 2 --zero 3 --run-dir " + f(algo),
                        "OMP_NUM_THREADS=1");
    ASSERT_EQ(r.status, 0) << r.out << r.err;
    EXPECT_NE(r.out.find(std::string("strata plan --rlhf --algo ") + algo + " predicts the same"), std::string::npos)
        << r.out;
    EXPECT_EQ(r.out.find("critic"), std::string::npos) << r.out;
    std::ifstream sin(f(std::string(algo) + "/summary.json"));
    const json s = json::parse(sin);
    EXPECT_EQ(s["algo"], algo);
    EXPECT_TRUE(s["memory"]["model_states_match_plan"].get<bool>()) << s["memory"].dump(1);
  }
  auto r = run_strata("rlhf dpo --policy " + f("actor.safetensors") + " --num-pairs 24 --prompt-len 4 " +
                          "--response-len 8 --steps 4 --batch 4 --eval-every 2 --eval-prompts 8 --nproc 2 --zero 3 " +
                          "--run-dir " + f("dpo"),
                      "OMP_NUM_THREADS=1");
  ASSERT_EQ(r.status, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("strata plan --rlhf --algo dpo predicts the same"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("DPO: gold "), std::string::npos) << r.out;
  EXPECT_TRUE(fs::exists(f("dpo/policy.safetensors")));
}

}  // namespace
}  // namespace strata::rlhf
