// The reward model and the PPO loop on the synthetic task, at test size: the reward model
// learns the gold rule's preference, PPO raises the gold score, a resumed run continues bit
// for bit, and bad models are refused before any rollout.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <thread>

#include "comm/process_group.h"
#include "core/error.h"
#include "rlhf/ppo.h"
#include "rlhf/reward.h"
#include "support/temp_dir.h"
#include "ppo_fixture.h"

namespace strata::rlhf {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

TEST(Reward, LearnsTheGoldPreference) {
  // Held-out pairs the model never saw, ranked by the gold rule: well above chance.
  std::printf("held-out pair accuracy %.3f\n", models().eval_accuracy);
  EXPECT_GT(models().eval_accuracy, 0.75);
}

TEST(Reward, PairsFileRoundTripsAndBadFilesAreOneLine) {
  strata::test::TempDir dir("rlhf_pairs");
  PairSet s;
  s.P = 2, s.R = 3;
  s.prompts = {1, 2, 3, 4};
  s.chosen = {5, 6, 7, 8, 9, 10};
  s.rejected = {11, 12, 13, 14, 15, 16};
  const std::string f = dir.str() + "/pairs.txt";
  write_pairs(f, s);
  const PairSet r = read_pairs(f, 40);
  EXPECT_EQ(r.prompts, s.prompts);
  EXPECT_EQ(r.chosen, s.chosen);
  EXPECT_EQ(r.rejected, s.rejected);
  auto error_of = [&](const std::string& text) {
    std::ofstream(f) << text;
    try {
      read_pairs(f, 40);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(error_of("").find("no pairs"), std::string::npos);
  EXPECT_NE(error_of("1 2 | 3 4\n").find(":1: expected 'PROMPT | CHOSEN | REJECTED'"), std::string::npos);
  EXPECT_NE(error_of("1 2 | 3 x | 5 6\n").find(":1: 'x' is not a token id"), std::string::npos);
  EXPECT_NE(error_of("1 2 | 3 4 | 5 6\n1 | 3 4 | 5 6\n").find(":2: prompt/response of 1/2"),
            std::string::npos);
  EXPECT_NE(error_of("1 2 | 3 4 | 5 99\n").find("'99' is not a token id in [0, 40)"), std::string::npos);
}

// One epoch of one minibatch updates the very policy that generated the rollout: every ratio
// is 1 (up to rounding between the cached and the full forward), so nothing is clipped; a clip
// range of 1e-12 clips (almost) every token of the same runs.
TEST(Ppo, ClipFractionFollowsTheRatio) {
  PpoConfig c = small_config();
  c.iterations = 3, c.epochs = 1, c.minibatch = c.rollout_batch;
  const PpoResult fresh = run_ppo(c, ppo_models(), {});
  for (const json& it : fresh.iterations) EXPECT_EQ(it["clip_frac"].get<double>(), 0.0) << it.dump();
  c.epochs = 2, c.clip = 1e-12;
  const PpoResult tight = run_ppo(c, ppo_models(), {});
  for (const json& it : tight.iterations) EXPECT_GT(it["clip_frac"].get<double>(), 0.0) << it.dump();
}

TEST(Ppo, RaisesTheGoldScore) {
  const PpoResult r = run_ppo(small_config(), ppo_models(), {});
  ASSERT_EQ(r.iterations.size(), 12u);
  const double first = r.iterations[0]["gold"].get<double>();
  double last = 0;
  for (int i = 9; i < 12; ++i) last += r.iterations[size_t(i)]["gold"].get<double>() / 3;
  std::printf("gold score %.4f at iteration 1, %.4f over iterations 10-12\n", first, last);
  EXPECT_GT(last - first, 0.15) << "gold " << first << " -> " << last;
  EXPECT_GT(r.iterations[11]["reward"].get<double>(), r.iterations[0]["reward"].get<double>());
  double max_clip = 0;
  for (const json& it : r.iterations) {
    EXPECT_LE(it["clip_frac"].get<double>(), 1.0);
    max_clip = std::max(max_clip, it["clip_frac"].get<double>());
    EXPECT_GT(it["entropy"].get<double>(), 0.0);
    EXPECT_NEAR(it["share"]["generate"].get<double>() + it["share"]["score"].get<double>() +
                    it["share"]["train"].get<double>(), 1.0, 1e-9);
  }
  // The second epoch and minibatch update a policy the first one moved: at lr 3e-3 some
  // ratios leave [1 - 0.2, 1 + 0.2] in some iteration.
  EXPECT_GT(max_clip, 0.0);
  EXPECT_NEAR(r.iterations[0]["kl"].get<double>(), 0.0, 1e-9);  // actor == reference at first
  // Model states of all four models and the KV cache equal strata plan --rlhf's estimate.
  const json& mem = r.summary["memory"];
  EXPECT_TRUE(mem["model_states_match_plan"].get<bool>()) << mem.dump(1);
  const int64_t psi = models().actor.cfg.num_params(), head = models().actor.cfg.dim + 1;
  EXPECT_EQ(mem["actor"]["optimizer"], 8 * psi);
  EXPECT_EQ(mem["plan"]["critic"]["parameters"], 4 * (psi + head));
  EXPECT_EQ(mem["plan"]["reference"]["gradients"], 0);
}

// A damaged run state (bytes flipped in its tensors) is refused by its checksum, naming the
// file, instead of resumed.
TEST(Ppo, ResumeRefusesADamagedState) {
  strata::test::TempDir dir("rlhf_damaged");
  PpoConfig c = small_config();
  c.run_dir = dir.str();
  c.iterations = 1, c.ckpt_every = 1;
  run_ppo(c, ppo_models(), {});
  const std::string f = dir.str() + "/ppo-state.safetensors";
  {
    std::fstream io(f, std::ios::in | std::ios::out | std::ios::binary);
    io.seekp(-64, std::ios::end);
    io.write(std::string(64, '\x7f').data(), 64);
  }
  c.iterations = 2, c.resume = true;
  try {
    run_ppo(c, ppo_models(), {});
    ADD_FAILURE() << "a damaged state resumed";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(f + ": checksum mismatch"), std::string::npos) << e.what();
  }
}

TEST(Ppo, ResumeContinuesBitForBit) {
  strata::test::TempDir dir("rlhf_resume");
  PpoConfig c = small_config();
  c.iterations = 4;
  c.run_dir = dir.str() + "/straight";
  const PpoResult straight = run_ppo(c, ppo_models(), {});
  c.run_dir = dir.str() + "/resumed";
  c.iterations = 2;
  c.ckpt_every = 2;
  run_ppo(c, ppo_models(), {});
  c.iterations = 4;
  c.resume = true;
  const PpoResult resumed = run_ppo(c, ppo_models(), {});
  EXPECT_EQ(resumed.summary["resumed_from"], 2);
  ASSERT_EQ(resumed.iterations.size(), 2u);
  for (int i = 0; i < 2; ++i)
    for (const char* k : {"reward", "gold", "kl", "policy_loss", "value_loss", "approx_kl", "beta"})
      EXPECT_EQ(resumed.iterations[size_t(i)][k], straight.iterations[size_t(i + 2)][k]) << k;
  const ModelFile a = load_model(dir.str() + "/straight/actor.safetensors", "a");
  const ModelFile b = load_model(dir.str() + "/resumed/actor.safetensors", "b");
  EXPECT_EQ(a.params, b.params);
  // metrics.jsonl holds iterations 1..4 once each.
  std::ifstream in(dir.str() + "/resumed/metrics.jsonl");
  int lines = 0;
  for (std::string l; std::getline(in, l); ++lines) EXPECT_EQ(json::parse(l)["iteration"], lines + 1);
  EXPECT_EQ(lines, 4);
}

// Runs c on n ranks (threads with in-process groups); the results of every rank.
std::vector<PpoResult> run_ranks(const PpoConfig& c, int n) {
  if (n == 1) return {run_ppo(c, ppo_models(), {})};
  std::vector<comm::GroupPtr> world = comm::make_thread_world(n);
  std::vector<PpoResult> res(static_cast<size_t>(n));
  std::vector<std::thread> ranks;
  for (int r = 0; r < n; ++r)
    ranks.emplace_back([&, r] { res[size_t(r)] = run_ppo(c, ppo_models(), {}, world[size_t(r)].get()); });
  for (std::thread& t : ranks) t.join();
  return res;
}

TEST(Ppo, DataParallelRanksRunTheSameRun) {
  // N = 1, 2, 4 ranks (threads with shm-free in-process groups), the same seeds and global
  // rollout batch: the same rewards and losses up to fp32 summation order.
  PpoConfig c = small_config();
  c.iterations = 3;
  const PpoResult one = run_ppo(c, ppo_models(), {});
  for (int n : {2, 4}) {
    const std::vector<PpoResult> res = run_ranks(c, n);
    double worst = 0;
    for (int r = 0; r < n; ++r) {
      ASSERT_EQ(res[size_t(r)].iterations.size(), 3u);
      for (int i = 0; i < 3; ++i)
        for (const char* k : {"reward", "gold", "kl", "policy_loss", "value_loss", "entropy", "approx_kl"}) {
          const double a = one.iterations[size_t(i)][k].get<double>(), b = res[size_t(r)].iterations[size_t(i)][k].get<double>();
          EXPECT_NEAR(b, a, 1e-5 * std::max(1.0, std::abs(a))) << n << " ranks, rank " << r << ", iteration " << i + 1 << ": " << k;
          worst = std::max(worst, std::abs(b - a) / std::max(1.0, std::abs(a)));
        }
    }
    std::printf("%d ranks: largest difference from one process %.3g (relative)\n", n, worst);
    // Per rank: the rollout's share of the KV cache, the same replicated model states, as
    // strata plan --rlhf predicts for n GPUs.
    EXPECT_TRUE(res[0].summary["memory"]["model_states_match_plan"].get<bool>()) << res[0].summary["memory"].dump(1);
    EXPECT_EQ(res[0].summary["memory"]["actor"]["kv_cache"].get<int64_t>() * n,
              one.summary["memory"]["actor"]["kv_cache"].get<int64_t>());
  }
}

TEST(Ppo, ZeroStagesRunTheSameRunWithThePlannedModelStates) {
  // The actor and critic on the data-parallel engine at ZeRO 1 and 3 over N = 1, 2 ranks
  // (at 3 with reference and reward model sharded, gathered per unit on use):
  // the same run as ZeRO 0 on one process (rewards and losses within fp32 tolerance), each
  // rank's model states as strata plan --rlhf predicts them for that stage, byte for byte.
  PpoConfig c = small_config();
  c.iterations = 2;
  const PpoResult base = run_ppo(c, ppo_models(), {});
  const json& m0 = base.summary["memory"];
  for (int zero : {1, 3})
    for (int n : {1, 2}) {
      c.zero = zero;
      const std::vector<PpoResult> res = run_ranks(c, n);
      double worst = 0;
      for (int r = 0; r < n; ++r)
        for (int i = 0; i < 2; ++i)
          for (const char* k : {"reward", "gold", "kl", "policy_loss", "value_loss", "entropy", "approx_kl"}) {
            const double a = base.iterations[size_t(i)][k].get<double>();
            const double b = res[size_t(r)].iterations[size_t(i)][k].get<double>();
            EXPECT_NEAR(b, a, 1e-5 * std::max(1.0, std::abs(a)))
                << "zero " << zero << ", " << n << " ranks, rank " << r << ", iteration " << i + 1 << ": " << k;
            worst = std::max(worst, std::abs(b - a) / std::max(1.0, std::abs(a)));
          }
      const json& m = res[0].summary["memory"];
      std::printf("zero %d, %d ranks: largest difference %.3g (relative); per rank: actor states %lld / %lld / "
                  "%lld bytes, reference parameters %lld bytes\n",
                  zero, n, worst, (long long)m["actor"]["parameters"].get<int64_t>(),
                  (long long)m["actor"]["gradients"].get<int64_t>(), (long long)m["actor"]["optimizer"].get<int64_t>(),
                  (long long)m["reference"]["parameters"].get<int64_t>());
      EXPECT_TRUE(m["model_states_match_plan"].get<bool>()) << "zero " << zero << ", " << n << " ranks: " << m.dump(1);
      // What the stage shards: optimizer state from ZeRO-1, parameters at ZeRO-3, of the
      // frozen models too (the actor is then gathered whole for generation only).
      const int64_t opt = m["actor"]["optimizer"].get<int64_t>(), opt0 = m0["actor"]["optimizer"].get<int64_t>();
      EXPECT_LE(opt, opt0 / n + 64 * n) << zero << " " << n;
      const int64_t p = m["actor"]["parameters"].get<int64_t>(), p0 = m0["actor"]["parameters"].get<int64_t>();
      if (zero == 3) EXPECT_LE(p, p0 / n + 64 * n);
      else EXPECT_EQ(p, p0);
      const int64_t ref = m["reference"]["parameters"].get<int64_t>();
      const int64_t ref0 = m0["reference"]["parameters"].get<int64_t>();
      if (zero == 3) EXPECT_LE(ref, ref0 / n + 64 * n);
      else EXPECT_EQ(ref, ref0);
    }
}

TEST(Ppo, ResumesAcrossZeroStagesAndRanks) {
  // A ZeRO-3 run on 2 ranks checkpoints whole tensors; one process at ZeRO 0 continues it
  // and ends where an uninterrupted one-process run ends.
  strata::test::TempDir tmp("rlhf_zero_resume");
  const std::string dir = tmp.str();
  PpoConfig c = small_config();
  c.iterations = 3;
  const PpoResult whole = run_ppo(c, ppo_models(), {});
  PpoConfig first = c;
  first.iterations = 2;
  first.zero = 3;
  first.run_dir = dir;
  first.ckpt_every = 2;
  run_ranks(first, 2);
  PpoConfig rest = c;
  rest.run_dir = dir;
  rest.resume = true;
  const PpoResult cont = run_ppo(rest, ppo_models(), {});
  ASSERT_EQ(cont.iterations.size(), 1u);
  for (const char* k : {"reward", "gold", "kl", "policy_loss", "value_loss"}) {
    const double a = whole.iterations[2][k].get<double>(), b = cont.iterations[0][k].get<double>();
    EXPECT_NEAR(b, a, 1e-5 * std::max(1.0, std::abs(a))) << k;
  }
}

TEST(Ppo, RefusesBadModelsBeforeAnyRollout) {
  auto error_of = [](PpoModels m, PpoConfig c) {
    try {
      check_models(m, c);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  PpoModels m = ppo_models();
  m.reference.cfg.dim = 64;
  m.reference_path = "ref.safetensors";
  EXPECT_NE(error_of(m, small_config()).find("--reference ref.safetensors (layers 2, dim 64"),
            std::string::npos);
  m = ppo_models();
  m.reward.head.clear();
  EXPECT_NE(error_of(m, small_config()).find("--reward rm: no value head"), std::string::npos);
  PpoConfig c = small_config();
  c.response_len = 13;
  EXPECT_NE(error_of(ppo_models(), c).find("--response-len 13 + --prompt-len 4 = 17 positions, beyond the "
                                           "context of --actor (16)"),
            std::string::npos)
      << error_of(ppo_models(), c);
}

}  // namespace
}  // namespace strata::rlhf
