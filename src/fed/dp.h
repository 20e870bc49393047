// Differential privacy pieces shared by client-level DP-FedAvg and centralized DP-SGD.
//
// DP-FedAvg (McMahan et al. 2018, client level): each sampled client's update is clipped to
// L2 norm S; the sum of the clipped updates gets Gaussian noise of standard deviation sigma*S
// per coordinate; the server applies (sum + noise) / C with the fixed denominator C (clients
// per round), so one client changes the result by at most S / C. Accounting: the sampled
// Gaussian mechanism with q = C / K, one step per round (fed/accountant.h).
// Where the noise is added: by the server when it sees the sum; under secure aggregation it
// never does, so each client adds N(0, (sigma S)^2 / t) to its own clipped update and the sum
// over at least t survivors (else the round is aborted) carries at least (sigma S)^2.
//
// DP-SGD (Abadi et al. 2016): per-example gradients clipped to S, summed, noise N(0, (sigma S)^2)
// added, divided by the batch size; q = B / N, one step per batch.
//
// Noise is drawn from Philox streams keyed by (run seed, client, round) or (run seed, step):
// reproducible per run, independent across clients.
#pragma once
#include <cstdint>
#include <vector>

#include "core/rng.h"
#include "data/dataset.h"
#include "model/gpt.h"

namespace strata::fed {

// Scales v (n floats) to L2 norm <= clip; returns the norm before clipping.
double clip_to_norm(float* v, int64_t n, double clip);
// v[i] += std * N(0, 1) from rng.
void add_gaussian(float* v, int64_t n, double std, Rng& rng);
// The Philox stream of client `client`'s DP noise in round `round`.
Rng client_noise_rng(uint64_t seed, int client, int64_t round);
Rng server_noise_rng(uint64_t seed, int64_t round);

struct DpSgdConfig {
  int seq = 16;
  int batch = 16;       // expected examples per step (sampled without replacement here)
  int steps = 100;
  float lr = 0.1f;
  double clip = 1.0;    // S
  double noise = 1.0;   // sigma
  uint64_t seed = 1;
};

// Centralized DP-SGD on the windows of src, plain SGD update. Returns mean training loss of
// the last step. Per-example gradients are computed one window at a time (B = 1 forwards).
double train_dp_sgd(model::GPT& m, const data::TokenSource& src, const std::vector<int64_t>& windows,
                    const DpSgdConfig& cfg);

}  // namespace strata::fed
