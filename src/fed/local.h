// A client's local training and the held-out evaluation, on a GPT whose flat parameter buffer
// is the model being federated. Local training is plain SGD (the standard client optimizer of
// FedAvg), optionally with FedProx's proximal term:
//
//   per local step:  g = mean gradient over the step's windows' target tokens
//                    g += mu (w - w_global)          (FedProx, Li et al. 2020; mu = 0: FedAvg)
//                    w -= lr g
//
// batch = 0 makes a step full-batch (every window of the client), which with one local step
// and every client taking part makes FedAvg exactly centralized gradient descent.
#pragma once
#include <cstdint>
#include <vector>

#include "core/rng.h"
#include "data/dataset.h"
#include "model/gpt.h"

namespace strata::fed {

struct LocalConfig {
  int seq = 16;           // T
  int batch = 8;          // windows per local step; 0 = all of the client's windows
  int steps = 1;          // local steps per round (when epochs == 0)
  double epochs = 0;      // > 0: local passes over the client's windows instead of steps
  float lr = 0.1f;
  float prox_mu = 0;      // FedProx
};

// Reads windows (T+1 tokens each, window i at token i*T) into (B, T) tokens and targets.
void read_windows(const data::TokenSource& src, const int64_t* windows, int count, int seq,
                  std::vector<int32_t>& tokens, std::vector<int32_t>& targets);

// Mean-loss gradient over `windows` accumulated into model.grads() (zeroed first), in
// micro-batches of at most model.max_batch(); returns the mean loss per target token.
double gradient(model::GPT& m, const data::TokenSource& src, const int64_t* windows, int count,
                int seq);

struct LocalResult {
  int64_t samples = 0;  // windows this client holds (FedAvg's weight)
  int steps = 0;
  double loss = 0;      // mean training loss over the round's steps
};

// Trains m (starting from its current parameters, which are w_global) on the windows; the
// order of windows per local epoch is drawn from rng.
LocalResult train_local(model::GPT& m, const data::TokenSource& src,
                        const std::vector<int64_t>& windows, const LocalConfig& cfg, Rng& rng);

// Mean loss per target token over the first max_windows windows of src (all when fewer).
double evaluate(model::GPT& m, const data::TokenSource& src, int64_t max_windows, int seq);

}  // namespace strata::fed
