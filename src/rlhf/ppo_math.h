// The arithmetic of policy-gradient RLHF for language models, per token, independent of
// models: PPO (Schulman et al. 2017; Ziegler et al. 2019; the InstructGPT recipe as in TRL
// and DeepSpeed-Chat) and the critic-free estimators GRPO, Dr. GRPO and RLOO (below).
//
// Terms, for one response of R tokens a_0..a_{R-1}:
//   logp_t     log π(a_t | prefix) of the current policy, with temperature τ:
//              log softmax(z / τ)[a_t] over the first V logits z of the row (with the entropy
//              and the logits' gradient: kernels/crossentropy.h log_softmax_forward/backward,
//              the language-modelling loss's row statistics)
//   old_t      logp_t of the policy that generated the rollout (fixed during the update)
//   ref_t      logp_t of the frozen reference model
//   r_t        per-token reward: -β·(old_t - ref_t), plus the reward model's score at t = R-1
//   v_t        critic value at the state before a_t; old_v_t its rollout-time value
//   GAE        δ_t = r_t + γ v_{t+1} - v_t (v_R = 0: the episode ends), A_t = δ_t + γλ A_{t+1};
//              returns G_t = A_t + v_t (Schulman et al. 2016)
//   policy     ρ = exp(logp - old); loss = max(-A ρ, -A clip(ρ, 1-ε, 1+ε)); d/dlogp = -A ρ
//              where the unclipped term is the max, else 0; clipped when the second is larger
//   value      ½ max((v - G)², (old_v + clip(v - old_v, -ε_v, ε_v) - G)²)
//   entropy    H = -Σ p log p of softmax(z / τ); the loss subtracts c_ent·H
//   KL         k1 = logp - ref (unbiased, can be negative), k2 = ½ (logp - ref)²,
//              k3 = (e^{ref - logp} - 1) - (ref - logp) (unbiased, >= 0) (Schulman 2020);
//              approx-KL of an update: mean ½ (logp - old)²
//   controller β ← β (1 + clip(KL / target - 1, -0.2, 0.2) · n / horizon) (Ziegler et al.)
//   k3 in the loss (GRPO) β·k3(logp, ref) per token; d/dlogp = β (1 - e^{ref - logp})
// Critic-free advantages, one scalar per response broadcast over its tokens, from the k
// responses to one prompt with rewards r_1..r_k (score, minus β Σ_t k1 when the KL is in the
// reward):
//   GRPO       A_i = (r_i - mean) / (std + 1e-4), std with Bessel's correction (Shao et al.
//              2024, as TRL computes it); equal rewards give A = 0
//   Dr. GRPO   A_i = r_i - mean (Liu et al. 2025: no division by the group's std), and the
//              token losses summed and divided by a constant (the longest response allowed)
//              instead of each response's own length
//   RLOO       A_i = r_i - (Σ_j r_j - r_i) / (k - 1), the leave-one-out baseline (Ahmadian
//              et al. 2024; Kool et al. 2019)
// Everything is O(R) per response, or O(V) per token for the softmax statistics.
#pragma once
#include <cmath>
#include <cstdint>
#include <vector>

namespace strata::rlhf {

// Advantages and returns of one response (GAE, v_R = 0).
void gae(const double* rewards, const double* values, int R, double gamma, double lambda,
         double* advantages, double* returns);

// (x - mean) / sqrt(var + 1e-8) in place over n values (population variance); with
// shift_mean = false the mean is added back (TRL's whiten of rewards).
void whiten(double* x, int64_t n, bool shift_mean = true);

struct PolicyTerm {
  double loss = 0, dlogp = 0;
  bool clipped = false;  // the clipped term was the larger (no gradient)
};
PolicyTerm policy_term(double logp, double old_logp, double advantage, double clip);

struct ValueTerm {
  double loss = 0, dvalue = 0;
  bool clipped = false;
};
ValueTerm value_term(double value, double old_value, double ret, double clip);

// KL estimators of one token (terms above).
inline double kl_k1(double logp, double ref) { return logp - ref; }
inline double kl_k2(double logp, double ref) { return 0.5 * (logp - ref) * (logp - ref); }
inline double kl_k3(double logp, double ref) {
  const double d = ref - logp;
  return std::expm1(d) - d;
}

// β·k3 of one token and its derivative by logp (GRPO's KL in the loss).
struct KlTerm {
  double loss = 0, dlogp = 0;
};
inline KlTerm kl_k3_term(double logp, double ref, double beta) {
  return {beta * kl_k3(logp, ref), beta * -std::expm1(ref - logp)};
}

// Advantages of `groups` groups of k consecutive responses (rewards[g·k + j]), one per
// response. scale_by_std: GRPO; without: Dr. GRPO.
void group_advantages(const double* rewards, int64_t groups, int k, bool scale_by_std, double* adv);
void rloo_advantages(const double* rewards, int64_t groups, int k, double* adv);

// 1 - Var(returns - values) / Var(returns); 0 when the returns do not vary.
double explained_variance(const std::vector<double>& values, const std::vector<double>& returns);

// β of the KL penalty: fixed (target <= 0) or adapted toward a target KL per response.
class KlController {
 public:
  KlController(double beta, double target, double horizon)
      : beta_(beta), target_(target), horizon_(horizon) {}
  double beta() const { return beta_; }
  void set_beta(double b) { beta_ = b; }
  // After a rollout of n responses whose mean KL (sum of k1 over a response) was kl.
  void update(double kl, int64_t n);

 private:
  double beta_, target_, horizon_;
};

}  // namespace strata::rlhf
