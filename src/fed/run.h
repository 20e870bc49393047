// Running a federated job: starting the server and client processes under the launcher, the
// per-rank entry point, and the centralized baselines `strata fed compare` measures against.
#pragma once
#include <optional>
#include <string>

#include "comm/types.h"
#include "fed/config.h"
#include "fed/server.h"
#include "nlohmann/json.hpp"

namespace strata::fed {

// Not yet a rank: starts clients + 1 ranks of this very command line (rank 0 = server) with
// one OpenMP thread each, waits, returns the exit code. Already a rank: nothing.
std::optional<int> launch_if_needed(const FedConfig& cfg, comm::Backend backend, double timeout_s);

// As this process's rank: the server prints a line per round (or JSON records) and writes
// `summary_path` when given; clients train.
void run_as_rank(const FedConfig& cfg, bool json, const std::string& summary_path);

nlohmann::json summary_json(const FedConfig& cfg, const FedResult& r);

struct CentralResult {
  double eval_loss = -1;
  double epsilon = -1;     // DP-SGD only
  int64_t steps = 0;
  int batch = 0;
  double wall_s = 0;
  uint64_t data_bytes = 0; // the training tokens shipped to the one place that trains
};
// SGD (dp = false) or DP-SGD (per-example clipping to clip, noise sigma * clip) on the union of
// the clients' data, with batch = local batch x clients per round and steps = rounds x local
// steps: the same examples per step as a FedAvg round touches. One OpenMP thread, as each
// client process has.
CentralResult train_central(const FedConfig& cfg, bool dp, double clip, double sigma);

}  // namespace strata::fed
