// The models and settings the RLHF loop tests share (test_ppo.cc, test_rl_algos.cc): a tiny
// actor and a reward model trained once per test binary on pairs sampled from it.
#pragma once
#include "rlhf/ppo.h"
#include "rlhf/reward.h"
#include "tiny.h"

namespace strata::rlhf {

constexpr int kP = 4, kR = 8;

// Actor (GPT-2 initialised: a near-uniform policy) and a reward model trained on pairs
// sampled from it (the pairs too: DPO learns from them).
struct Models {
  ModelFile actor, reward;
  PairSet pairs;  // 384: the reward model trains on the first 320
  double eval_accuracy = 0;
};

inline const Models& models() {
  static const Models m = [] {
    Models out;
    out.actor.cfg = test::tiny_config(16);
    out.actor.params = test::tiny_params(out.actor.cfg, 21);
    KvDecoder dec(out.actor.cfg, 32);
    dec.bind(out.actor.params.data());
    const GoldRule gold(1, out.actor.cfg.vocab);
    out.pairs = synthetic_pairs(dec, out.actor.cfg, gold, 384, kP, kR, {1.0f, 0}, 3);
    const PairSet& pairs = out.pairs;
    ValueModel rm(out.actor.cfg, 32, /*trainable=*/true, /*allocate_state=*/false);
    RewardConfig rc;
    rc.steps = 150;
    rc.batch = 16;
    rc.lr = 2e-3f;
    const RewardResult r =
        train_reward(rm, out.actor.params, pairs.slice(0, 320), pairs.slice(320, 384), rc, {});
    out.eval_accuracy = r.eval_accuracy;
    out.reward.cfg = out.actor.cfg;
    out.reward.params = r.params;
    out.reward.head = rm.head();
    return out;
  }();
  return m;
}

inline PpoModels ppo_models() {
  PpoModels m;
  m.actor = m.reference = models().actor;
  m.reward = models().reward;
  m.actor_path = m.reference_path = "actor", m.reward_path = "rm";
  return m;
}

inline PpoConfig small_config() {
  PpoConfig c;
  c.iterations = 12;
  c.rollout_batch = 16;
  c.minibatch = 8;
  c.epochs = 2;
  c.prompt_len = kP;
  c.response_len = kR;
  c.kl_coef = 0.02;
  c.actor_lr = 3e-3f;
  c.critic_lr = 2e-3f;
  c.seed = 5;
  return c;
}

}  // namespace strata::rlhf
