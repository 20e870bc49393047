// `strata plan --rlhf --algo`: each algorithm's models, their memory against PPO's, and the
// generate/score/train split of an iteration (plan/rlhf.h), in-process and through the CLI.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"
#include "plan/rlhf.h"
#include "plan_json.h"
#include "support/run.h"

namespace {

using namespace strata::plan;
using strata::test::plan_json;
using strata::test::run_strata;

RlhfSetup setup(RlAlgo algo, int64_t gpus = 8, int tp = 1) {
  RlhfSetup r;
  r.algo = algo;
  r.actor = model_preset("llama2-7b");
  r.critic = model_preset("tinyllama-1.1b");  // a reward model of another shape
  r.critic.seq = r.actor.seq;
  r.gpu = gpu_preset("a100-80g");
  r.gpus = gpus;
  r.tp = tp;
  return r;
}

std::vector<std::string> roles(const RlhfEstimate& e) {
  std::vector<std::string> out;
  for (const RlhfModelMemory& m : e.models) out.push_back(m.role);
  return out;
}

const RlhfModelMemory& model(const RlhfEstimate& e, const std::string& role) {
  auto it = std::find_if(e.models.begin(), e.models.end(),
                         [&](const RlhfModelMemory& m) { return m.role == role; });
  EXPECT_NE(it, e.models.end()) << role;
  return *it;
}

int64_t model_states(const RlhfEstimate& e) {
  int64_t t = 0;
  for (const RlhfModelMemory& m : e.models) t += m.states.total();
  return t;
}

void expect_same(const ModelStateBytes& a, const ModelStateBytes& b, const std::string& what) {
  EXPECT_EQ(a.parameters, b.parameters) << what;
  EXPECT_EQ(a.gradients, b.gradients) << what;
  EXPECT_EQ(a.optimizer, b.optimizer) << what;
}

}  // namespace

TEST(RlhfAlgo, NamesParseBackAndUnknownOnesListTheChoices) {
  for (RlAlgo a : {RlAlgo::ppo, RlAlgo::grpo, RlAlgo::rloo, RlAlgo::dpo})
    EXPECT_EQ(parse_rl_algo(rl_algo_name(a)), a);
  EXPECT_EQ(rl_algo_choices(), "ppo, grpo, rloo, dpo");
  try {
    parse_rl_algo("reinforce");
    FAIL() << "no error";
  } catch (const strata::Error& e) {
    EXPECT_EQ(std::string(e.what()), "--algo 'reinforce' is not known (ppo, grpo, rloo, dpo)");
  }
}

// PPO as the default algorithm and as --algo ppo: the same four models, bytes and split.
TEST(RlhfAlgo, PpoIsTheDefaultAndUnchanged) {
  RlhfSetup d = setup(RlAlgo::ppo);
  d.algo = RlhfSetup{}.algo;
  const RlhfEstimate def = estimate_rlhf(d), ppo = estimate_rlhf(setup(RlAlgo::ppo));
  EXPECT_EQ(roles(ppo), (std::vector<std::string>{"actor", "critic", "reference", "reward"}));
  ASSERT_EQ(roles(def), roles(ppo));
  for (size_t i = 0; i < ppo.models.size(); ++i) {
    EXPECT_EQ(def.models[i].params, ppo.models[i].params);
    expect_same(def.models[i].states, ppo.models[i].states, ppo.models[i].role);
  }
  EXPECT_EQ(def.kv_cache, ppo.kv_cache);
  EXPECT_EQ(def.activations, ppo.activations);
  EXPECT_EQ(def.iteration_s(), ppo.iteration_s());
}

// No critic: the other three models are PPO's to the byte, their sum PPO's less the critic,
// and the rollout's KV cache is PPO's; over rank counts, tp and ZeRO stages.
TEST(RlhfAlgo, GrpoAndRlooArePpoWithoutTheCritic) {
  for (int64_t gpus : {1, 2, 3, 6, 8})
    for (int tp : {1, 2})
      for (int zero : {0, 1, 3}) {
        if (gpus % tp) continue;
        RlhfSetup p = setup(RlAlgo::ppo, gpus, tp);
        p.zero = zero;
        const RlhfEstimate ppo = estimate_rlhf(p);
        for (RlAlgo a : {RlAlgo::grpo, RlAlgo::rloo}) {
          RlhfSetup g = p;
          g.algo = a;
          const RlhfEstimate e = estimate_rlhf(g);
          const std::string at = std::string(rl_algo_name(a)) + " gpus " + std::to_string(gpus) +
                                 " tp " + std::to_string(tp) + " zero " + std::to_string(zero);
          EXPECT_EQ(roles(e), (std::vector<std::string>{"actor", "reference", "reward"})) << at;
          EXPECT_EQ(model_states(e), model_states(ppo) - model(ppo, "critic").states.total()) << at;
          for (const RlhfModelMemory& m : e.models)
            expect_same(m.states, model(ppo, m.role).states, at + " " + m.role);
          EXPECT_EQ(model(e, "reward").params, model(ppo, "reward").params) << at;  // value head
          EXPECT_EQ(e.kv_cache, ppo.kv_cache) << at;
          EXPECT_LE(e.activations, ppo.activations) << at;  // the actor's, not the larger
          EXPECT_LT(e.total(), ppo.total()) << at;
        }
      }
}

// DPO: the policy and its reference, no generation (no KV cache, no generate time).
TEST(RlhfAlgo, DpoHasThePolicyAndReferenceOnly) {
  const RlhfEstimate ppo = estimate_rlhf(setup(RlAlgo::ppo));
  const RlhfEstimate e = estimate_rlhf(setup(RlAlgo::dpo));
  ASSERT_EQ(e.models.size(), 2u);
  EXPECT_EQ(roles(e), (std::vector<std::string>{"actor", "reference"}));
  EXPECT_TRUE(e.models[0].trained);
  EXPECT_FALSE(e.models[1].trained);
  expect_same(e.models[0].states, model(ppo, "actor").states, "actor");
  expect_same(e.models[1].states, model(ppo, "reference").states, "reference");
  EXPECT_EQ(e.kv_cache, 0);
  EXPECT_EQ(e.generate_s, 0);
  EXPECT_EQ(e.share(e.generate_s), 0);
  EXPECT_GT(e.score_s, 0);
  EXPECT_GT(e.train_s, 0);
}

// The split's guarantees: the shares sum to 1, only DPO has no generation, training scales
// with the epochs and generation with the response.
TEST(RlhfAlgo, SplitSharesSumToOne) {
  for (RlAlgo a : {RlAlgo::ppo, RlAlgo::grpo, RlAlgo::rloo, RlAlgo::dpo})
    for (int64_t gpus : {2, 8})
      for (int tp : {1, 2}) {
        const RlhfEstimate e = estimate_rlhf(setup(a, gpus, tp));
        const std::string at = std::string(rl_algo_name(a)) + " tp " + std::to_string(tp);
        EXPECT_GT(e.iteration_s(), 0) << at;
        EXPECT_NEAR(e.share(e.generate_s) + e.share(e.score_s) + e.share(e.train_s), 1.0, 1e-12) << at;
        EXPECT_EQ(e.generate_s > 0, a != RlAlgo::dpo) << at;
      }
  RlhfSetup s = setup(RlAlgo::grpo);
  const RlhfEstimate one = estimate_rlhf(s);
  s.epochs = 3;
  const RlhfEstimate three = estimate_rlhf(s);
  EXPECT_DOUBLE_EQ(three.train_s, 3 * one.train_s);
  EXPECT_EQ(three.generate_s, one.generate_s);
  EXPECT_EQ(three.score_s, one.score_s);
  s.epochs = 1;
  s.response_len *= 2;
  EXPECT_GT(estimate_rlhf(s).generate_s, one.generate_s);
  // PPO scores and trains a critic more than GRPO with the same models: its generation's
  // share is smaller.
  const RlhfEstimate ppo = estimate_rlhf(setup(RlAlgo::ppo));
  EXPECT_EQ(ppo.generate_s, one.generate_s);
  EXPECT_GT(ppo.score_s, one.score_s);
  EXPECT_GT(ppo.train_s, one.train_s);
  EXPECT_LT(ppo.share(ppo.generate_s), one.share(one.generate_s));
}

TEST(RlhfAlgoCli, JsonNamesTheAlgorithmAndTheSplit) {
  const std::string base = "--model llama2-7b --gpus 8 --gpu a100-80g --rlhf";
  const nlohmann::json def = plan_json(base);
  EXPECT_EQ(def, plan_json(base + " --algo ppo"));
  EXPECT_EQ(def["rlhf"]["algo"], "ppo");
  for (const char* algo : {"ppo", "grpo", "rloo", "dpo"}) {
    const nlohmann::json j = plan_json(base + " --algo " + algo)["rlhf"];
    EXPECT_EQ(j["algo"], algo);
    EXPECT_EQ(j["models"].size(), std::string(algo) == "ppo" ? 4u : std::string(algo) == "dpo" ? 2u : 3u);
    const nlohmann::json& t = j["time_split"];
    for (const char* k : {"generate_s", "score_s", "train_s", "generate", "score", "train"})
      EXPECT_TRUE(t.contains(k)) << algo << " " << k;
    EXPECT_NEAR(t["generate"].get<double>() + t["score"].get<double>() + t["train"].get<double>(), 1.0, 1e-12);
    EXPECT_EQ(t["generate"].get<double>() == 0, std::string(algo) == "dpo") << algo;
  }
  const nlohmann::json j = plan_json(base + " --algo rloo --prompt-len 100 --response-len 400 --epochs 2");
  EXPECT_EQ(j["rlhf"]["prompt_len"], 100);
  EXPECT_EQ(j["rlhf"]["response_len"], 400);
  EXPECT_EQ(j["rlhf"]["epochs"], 2);
}

TEST(RlhfAlgoCli, TextNamesTheAlgorithmItsModelsAndTheSplit) {
  auto r = run_strata("plan --model llama2-7b --gpus 8 --gpu a100-80g --rlhf --algo grpo");
  ASSERT_EQ(r.status, 0) << r.out;
  for (const char* s : {"RLHF (GRPO) memory per GPU", "  actor ", "  reference ", "  reward ", "KV cache",
                        "Time per iteration per GPU", "generate ", "%, score ", "%, train "})
    EXPECT_NE(r.out.find(s), std::string::npos) << s << "\n" << r.out;
  EXPECT_EQ(r.out.find("critic"), std::string::npos) << r.out;
}

TEST(RlhfAlgoCli, BadAlgoFlagsAreOneLine) {
  struct Case {
    const char* args;
    std::vector<const char*> says;
  };
  const Case cases[] = {
      {"plan --model llama2-7b --rlhf --algo reinforce", {"--algo", "ppo, grpo, rloo, dpo"}},
      {"plan --model llama2-7b --algo grpo", {"--algo", "--rlhf"}},
      {"plan --model llama2-7b --epochs 2", {"--epochs", "--rlhf"}},
      {"plan --model llama2-7b --rlhf --algo dpo --critic tinyllama-1.1b", {"--critic", "dpo"}},
      {"plan --model llama2-7b --rlhf --prompt-len 4000 --response-len 200",
       {"--prompt-len", "--response-len", "4096"}},
      {"plan --model llama2-7b --rlhf --epochs 0", {"--epochs"}},
  };
  for (const Case& c : cases) {
    auto r = run_strata(c.args);
    EXPECT_EQ(r.status, 1) << c.args << "\n" << r.out;
    EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << c.args << "\n" << r.out;
    for (const char* s : c.says) EXPECT_NE(r.out.find(s), std::string::npos) << s << "\n" << r.out;
  }
}
