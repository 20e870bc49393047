// Direct preference optimisation (Rafailov et al. 2023) and IPO (Azar et al. 2023): the
// policy learns from preference pairs against a frozen reference, with no reward model, no
// critic and no generation. Two models: the policy (trained on the data-parallel/ZeRO
// engine, as PPO's actor) and the reference (frozen; sharded under ZeRO-3).
//
// For a pair (prompt x, chosen y_c, rejected y_r), with π and π_ref the summed log-probs of a
// response's tokens (IPO: their mean over the response, as TRL computes it):
//   h      = (π(y_c) - π_ref(y_c)) - (π(y_r) - π_ref(y_r))
//   DPO    loss = -log σ(β h);           d loss / d π(y_c) = -β σ(-β h) = -d loss / d π(y_r)
//   IPO    loss = (h - 1 / (2β))²;       d loss / d π(y_c) = 2 (h - 1 / (2β)) = -d loss / d π(y_r)
//   implicit rewards  β (π(y) - π_ref(y)); margin: chosen's minus rejected's; a pair counts
//          as right when h > 0
// A step takes `batch` pairs (2·batch sequences through the policy), in a seeded order,
// epoch after epoch (the last incomplete batch of an epoch is left out). The reference's
// log-probs are computed once, before the first step. Held-out pairs give the preference
// accuracy and margins; on responses sampled from the policy to a fixed set of held-out
// prompts, the gold score (gold.h) measures what the preferences taught, and the KL from the
// reference (k1, k3 per response) and the entropy per token how far the policy moved, before
// training and at every evaluation (generation for evaluation only).
// Checkpoints (<run-dir>/dpo-state.safetensors every ckpt_every steps): the policy's
// parameters and AdamW moments and the step; a resumed run continues bit for bit. At the end
// <run-dir>/policy.safetensors (an actor for `strata rlhf ppo` or generation).
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "comm/process_group.h"
#include "nlohmann/json.hpp"
#include "parallel/engine.h"
#include "rlhf/gold.h"
#include "rlhf/model_io.h"
#include "rlhf/sampler.h"

namespace strata::rlhf {

struct DpoTerm {
  double loss = 0, dchosen = 0, drejected = 0;  // d loss / d π(y_c), d loss / d π(y_r)
  double h = 0;
};
// pc, pr: the policy's log-probs of chosen and rejected; rc, rr: the reference's (sums, or
// means under IPO).
DpoTerm dpo_term(double pc, double pr, double rc, double rr, double beta, bool ipo);

struct DpoConfig {
  model::RecomputePolicy recompute;  // of the policy's trunk
  double beta = 0.1;
  bool ipo = false;
  int steps = 100;
  int batch = 8;  // pairs per step
  float lr = 1e-4f;
  parallel::OptimConfig optim;
  uint64_t seed = 1;        // pair order
  uint64_t gold_seed = 1;   // the gold rule of the evaluation
  int eval_every = 20;      // steps between evaluations (0: at the end only)
  int eval_prompts = 64;    // held-out prompts whose sampled responses the gold rule scores
  SampleConfig sample;      // of those responses
  std::string run_dir;      // empty: no files
  int ckpt_every = 0;       // steps between checkpoints (0: none)
  bool resume = false;      // continue from <run-dir>/dpo-state.safetensors
  int zero = 0;             // ZeRO stage of the policy's engine (0-3)
  // Throws one line naming the flag for an impossible setting.
  void validate() const;
  nlohmann::json to_json() const;
};

struct DpoResult {
  std::vector<nlohmann::json> records;  // the metrics records: steps and evaluations
  nlohmann::json summary;
};

// Trains `policy` against the frozen `reference` (the initial policy unless another) on
// `train`, evaluating on `eval`; log(record) after every step and evaluation (may be empty).
// With a group of N > 1 ranks (every rank calls it with the same arguments) each step's
// pairs are split N ways and the gradients summed; the same run as one process up to fp32
// summation order, at any ZeRO stage. Rank 0 writes the files.
DpoResult run_dpo(const DpoConfig& cfg, const ModelFile& policy, const ModelFile& reference, const PairSet& train,
                  const PairSet& eval, const std::function<void(const nlohmann::json&)>& log,
                  comm::ProcessGroup* group = nullptr);

}  // namespace strata::rlhf
