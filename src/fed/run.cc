// Federated jobs as processes, and the centralized baselines: see run.h.
#include "fed/run.h"

#include <omp.h>

#include <cstdio>
#include <fstream>
#include <thread>

#include "ckpt/fsutil.h"
#include "comm/bootstrap.h"
#include "comm/process_group.h"
#include "core/error.h"
#include "data/sampler.h"
#include "fed/accountant.h"
#include "fed/dp.h"
#include "fed/wire.h"
#include "launcher/launcher.h"
#include "launcher/rank_status.h"
#include "train/distributed.h"

namespace strata::fed {

std::optional<int> launch_if_needed(const FedConfig& cfg, comm::Backend backend, double timeout_s) {
  if (comm::launched_as_rank()) return std::nullopt;
  // Each client is a process with its own model, data and shm channel; far past the host's cores
  // the round's collectives time out under contention and a rank is declared dead.
  const int cores = int(std::max(1u, std::thread::hardware_concurrency()));
  const int max_clients = std::max(64, 32 * cores);
  STRATA_CHECK(cfg.clients <= max_clients, "--clients ", cfg.clients, " is more client processes than this host (",
               cores, " cores) can run: at most ", max_clients);
  // Data errors (more clients than samples, ...) once, here, before any rank starts.
  open_fed_data(cfg.data, cfg.seed, cfg.partition, cfg.clients, -1, cfg.local.seq);
  launcher::LaunchOptions o;
  o.nproc = cfg.clients + 1;
  o.backend = backend;
  o.timeout_s = timeout_s;
  o.prefix_output = false;  // the server alone prints
  o.command = train::own_command_line();
  o.rank_exec = launcher::self_executable();
  o.extra_env.emplace_back("OMP_NUM_THREADS", "1");
  // A client that dies is the server's to handle (a dropout, server.h), not the job's end.
  for (int k = 1; k <= cfg.clients; ++k) o.may_fail.push_back(k);
  launcher::LaunchResult r = launcher::launch(o);
  // The server says why it failed in its own line.
  if (r.exit_code != 0 && r.failed_rank != 0) std::fprintf(stderr, "strata fed: %s\n", r.message.c_str());
  return r.exit_code;
}

nlohmann::json summary_json(const FedConfig& cfg, const FedResult& r) {
  nlohmann::json rounds = nlohmann::json::array();
  double overhead = 0;
  int applied = 0;
  for (const RoundRecord& x : r.rounds) {
    rounds.push_back({{"round", x.round},           {"selected", x.selected},
                      {"survivors", x.survivors},   {"dropped", x.dropped}, {"died", x.died},
                      {"late", x.late},             {"rejected", x.rejected},
                      {"applied", x.applied},       {"note", x.note},
                      {"train_loss", x.train_loss}, {"eval_loss", x.eval_loss},
                      {"wall_s", x.wall_s},         {"max_local_s", x.max_local_s},
                      {"bytes_down", x.bytes_down}, {"bytes_up", x.bytes_up}});
    if (x.applied) overhead += x.wall_s - x.max_local_s, ++applied;
  }
  return {{"clients", cfg.clients},
          {"per_round", cfg.per_round},
          {"rounds", cfg.rounds},
          {"partition", cfg.partition.describe()},
          {"secure_agg", cfg.secure_agg},
          {"threshold", cfg.secure_agg ? cfg.t() : 0},
          {"dp", cfg.dp()},
          {"eval_loss", r.eval_loss},
          {"epsilon", r.epsilon},
          {"delta", cfg.dp() ? cfg.dp_delta : 0.0},
          {"rejected", r.rejected},
          {"bytes_total", r.bytes_total},
          {"bytes_per_client", r.bytes_per_client},
          {"wall_s", r.wall_s},
          {"rounds_applied", applied},
          {"mean_round_overhead_s", applied ? overhead / applied : 0.0},
          {"per_round_records", rounds}};
}

void run_as_rank(const FedConfig& cfg, bool json, const std::string& summary_path) {
  comm::Options opt;
  for (int k = 1; k <= cfg.clients; ++k) opt.may_die.push_back(k);  // the server's ops with it fail alone
  comm::GroupPtr g = comm::init_from_env(opt);
  STRATA_CHECK(g->size() == cfg.clients + 1, "fed: --clients ", cfg.clients, " needs ",
               cfg.clients + 1, " ranks but the launcher started ", g->size());
  if (g->rank() != 0) return run_client(*g, cfg);
  auto line = [&](const RoundRecord& x) {
    if (json) {
      std::printf("%s\n", nlohmann::json({{"round", x.round + 1}, {"survivors", x.survivors},
                                          {"applied", x.applied}, {"eval_loss", x.eval_loss},
                                          {"wall_s", x.wall_s}}).dump().c_str());
    } else {
      std::printf("round %lld/%d: %d of %d clients (%d dropped%s, %d late, %d rejected)%s%s",
                  (long long)x.round + 1, cfg.rounds, x.survivors, x.selected, x.dropped,
                  x.died ? cat(" of which ", x.died, " died").c_str() : "", x.late, x.rejected,
                  x.applied ? "" : ", NOT applied: ", x.applied ? "" : x.note.c_str());
      if (x.train_loss > 0) std::printf(", local loss %.4f", x.train_loss);
      if (x.eval_loss >= 0) std::printf(", held-out %.4f", x.eval_loss);
      std::printf(", %.3f s, %.1f KB down, %.1f KB up\n", x.wall_s, x.bytes_down / 1e3, x.bytes_up / 1e3);
    }
    std::fflush(stdout);
  };
  const FedResult r = run_server(*g, cfg, line);
  const nlohmann::json s = summary_json(cfg, r);
  if (!json) {
    std::printf("held-out loss %.4f after %d rounds, %.2f s, %.1f KB in all (%.1f KB per client), "
                "%lld rejected",
                r.eval_loss, cfg.rounds, r.wall_s, r.bytes_total / 1e3, r.bytes_per_client / 1e3,
                (long long)r.rejected);
    if (cfg.dp()) std::printf(", client-level epsilon %.2f at delta %g", r.epsilon, cfg.dp_delta);
    std::printf("\n");
  }
  if (!summary_path.empty()) ckpt::atomic_write_file(summary_path, s.dump(1) + "\n");
  // A run whose every round was aborted (secure aggregation below threshold) trained nothing.
  STRATA_CHECK(s["rounds_applied"].get<int>() > 0, "no round of ", cfg.rounds,
               " was applied (every aggregation aborted): the model is the initial one");
}

CentralResult train_central(const FedConfig& cfg, bool dp, double clip, double sigma) {
  data::Split split = data::open_split(cfg.data, cfg.seed);
  const int seq = cfg.local.seq;
  const int64_t n = data::num_windows(split.train->size(), seq, seq);
  std::vector<int64_t> all(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) all[size_t(i)] = i;
  CentralResult r;
  r.batch = int(std::min<int64_t>(n, int64_t(std::max(1, cfg.local.batch)) * cfg.per_round));
  r.steps = int64_t(cfg.rounds) * std::max(1, cfg.local.steps);
  r.data_bytes = uint64_t(split.train->size());  // one byte per token as the data is stored
  model::GPT m(cfg.model, std::min(64, r.batch));
  m.init(cfg.seed);
  omp_set_num_threads(1);  // like each client process: the comparison is per core
  const int64_t t0 = now_ns();
  if (dp) {
    DpSgdConfig d;
    d.seq = seq, d.batch = r.batch, d.steps = int(r.steps), d.lr = cfg.local.lr;
    d.clip = clip, d.noise = sigma, d.seed = cfg.seed;
    train_dp_sgd(m, *split.train, all, d);
    SgmQuery q;
    q.q = double(r.batch) / double(n);
    q.sigma = sigma;
    q.steps = r.steps;
    q.delta = cfg.dp_delta;
    r.epsilon = epsilon(q).epsilon;
  } else {
    LocalConfig l = cfg.local;
    l.batch = r.batch;
    l.steps = int(r.steps);
    l.epochs = 0;
    l.prox_mu = 0;
    Rng rng(cfg.seed, 0xCE47'0000'0000'0000ull);
    train_local(m, *split.train, all, l, rng);
  }
  r.wall_s = double(now_ns() - t0) / 1e9;
  r.eval_loss = evaluate(m, *split.val, cfg.eval_windows, seq);
  return r;
}

}  // namespace strata::fed
