// `strata fed train`: a federated job, server (rank 0) and K clients as separate processes.
// `strata fed compare`: centralized, centralized DP-SGD, FedAvg IID, FedAvg non-IID and
// FedAvg non-IID + DP + secure aggregation on one corpus and model, as one table.
//
//   strata fed train --clients 8 --per-round 4 --rounds 20 --partition dirichlet:0.3
//   strata fed train --clients 6 --per-round 5 --secure-agg --threshold 3 --dropout 0.2
//   strata fed compare --clients 8 --per-round 8 --rounds 30
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <filesystem>
#include <fstream>
#include <iomanip>

#include "cli/command.h"
#include "cli/flags/data.h"
#include "cli/flags/metrics.h"
#include "cli/flags/model.h"
#include "cli/flags/parallel.h"
#include "cli/flags/training.h"
#include "cli/run_config.h"
#include "core/error.h"
#include "fed/run.h"
#include "launcher/rank_status.h"
#include "train/run_spec.h"

namespace strata::cli {
namespace {

struct FedArgs {
  fed::FedConfig cfg;
  std::string partition = "iid", server_opt = "avg", summary;
  // The families shared with `strata train`: the model's size, the data, the sequence
  // length, the backend and --json.
  ModelFlags model;
  DataFlags data;
  TrainingFlags training;
  ParallelFlags parallel;
  MetricsFlags metrics;
  double timeout_s = 0;
  CLI::Option *noise_opt = nullptr, *clip_opt = nullptr;  // given: 0 never silently means "no DP" or sigma = 1
  std::string bad_update, delay;  // CLIENT:ROUND, CLIENT:SECONDS
  std::string kill, drop;         // CLIENT[,CLIENT...]:ROUND
};

std::pair<int, double> client_pair(const std::string& flag, const std::string& v) {
  const size_t colon = v.find(':');
  STRATA_CHECK(colon != std::string::npos, flag, " takes CLIENT:NUMBER (got '", v, "')");
  const std::string number = v.substr(colon + 1);
  const std::string problem = number_problem(number, NumberRange::non_negative());
  STRATA_CHECK(problem.empty(), flag, " ", v, ": ", problem, " (it takes CLIENT:NUMBER)");
  try {
    return {std::stoi(v.substr(0, colon)), std::strtod(number.c_str(), nullptr)};
  } catch (const std::exception&) {
    fail(flag, " takes CLIENT:NUMBER (got '", v, "')");
  }
}

// "1,3:2" -> clients {1, 3}, round 2 (counted from 1, as on the command line).
std::pair<std::vector<int>, int> clients_round(const std::string& flag, const std::string& v) {
  const size_t colon = v.rfind(':');
  STRATA_CHECK(colon != std::string::npos && colon > 0, flag, " takes CLIENT[,CLIENT...]:ROUND (got '", v, "')");
  std::vector<int> ids;
  try {
    for (size_t at = 0; at < colon;) {
      const size_t comma = std::min(v.find(',', at), colon);
      size_t used = 0;
      ids.push_back(std::stoi(v.substr(at, comma - at), &used));
      STRATA_CHECK(used == comma - at, flag, " takes CLIENT[,CLIENT...]:ROUND (got '", v, "')");
      at = comma + 1;
    }
    size_t used = 0;
    const int round = std::stoi(v.substr(colon + 1), &used);
    STRATA_CHECK(used == v.size() - colon - 1, flag, " takes CLIENT[,CLIENT...]:ROUND (got '", v, "')");
    return {ids, round};
  } catch (const std::logic_error&) {
    fail(flag, " takes CLIENT[,CLIENT...]:ROUND (got '", v, "')");
  }
}

fed::FedConfig resolve(FedArgs& a) {
  fed::FedConfig c = a.cfg;
  c.model.layers = a.model.layers, c.model.dim = a.model.dim, c.model.heads = a.model.heads;
  c.data = a.data.data;
  c.local.seq = a.training.seq;
  c.model.seq = c.local.seq, c.model.vocab = 256, c.model.padded_vocab = 256;
  c.partition = fed::PartitionSpec::parse(a.partition);
  STRATA_CHECK(a.server_opt == "avg" || a.server_opt == "adam",
               "--server-opt must be avg or adam (got '", a.server_opt, "')");
  c.server_opt = a.server_opt == "adam" ? fed::ServerOpt::adam : fed::ServerOpt::avg;
  if (!a.bad_update.empty()) {
    auto [k, r] = client_pair("--inject-bad-update", a.bad_update);
    c.bad_client = k, c.bad_round = int(r) - 1;  // rounds count from 1 on the command line
  }
  if (!a.kill.empty()) {
    std::tie(c.kill_clients, c.kill_round) = clients_round("--inject-kill", a.kill);
    --c.kill_round;
  }
  if (!a.drop.empty()) {
    std::tie(c.drop_clients, c.drop_round) = clients_round("--inject-drop", a.drop);
    --c.drop_round;
  }
  if (!a.delay.empty()) std::tie(c.slow_client, c.slow_s) = client_pair("--inject-delay", a.delay);
  STRATA_CHECK(!a.noise_opt || a.noise_opt->count() == 0 || c.dp_noise > 0, "--noise-multiplier must be > 0 (got ",
               c.dp_noise, ")");
  STRATA_CHECK(!a.clip_opt || a.clip_opt->count() == 0 || c.dp_clip > 0, "--clip-norm must be > 0 (got ", c.dp_clip,
               ")");
  c.validate();
  return c;
}

void add_common(CLI::App& app, FedArgs& a) {
  fed::FedConfig& c = a.cfg;
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  a.model.layers = 1, a.model.dim = 32, a.model.heads = 2;
  a.model.add_to(app, {"--layers", "--dim", "--heads"});
  narrow(app, "--layers", number_in(1, 1024));
  narrow(app, "--dim", number_in(1, 1 << 16));
  narrow(app, "--heads", number_in(1, 1024));
  a.data.data = c.data;
  a.data.add_to(app, {"--data"});
  a.training.seq = c.local.seq;
  a.training.add_to(app, {"--seq"});
  narrow(app, "--seq", number_in(1, 1 << 20));
  a.parallel.add_to(app, {"--backend"});
  app.add_option("--clients", c.clients, "K: client processes")->check(number_in(1, 1 << 20))->capture_default_str();
  app.add_option("--per-round", c.per_round, "C: clients sampled per round")->check(number_in(1, 1 << 20))->capture_default_str();
  app.add_option("--rounds", c.rounds, "R: rounds")->check(number_in(1, 1e9))->capture_default_str();
  app.add_option("--local-steps", c.local.steps, "Local SGD steps per round")->check(number_in(1, 1e9))->capture_default_str();
  app.add_option("--local-epochs", c.local.epochs, "Local passes over the client's data instead")
      ->check(number_in(0, 1e4, true));
  app.add_option("--local-batch", c.local.batch, "Windows per local step (0: full batch)")
      ->check(number_in(0, 1 << 20))
      ->capture_default_str();
  app.add_option("--lr", c.local.lr, "Client SGD learning rate")->check(number_in(0, 1e6, true))->capture_default_str();
  app.add_option("--prox-mu", c.local.prox_mu, "FedProx proximal weight (0: FedAvg)")->check(number_in(0, 1e6))
      ->capture_default_str();
  app.add_option("--server-opt", a.server_opt, "avg (FedAvg) or adam (FedAdam)")->capture_default_str();
  app.add_option("--server-lr", c.server_lr, "Server learning rate")->check(number_in(0, 1e6, true))->capture_default_str();
  app.add_option("--partition", a.partition, "iid | dirichlet:ALPHA | natural")->capture_default_str();
  app.add_option("--seed", c.seed, "Seed of data, partition, sampling, dropout and noise")
      ->capture_default_str();
  app.add_option("--dropout", c.dropout, "Probability a sampled client drops out of a round")
      ->check(number_in(0, 1))
      ->capture_default_str();
  app.add_option("--deadline", c.deadline_s, "Seconds after which a round goes on without late clients (0: wait)")
      ->check(number_in(0, 1e9));
  app.add_option("--threshold", c.threshold, "Secure aggregation: Shamir threshold t (default C/2 + 1)")
      ->check(number_in(1, 1 << 20));
  app.add_option("--sa-range", c.sa_range, "Secure aggregation: quantization clip range")
      ->check(number_in(0, 1e30, true))
      ->capture_default_str();
  a.clip_opt = app.add_option("--clip-norm", c.dp_clip, "DP-FedAvg: clip each client update to this L2 norm")
      ->check(number_in(-1e30, 1e30));
  a.noise_opt = app.add_option("--noise-multiplier", c.dp_noise, "DP-FedAvg: noise std / clip norm")->check(number_in(-1e30, 1e30));
  app.add_option("--delta", c.dp_delta, "DP: delta")->check(number_in(0, 1, true))->capture_default_str();
  app.add_option("--eval-every", c.eval_every, "Rounds between held-out evals (0: at the end)")
      ->check(number_in(0, 1e9));
  app.add_option("--eval-windows", c.eval_windows, "Held-out windows per eval")->check(number_in(1, 1 << 20))->capture_default_str();
  app.add_option("--timeout", a.timeout_s, "Communication timeout in seconds")->check(number_in(0, 1e9));
}

void setup_train(CLI::App& app) {
  auto a = std::make_shared<FedArgs>();
  add_common(app, *a);
  app.add_flag("--secure-agg", a->cfg.secure_agg, "Secure aggregation (Bonawitz et al. 2017)");
  app.add_option("--summary", a->summary, "Write the run's summary JSON here")->check(plain_path(false));
  a->metrics.add_to(app, {"--json"});
  app.add_option("--inject-bad-update", a->bad_update, "CLIENT:ROUND sends a wrong-sized update (tests)");
  app.add_option("--inject-delay", a->delay, "CLIENT:SECONDS sleeps before each update (tests)");
  app.add_option("--inject-kill", a->kill,
                 "CLIENT[,CLIENT...]:ROUND: those client processes SIGKILL themselves in that round, where a "
                 "dropout would leave (tests)");
  app.add_option("--inject-drop", a->drop,
                 "CLIENT[,CLIENT...]:ROUND: those clients drop out of every round from that one on, "
                 "announced (the simulated twin of --inject-kill; tests)");
  RunConfigFlags& config = add_run_config(app, "fed");
  app.callback([a, &app, &config] {
    const fed::FedConfig cfg = resolve(*a);  // a printed config is one that runs
    if (config.print) {
      std::cout << resolved_config(app, "fed");
      return;
    }
    if (auto code = fed::launch_if_needed(cfg, comm::parse_backend(a->parallel.backend), a->timeout_s)) {
      if (*code != 0) throw ExitCode{*code};
      return;
    }
    fed::run_as_rank(cfg, a->metrics.json, a->summary);
  });
}

// Runs `strata fed train ARGS --summary FILE` as a child job and reads the summary.
nlohmann::json run_child(const std::vector<std::string>& args, const std::string& file) {
  std::vector<std::string> argv = {launcher::self_executable(), "fed", "train"};
  argv.insert(argv.end(), args.begin(), args.end());
  argv.insert(argv.end(), {"--summary", file});
  std::string cmd;
  for (auto& s : argv) cmd += "'" + s + "' ";
  cmd += ">/dev/null";
  const int rc = std::system(cmd.c_str());
  STRATA_CHECK(rc == 0, "fed compare: `", cmd, "` failed (status ", WEXITSTATUS(rc), ")");
  std::ifstream in(file);
  return nlohmann::json::parse(in);
}

void setup_compare(CLI::App& app) {
  auto a = std::make_shared<FedArgs>();
  a->cfg.rounds = 30;
  a->cfg.local.steps = 5;
  a->cfg.local.batch = 8;
  add_common(app, *a);
  auto alpha = std::make_shared<std::string>("dirichlet:0.1");
  app.add_option("--non-iid", *alpha, "Partition of the non-IID runs")->capture_default_str();
  app.callback([&app, a, alpha] {
    fed::FedConfig cfg = resolve(*a);
    try {  // a bad --non-iid fails here, before any run, under its own name
      fed::PartitionSpec::parse(*alpha);
    } catch (const Error& e) {
      fail("--non-iid ", *alpha, ": ", train::in_flags(e));
    }
    if (!cfg.dp()) cfg.dp_clip = 0.5, cfg.dp_noise = 1.0;
    std::vector<std::string> base;
    for (const CLI::Option* o : app.get_options())
      if (o->count() > 0 && o->get_name() != "--non-iid" && o->get_name() != "--clip-norm" &&
          o->get_name() != "--noise-multiplier" && o->get_name() != "--partition")
        for (const std::string& v : o->results()) base.insert(base.end(), {o->get_name(), v});
    for (auto [k, v] : {std::pair{"--clients", cfg.clients}, {"--per-round", cfg.per_round},
                        {"--rounds", cfg.rounds}, {"--local-steps", cfg.local.steps},
                        {"--local-batch", cfg.local.batch}})
      base.insert(base.end(), {k, std::to_string(v)});
    const std::string dir = std::filesystem::temp_directory_path() / ("strata_fed_compare_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir);
    std::printf("%-36s %9s %8s %12s %12s %7s %8s\n", "setting", "held-out", "epsilon",
                "KB/client", "KB total", "rounds", "wall s");
    auto row = [](const std::string& name, double loss, double eps, double per, double total,
                  const std::string& rounds, double wall) {
      std::printf("%-36s %9.4f %8s %12.1f %12.1f %7s %8.2f\n", name.c_str(), loss,
                  eps < 0 ? "-" : cat(std::fixed, std::setprecision(2), eps).c_str(), per / 1e3,
                  total / 1e3, rounds.c_str(), wall);
      std::fflush(stdout);
    };
    const fed::CentralResult c = fed::train_central(cfg, false, 0, 0);
    row("centralized SGD", c.eval_loss, -1, double(c.data_bytes) / cfg.clients, double(c.data_bytes),
        cat(c.steps, " st"), c.wall_s);
    const fed::CentralResult d = fed::train_central(cfg, true, cfg.dp_clip, cfg.dp_noise);
    row("centralized DP-SGD", d.eval_loss, d.epsilon, double(d.data_bytes) / cfg.clients,
        double(d.data_bytes), cat(d.steps, " st"), d.wall_s);
    struct Run { std::string name; std::vector<std::string> extra; };
    const std::vector<Run> runs = {
        {"FedAvg iid", {"--partition", "iid"}},
        {"FedAvg " + *alpha, {"--partition", *alpha}},
        {"FedAvg " + *alpha + " + DP + secure agg",
         {"--partition", *alpha, "--secure-agg", "--clip-norm", cat(cfg.dp_clip), "--noise-multiplier",
          cat(cfg.dp_noise)}}};
    for (size_t i = 0; i < runs.size(); ++i) {
      std::vector<std::string> args = base;
      args.insert(args.end(), runs[i].extra.begin(), runs[i].extra.end());
      const auto s = run_child(args, dir + "/run" + std::to_string(i) + ".json");
      row(runs[i].name, s["eval_loss"], s["epsilon"], s["bytes_per_client"], s["bytes_total"],
          cat(s["rounds_applied"].get<int>(), " rd"), s["wall_s"]);
    }
    std::filesystem::remove_all(dir);
  });
}

Register train_reg("fed train", "Federated training: server and K client processes (FedAvg, FedProx, FedAdam, secure aggregation, DP)",
                   setup_train);
Register compare_reg("fed compare", "Centralized vs DP-SGD vs FedAvg (IID, non-IID, + DP + secure aggregation): one table",
                     setup_compare);

}  // namespace
}  // namespace strata::cli
