// The federated server (rank 0) and client (ranks 1..K) loops over one process group.
//
// Per round r (all messages point-to-point, fed/wire.h):
//   server -> every client   control(r, participate = sampled this round)
//   server -> sampled        model: the global parameters w
//   client                   local training from w (fed/local.h) -> update d = w_local - w
//   plain aggregation:       client -> server update d (DP: clipped), samples n
//   secure aggregation:      the four stages of fed/secagg_protocol.h on the quantized
//                            (n / n_mean) d (DP: clipped d plus the client's noise share)
//   server                   mean update D over the survivors, weighted by samples
//                            (DP: fixed denominator C), then w += server_lr D (FedAvg) or
//                            FedAdam's step (Reddi et al. 2021)
// Clients sampled per round are a seeded draw (partition.h); a sampled client drops out of a
// round with probability --dropout (a seeded draw per client and round; it announces it, as a
// closed connection would), and any message later than --deadline after the round started is
// ignored (the client counts as dropped; its late message is drained later). A message of
// the wrong kind, round, client or size is rejected and counted, the round goes on. A secure
// round with fewer than t survivors at any stage is aborted: nothing is applied.
// A client whose process dies (the group is made with comm::Options::may_die = the clients)
// fails the server's next op with it within ~0.25 s (the point-to-point engine checks the
// awaited peer's pid every 200 ms); it is a dropout of that step, exactly as an announced
// one, and of every later round. When an aborted round leaves fewer live clients than a
// round needs (t, or 1 without secure aggregation), run_server stops the live clients and
// throws one line naming the round, the dead, the live and the threshold.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "comm/process_group.h"
#include "fed/config.h"

namespace strata::fed {

struct RoundRecord {
  int64_t round = 0;
  int selected = 0, survivors = 0, dropped = 0, late = 0, rejected = 0;
  int died = 0;                 // of the dropped: clients whose process had died
  bool applied = false;
  std::string note;             // why a round was not applied
  double train_loss = 0;        // mean local loss of the survivors (plain aggregation only)
  double eval_loss = -1;        // held-out, when evaluated this round
  double wall_s = 0;            // round start to update applied
  double max_local_s = 0;       // slowest survivor's local training
  uint64_t bytes_down = 0, bytes_up = 0;  // server's traffic this round
};

struct FedResult {
  std::vector<RoundRecord> rounds;
  double eval_loss = -1;
  double epsilon = -1;          // DP runs: client-level epsilon at cfg.dp_delta
  int64_t rejected = 0;
  uint64_t bytes_total = 0;     // all server traffic, both directions
  double bytes_per_client = 0;  // mean traffic of a client sampled in at least one round
  double wall_s = 0;
  std::vector<float> params;    // final global model
};

struct Message;
// on_round: after each round. inspect: every message the server receives, as received (tests
// check that under secure aggregation no individual update arrives in the clear).
FedResult run_server(comm::ProcessGroup& g, const FedConfig& cfg,
                     const std::function<void(const RoundRecord&)>& on_round = {},
                     const std::function<void(int client, const Message&)>& inspect = {});
void run_client(comm::ProcessGroup& g, const FedConfig& cfg);

// Control-message flags.
constexpr uint32_t kParticipate = 1, kStop = 2, kAbort = 4, kExcluded = 8;

}  // namespace strata::fed
