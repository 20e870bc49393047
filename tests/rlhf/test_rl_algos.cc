// GRPO, RLOO and DPO on the synthetic task at test size, beside PPO (test_ppo.cc): each
// raises the gold score from the same start, keeps only its own models (the states equal
// `strata plan --rlhf --algo`'s to the byte), runs the same on 2 ranks at ZeRO 3 as on one
// process, resumes bit for bit, and refuses impossible settings in one line.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <functional>
#include <thread>
#include <tuple>

#include "comm/process_group.h"
#include "core/error.h"
#include "ppo_fixture.h"
#include "rlhf/dpo.h"
#include "support/temp_dir.h"

namespace strata::rlhf {
namespace {

using nlohmann::json;

PpoConfig algo_config(plan::RlAlgo algo) {
  PpoConfig c = small_config();
  c.algo = algo;
  c.group_size = 4;
  c.rollout_batch = 4;  // 16 responses per iteration, as small_config's PPO
  if (algo == plan::RlAlgo::grpo) c.kl_in = KlIn::loss;
  return c;
}

// Runs f(rank group or null) on n ranks (threads with in-process groups); every rank's result.
template <class R>
std::vector<R> on_ranks(int n, const std::function<R(comm::ProcessGroup*)>& f) {
  if (n == 1) return {f(nullptr)};
  std::vector<comm::GroupPtr> world = comm::make_thread_world(n);
  std::vector<R> res(static_cast<size_t>(n));
  std::vector<std::thread> ranks;
  for (int r = 0; r < n; ++r) ranks.emplace_back([&, r] { res[size_t(r)] = f(world[size_t(r)].get()); });
  for (std::thread& t : ranks) t.join();
  return res;
}

// What c.validate() refuses, or "no error".
template <class Config>
std::string error_of(const Config& c) {
  try {
    c.validate();
  } catch (const Error& e) {
    return std::string(e.what());
  }
  return std::string("no error");
}

double mean_gold(const std::vector<json>& recs, size_t from, size_t to) {
  double s = 0;
  for (size_t i = from; i < to; ++i) s += recs[i]["gold"].get<double>();
  return s / double(to - from);
}

TEST(RlAlgos, GrpoAndRlooRaiseTheGoldScoreWithoutACritic) {
  const PpoResult ppo = run_ppo(small_config(), ppo_models(), {});
  const int64_t ppo_states = ppo.summary["memory"]["model_states"].get<int64_t>();
  const json& pm = ppo.summary["memory"];
  const int64_t critic = pm["critic"]["parameters"].get<int64_t>() + pm["critic"]["gradients"].get<int64_t>() +
                         pm["critic"]["optimizer"].get<int64_t>();
  for (plan::RlAlgo algo : {plan::RlAlgo::grpo, plan::RlAlgo::rloo}) {
    const PpoResult r = run_ppo(algo_config(algo), ppo_models(), {});
    const char* name = plan::rl_algo_name(algo);
    ASSERT_EQ(r.iterations.size(), 12u);
    const double first = r.iterations[0]["gold"].get<double>(), last = mean_gold(r.iterations, 9, 12);
    std::printf("%s: gold %.4f at iteration 1, %.4f over iterations 10-12 (PPO %.4f)\n", name, first, last,
                mean_gold(ppo.iterations, 9, 12));
    EXPECT_GT(last - first, 0.15) << name;
    const json& mem = r.summary["memory"];
    EXPECT_FALSE(mem.contains("critic")) << name;
    EXPECT_FALSE(r.iterations[0].contains("value_loss")) << name;
    EXPECT_TRUE(mem["model_states_match_plan"].get<bool>()) << name << mem.dump(1);
    // The critic's states are what GRPO and RLOO save.
    EXPECT_EQ(mem["model_states"].get<int64_t>(), ppo_states - critic) << name;
    EXPECT_LE(double(mem["model_states"].get<int64_t>()), 0.75 * double(ppo_states)) << name;
  }
}

// GRPO's KL: with --kl-in loss the β·k3 term is in the loss (0 in the first iteration's one
// update, where the policy is the reference, positive once it moved); with --kl-in reward it
// is not.
TEST(RlAlgos, GrpoKlInTheLossOrInTheReward) {
  PpoConfig c = algo_config(plan::RlAlgo::grpo);
  c.iterations = 3;
  c.epochs = 1, c.minibatch = 16;
  c.kl_coef = 0.2;
  const PpoResult in_loss = run_ppo(c, ppo_models(), {});
  EXPECT_EQ(in_loss.iterations[0]["kl_loss"].get<double>(), 0.0);
  EXPECT_GT(in_loss.iterations[2]["kl_loss"].get<double>(), 0.0);
  c.kl_in = KlIn::reward;
  const PpoResult in_reward = run_ppo(c, ppo_models(), {});
  for (const json& it : in_reward.iterations) EXPECT_EQ(it["kl_loss"].get<double>(), 0.0);
  // The same first rollout (the same policy), different updates.
  EXPECT_EQ(in_loss.iterations[0]["gold"], in_reward.iterations[0]["gold"]);
  EXPECT_NE(in_loss.iterations[2]["policy_loss"], in_reward.iterations[2]["policy_loss"]);
}

// 2 ranks at ZeRO 3 (policy sharded, reference and reward model sharded and gathered per
// unit) run the one-process run of each algorithm, over 3 iterations.
TEST(RlAlgos, TwoRanksAtZero3EqualOneProcess) {
  for (plan::RlAlgo algo : {plan::RlAlgo::grpo, plan::RlAlgo::rloo}) {
    PpoConfig c = algo_config(algo);
    c.iterations = 3;
    const PpoResult one = run_ppo(c, ppo_models(), {});
    c.zero = 3;
    const std::vector<PpoResult> two =
        on_ranks<PpoResult>(2, [&](comm::ProcessGroup* g) { return run_ppo(c, ppo_models(), {}, g); });
    for (int r = 0; r < 2; ++r)
      for (int i = 0; i < 3; ++i)
        for (const char* k : {"reward", "gold", "kl", "policy_loss", "entropy", "approx_kl", "kl_loss"}) {
          const double a = one.iterations[size_t(i)][k].get<double>();
          const double b = two[size_t(r)].iterations[size_t(i)][k].get<double>();
          EXPECT_NEAR(b, a, 1e-5 * std::max(1.0, std::abs(a)))
              << plan::rl_algo_name(algo) << " rank " << r << " iteration " << i + 1 << " " << k;
        }
    EXPECT_TRUE(two[0].summary["memory"]["model_states_match_plan"].get<bool>()) << two[0].summary["memory"].dump(1);
  }
}

TEST(RlAlgos, GrpoResumesBitForBit) {
  strata::test::TempDir dir("rl_grpo_resume");
  PpoConfig c = algo_config(plan::RlAlgo::grpo);
  c.dr_grpo = true;
  c.iterations = 4;
  c.run_dir = dir.str() + "/straight";
  const PpoResult straight = run_ppo(c, ppo_models(), {});
  c.run_dir = dir.str() + "/resumed";
  c.iterations = 2, c.ckpt_every = 2;
  run_ppo(c, ppo_models(), {});
  EXPECT_TRUE(std::filesystem::exists(c.run_dir + "/grpo-state.safetensors"));
  c.iterations = 4, c.resume = true;
  const PpoResult resumed = run_ppo(c, ppo_models(), {});
  ASSERT_EQ(resumed.iterations.size(), 2u);
  for (int i = 0; i < 2; ++i)
    for (const char* k : {"reward", "gold", "kl", "policy_loss", "kl_loss", "beta"})
      EXPECT_EQ(resumed.iterations[size_t(i)][k], straight.iterations[size_t(i + 2)][k]) << k;
  // A GRPO state is not resumed as RLOO's.
  c.algo = plan::RlAlgo::rloo;
  c.kl_in = KlIn::reward, c.dr_grpo = false;
  std::filesystem::copy_file(c.run_dir + "/grpo-state.safetensors", c.run_dir + "/rloo-state.safetensors");
  try {
    run_ppo(c, ppo_models(), {});
    ADD_FAILURE() << "a GRPO state resumed as RLOO";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("is a grpo run's state, not rloo's"), std::string::npos) << e.what();
  }
}

TEST(RlAlgos, ImpossibleSettingsAreOneLine) {
  PpoConfig c = algo_config(plan::RlAlgo::grpo);
  c.group_size = 1;
  EXPECT_NE(error_of(c).find("--group-size must be >= 2 for GRPO (got 1)"), std::string::npos) << error_of(c);
  c = algo_config(plan::RlAlgo::rloo);
  c.group_size = 1;
  EXPECT_NE(error_of(c).find("--group-size must be >= 2 for RLOO (got 1)"), std::string::npos) << error_of(c);
  c = algo_config(plan::RlAlgo::rloo);
  c.minibatch = 5;
  EXPECT_NE(error_of(c).find("--minibatch 5 must be >= 1 and divide the responses per iteration 16 (--rollout-batch 4 "
                             "x --group-size 4)"),
            std::string::npos)
      << error_of(c);
  c = algo_config(plan::RlAlgo::rloo);
  c.kl_in = KlIn::loss;
  EXPECT_NE(error_of(c).find("--kl-in loss is GRPO's"), std::string::npos) << error_of(c);
}

// Rollouts on their own ranks are one update off-policy: they equal a colocated run that
// samples with the same one-update-old weights (--off-policy), on 1 + 1 and 2 + 1 ranks
// (trainers + rollout ranks), at ZeRO 0 and 3, for PPO and GRPO. The off-policy run samples
// its second rollout with the initial weights again, so it leaves the on-policy run there.
TEST(RlAlgos, RolloutRanksEqualTheColocatedOffPolicyRun) {
  for (plan::RlAlgo algo : {plan::RlAlgo::ppo, plan::RlAlgo::grpo}) {
    PpoConfig c = algo == plan::RlAlgo::ppo ? small_config() : algo_config(algo);
    c.iterations = 4;
    const PpoResult on = run_ppo(c, ppo_models(), {});
    c.off_policy = true;
    const PpoResult off = run_ppo(c, ppo_models(), {});
    EXPECT_EQ(off.iterations[0]["gold"], on.iterations[0]["gold"]);
    EXPECT_NE(off.iterations[1]["gold"], on.iterations[1]["gold"]);  // sampled with the initial weights again
    c.off_policy = false;
    for (auto [n, rollout, zero] : {std::tuple{2, 1, 0}, std::tuple{3, 1, 3}}) {
      c.rollout_ranks = rollout, c.zero = zero;
      const std::vector<PpoResult> res =
          on_ranks<PpoResult>(n, [&](comm::ProcessGroup* g) { return run_ppo(c, ppo_models(), {}, g); });
      EXPECT_EQ(res[size_t(n - 1)].summary["role"], "rollout");
      for (int r = 0; r < n - rollout; ++r)
        for (int i = 0; i < 4; ++i)
          for (const char* k : {"reward", "gold", "kl", "policy_loss", "entropy", "approx_kl", "clip_frac"}) {
            const double a = off.iterations[size_t(i)][k].get<double>();
            const double b = res[size_t(r)].iterations[size_t(i)][k].get<double>();
            EXPECT_NEAR(b, a, 1e-5 * std::max(1.0, std::abs(a)))
                << plan::rl_algo_name(algo) << " " << n << " ranks, trainer " << r << ", iteration " << i + 1 << " " << k;
          }
      EXPECT_TRUE(res[0].summary["memory"]["model_states_match_plan"].get<bool>()) << res[0].summary["memory"].dump(1);
      EXPECT_EQ(res[0].summary["rollout_ranks"], rollout);
    }
  }
}

TEST(RlAlgos, RolloutRanksThatLeaveNoTrainerAreOneLine) {
  PpoConfig c = small_config();
  c.rollout_ranks = 2;
  std::vector<std::string> errors = on_ranks<std::string>(2, [&](comm::ProcessGroup* g) {
    try {
      run_ppo(c, ppo_models(), {}, g);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  });
  EXPECT_NE(errors[0].find("--rollout-ranks 2 leaves no trainer of 2 ranks"), std::string::npos) << errors[0];
  c.rollout_ranks = 1, c.kv_cache = false;
  EXPECT_NE(error_of(c).find("--rollout-ranks samples through the KV cache"), std::string::npos) << error_of(c);
}

// An off-policy run's checkpoint holds the weights its next rollout samples with: resumed
// after 2 of 5 iterations it continues bit for bit (colocated), and 1 trainer + 1 rollout
// rank resumed after 3 equals it (the rollout rank gets the weights of rollouts 3 and 4 at the
// start).
TEST(RlAlgos, OffPolicyRunsResume) {
  strata::test::TempDir dir("rl_offpolicy_resume");
  PpoConfig c = algo_config(plan::RlAlgo::grpo);
  c.iterations = 5, c.off_policy = true;
  c.run_dir = dir.str() + "/straight";
  const PpoResult straight = run_ppo(c, ppo_models(), {});
  c.run_dir = dir.str() + "/resumed";
  c.iterations = 2, c.ckpt_every = 2;
  run_ppo(c, ppo_models(), {});
  c.iterations = 5, c.resume = true;
  const PpoResult resumed = run_ppo(c, ppo_models(), {});
  ASSERT_EQ(resumed.iterations.size(), 3u);
  for (int i = 0; i < 3; ++i)
    for (const char* k : {"reward", "gold", "kl", "policy_loss", "kl_loss"})
      EXPECT_EQ(resumed.iterations[size_t(i)][k], straight.iterations[size_t(i + 2)][k]) << k;
  PpoConfig r = c;
  r.off_policy = false, r.rollout_ranks = 1, r.resume = false;
  r.run_dir = dir.str() + "/ranks";
  r.iterations = 3, r.ckpt_every = 3;
  on_ranks<PpoResult>(2, [&](comm::ProcessGroup* g) { return run_ppo(r, ppo_models(), {}, g); });
  r.iterations = 5, r.resume = true;
  const std::vector<PpoResult> two =
      on_ranks<PpoResult>(2, [&](comm::ProcessGroup* g) { return run_ppo(r, ppo_models(), {}, g); });
  ASSERT_EQ(two[0].iterations.size(), 2u);
  for (int i = 0; i < 2; ++i)
    for (const char* k : {"reward", "gold", "kl", "policy_loss"}) {
      const double a = straight.iterations[size_t(i + 3)][k].get<double>(), b = two[0].iterations[size_t(i)][k].get<double>();
      EXPECT_NEAR(b, a, 1e-5 * std::max(1.0, std::abs(a))) << "iteration " << i + 4 << " " << k;
    }
}

// DPO on the fixture's gold-ranked pairs (320 to train, 64 held out) from the same start.
DpoConfig dpo_config() {
  DpoConfig c;
  c.steps = 60;
  c.batch = 8;
  c.lr = 2e-3f;
  c.beta = 0.5;
  c.eval_every = 20;
  c.eval_prompts = 64;
  c.seed = 5;
  return c;
}

DpoResult dpo(const DpoConfig& c, comm::ProcessGroup* g = nullptr) {
  const PairSet& p = models().pairs;
  return run_dpo(c, models().actor, models().actor, p.slice(0, 320), p.slice(320, 384), {}, g);
}

TEST(RlAlgos, DpoRaisesHeldOutAccuracyAndTheGoldScoreWithoutGeneration) {
  for (bool ipo : {false, true}) {
    DpoConfig c = dpo_config();
    c.ipo = ipo;
    const DpoResult r = dpo(c);
    const json &f = r.summary["first_eval"], &l = r.summary["last_eval"];
    std::printf("%s: held-out accuracy %.3f -> %.3f, margin %.4f -> %.4f, gold %.4f -> %.4f\n", ipo ? "IPO" : "DPO",
                f["eval_accuracy"].get<double>(), l["eval_accuracy"].get<double>(), f["eval_margin"].get<double>(),
                l["eval_margin"].get<double>(), f["gold"].get<double>(), l["gold"].get<double>());
    EXPECT_EQ(f["eval_margin"].get<double>(), 0.0);  // policy == reference at the start
    EXPECT_EQ(f["kl"].get<double>(), 0.0);
    EXPECT_GT(l["kl_k3"].get<double>(), 0.0);
    EXPECT_GT(l["entropy"].get<double>(), 0.0);
    EXPECT_GT(l["eval_accuracy"].get<double>(), 0.7);
    EXPECT_GT(l["eval_margin"].get<double>(), 0.0);
    EXPECT_GT(l["gold"].get<double>() - f["gold"].get<double>(), 0.1);
    const json& mem = r.summary["memory"];
    EXPECT_TRUE(mem["model_states_match_plan"].get<bool>()) << mem.dump(1);
    EXPECT_FALSE(mem.contains("reward"));
    EXPECT_FALSE(mem.contains("critic"));
    EXPECT_EQ(r.summary["share"]["generate"].get<double>(), 0.0);
  }
}

TEST(RlAlgos, DpoOnTwoRanksAtZero3EqualsOneProcessAndResumesBitForBit) {
  DpoConfig c = dpo_config();
  c.steps = 6, c.eval_every = 3;
  const DpoResult one = dpo(c);
  DpoConfig z = c;
  z.zero = 3;
  const std::vector<DpoResult> two = on_ranks<DpoResult>(2, [&](comm::ProcessGroup* g) { return dpo(z, g); });
  ASSERT_EQ(two[0].records.size(), one.records.size());
  for (size_t i = 0; i < one.records.size(); ++i)
    for (const auto& [k, v] : one.records[i].items()) {
      if (!v.is_number_float() || k == "time_s") continue;
      EXPECT_NEAR(two[1].records[i][k].get<double>(), v.get<double>(), 1e-5 * std::max(1.0, std::abs(v.get<double>())))
          << "record " << i << " " << k;
    }
  EXPECT_TRUE(two[0].summary["memory"]["model_states_match_plan"].get<bool>()) << two[0].summary["memory"].dump(1);

  strata::test::TempDir dir("rl_dpo_resume");
  c.run_dir = dir.str() + "/straight";
  const DpoResult straight = dpo(c);
  c.run_dir = dir.str() + "/resumed";
  c.steps = 3, c.ckpt_every = 3;
  dpo(c);
  c.steps = 6, c.resume = true;
  const DpoResult resumed = dpo(c);
  EXPECT_EQ(resumed.summary["resumed_from"], 3);
  EXPECT_EQ(resumed.summary["last_eval"], straight.summary["last_eval"]);
  EXPECT_EQ(load_model(dir.str() + "/straight/policy.safetensors", "a").params,
            load_model(dir.str() + "/resumed/policy.safetensors", "b").params);
  std::ifstream in(dir.str() + "/resumed/metrics.jsonl");
  int steps = 0;
  for (std::string l; std::getline(in, l);) steps += !json::parse(l).contains("eval");
  EXPECT_EQ(steps, 6);
}

TEST(RlAlgos, DpoImpossibleSettingsAreOneLine) {
  DpoConfig c = dpo_config();
  c.beta = 0;
  EXPECT_NE(error_of(c).find("--beta must be > 0 (got 0)"), std::string::npos);
  c.beta = -1;
  EXPECT_NE(error_of(c).find("--beta must be > 0 (got -1)"), std::string::npos);
}

}  // namespace
}  // namespace strata::rlhf
