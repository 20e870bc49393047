// Settings of a federated run, shared by the server (rank 0) and the K clients (ranks 1..K).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "fed/local.h"
#include "fed/partition.h"
#include "model/gpt.h"

namespace strata::fed {

enum class ServerOpt { avg, adam };  // FedAvg (server lr times the mean update) or FedAdam

struct FedConfig {
  model::GPTConfig model;
  std::string data = "synthetic:262144";
  PartitionSpec partition;
  uint64_t seed = 1;
  int clients = 4;           // K
  int per_round = 4;         // C: clients sampled per round
  int rounds = 10;           // R
  LocalConfig local;
  ServerOpt server_opt = ServerOpt::avg;
  float server_lr = 1.0f;    // FedAvg: 1 = plain averaging
  float adam_beta1 = 0.9f, adam_beta2 = 0.99f, adam_tau = 1e-3f;  // FedAdam (Reddi et al. 2021)
  double dropout = 0;        // probability a selected client drops out of a round
  double deadline_s = 0;     // > 0: updates later than this after the round starts are dropped
  // Secure aggregation (Bonawitz et al. 2017).
  bool secure_agg = false;
  int threshold = 0;         // t; 0 = a majority of the clients per round, floor(C/2) + 1
  double sa_range = 1.0;     // each quantized coordinate is clipped to [-range, range]
  // Client-level DP (DP-FedAvg, McMahan et al. 2018).
  double dp_clip = 0;        // S > 0 turns DP on
  double dp_noise = 0;       // sigma: noise std sigma * S on the sum of clipped updates
  double dp_delta = 1e-5;
  int eval_every = 0;        // rounds between held-out evals (0: only at the end)
  int64_t eval_windows = 64;
  // Fault injection for tests: client CLIENT sends a wrong-sized update in round ROUND
  // (--inject-bad-update CLIENT:ROUND), or sleeps SECONDS before sending
  // (--inject-delay CLIENT:SECONDS).
  int bad_client = -1;
  int bad_round = -1;
  int slow_client = -1;
  double slow_s = 0;
  // --inject-kill CLIENTS:ROUND: those clients SIGKILL themselves in round ROUND, at the step
  // where a simulated dropout leaves (after sharing their masks under secure aggregation);
  // --inject-drop CLIENTS:ROUND: those clients drop out, announced, of every round from ROUND
  // on: the simulated twin of the kill.
  std::vector<int> kill_clients, drop_clients;
  int kill_round = -1, drop_round = -1;

  int t() const { return threshold > 0 ? threshold : per_round / 2 + 1; }
  bool dp() const { return dp_clip > 0; }
  // Throws one line naming the flag and numbers for impossible settings.
  void validate() const;
};

}  // namespace strata::fed
