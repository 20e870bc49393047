// FedConfig::validate: every impossible setting of a federated run, as one line naming the flag.
#include "fed/config.h"

#include <cmath>
#include <tuple>

#include "core/error.h"

namespace strata::fed {

void FedConfig::validate() const {
  model.validate();
  STRATA_CHECK(clients >= 1, "--clients must be at least 1 (got ", clients, ")");
  STRATA_CHECK(per_round >= 1 && per_round <= clients, "--per-round must be in [1, --clients = ",
               clients, "] (got ", per_round, ")");
  STRATA_CHECK(rounds >= 1, "--rounds must be positive (got ", rounds, ")");
  STRATA_CHECK(local.seq >= 1 && local.seq <= model.seq, "--seq must be in [1, ", model.seq,
               "] (got ", local.seq, ")");
  STRATA_CHECK(local.batch >= 0, "--local-batch must be >= 0 (got ", local.batch, ")");
  STRATA_CHECK(local.steps >= 1 || local.epochs > 0, "--local-steps must be positive (got ",
               local.steps, ")");
  STRATA_CHECK(local.lr > 0, "--lr must be positive (got ", local.lr, ")");
  STRATA_CHECK(local.prox_mu >= 0, "--prox-mu must be >= 0 (got ", local.prox_mu, ")");
  STRATA_CHECK(server_lr > 0, "--server-lr must be positive (got ", server_lr, ")");
  STRATA_CHECK(dropout >= 0 && dropout < 1, "--dropout must be in [0, 1) (got ", dropout, ")");
  STRATA_CHECK(deadline_s >= 0, "--deadline must be >= 0 seconds (got ", deadline_s, ")");
  STRATA_CHECK(secure_agg || threshold == 0, "--threshold ", threshold, " needs --secure-agg");
  if (secure_agg) {
    STRATA_CHECK(t() >= 2 || per_round == 1, "--threshold must be at least 2 (got ", t(), ")");
    STRATA_CHECK(t() <= per_round, "--threshold ", t(), " is larger than the clients per round (",
                 per_round, "): no round could ever be unmasked");
    STRATA_CHECK(per_round >= 2, "--secure-agg needs at least 2 clients per round (got ", per_round, ")");
    STRATA_CHECK(sa_range > 0, "--sa-range must be positive (got ", sa_range, ")");
  }
  if (dp_clip != 0 || dp_noise != 0) {
    STRATA_CHECK(std::isfinite(dp_clip) && std::isfinite(dp_noise), "--clip-norm ", dp_clip,
                 " and --noise-multiplier ", dp_noise, " must be finite");
    STRATA_CHECK(dp_clip > 0, "--clip-norm must be > 0 (got ", dp_clip, ")");
    STRATA_CHECK(dp_noise > 0, "--noise-multiplier must be > 0 (got ", dp_noise, ")");
    STRATA_CHECK(dp_delta > 0 && dp_delta < 1, "--delta must be in (0, 1) (got ", dp_delta, ")");
  }
  for (auto [flag, ids, round] : {std::tuple{"--inject-kill", &kill_clients, kill_round},
                                   std::tuple{"--inject-drop", &drop_clients, drop_round}}) {
    for (int k : *ids)
      STRATA_CHECK(k >= 0 && k < clients, flag, ": client ", k, " is not in [0, --clients = ", clients, ")");
    STRATA_CHECK(ids->empty() || (round >= 0 && round < rounds), flag, ": round ", round + 1,
                 " is not in [1, --rounds = ", rounds, "]");
  }
  STRATA_CHECK(eval_windows >= 1, "--eval-windows must be positive (got ", eval_windows, ")");
}

}  // namespace strata::fed
