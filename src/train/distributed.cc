#include "train/distributed.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "comm/bootstrap.h"
#include "comm/launcher.h"
#include "comm/process_group.h"
#include "comm/rank_status.h"
#include "core/error.h"
#include "core/trace.h"
#include "nlohmann/json.hpp"
#include "parallel/data_parallel.h"
#include "parallel/overlap.h"
#include "parallel/zero_memory.h"

namespace strata::train {
namespace {

using nlohmann::json;

// This process's program and arguments, to start the same command once per rank.
std::vector<std::string> own_command_line() {
  std::ifstream f("/proc/self/cmdline", std::ios::binary);
  std::string all((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  std::vector<std::string> args;
  for (size_t at = 0; at < all.size();) {
    size_t end = all.find('\0', at);
    if (end == std::string::npos) end = all.size();
    args.push_back(all.substr(at, end - at));
    at = end + 1;
  }
  STRATA_CHECK(!args.empty(), "cannot read this process's command line from /proc/self/cmdline");
  args[0] = comm::self_executable();  // the same binary, wherever PATH points
  return args;
}

double ms(int64_t ns) { return double(ns) / 1e6; }

// The share of gradient communication hidden behind compute, over every rank's trace.
json overlap_summary(comm::ProcessGroup& group) {
  parallel::OverlapStats s = parallel::overlap(tracer().events(), parallel::gradient_comm_filter());
  double mine[2] = {double(s.comm_ns), double(s.hidden_ns)};
  double all[2] = {mine[0], mine[1]};
  group.all_reduce(all, 2);
  const double share = all[0] > 0 ? all[1] / all[0] : 1.0;
  return {{"gradient_comm_ms", ms(int64_t(all[0]))},
          {"hidden_ms", ms(int64_t(all[1]))},
          {"hidden_share", share},
          {"rank0_hidden_share", s.hidden_share()}};
}

// Watchdog dumps (comm/flight_recorder.h) land beside the run's other files, where
// `strata doctor hang RUN_DIR` looks for them.
void dump_into_run_dir(const TrainConfig& cfg) {
  if (!cfg.run_dir.empty() && !std::getenv("STRATA_DUMP_DIR"))
    setenv("STRATA_DUMP_DIR", cfg.run_dir.c_str(), 0);
}

std::string trace_path(const TrainConfig& cfg, int rank) {
  return cfg.run_dir + "/trace-rank" + std::to_string(rank) + ".json";
}

}  // namespace

int ParallelConfig::world() const {
  return comm::launched_as_rank() ? comm::detect_rank_env().world_size : nproc;
}

void ParallelConfig::validate(const TrainConfig& cfg) const {
  STRATA_CHECK(nproc >= 1, "--nproc must be at least 1 (got ", nproc, ")");
  const int n = world();
  STRATA_CHECK(max_restarts >= 0, "--max-restarts must not be negative (got ", max_restarts, ")");
  STRATA_CHECK(timeout_s >= 0, "--timeout must not be negative (got ", timeout_s, ")");
  STRATA_CHECK(!trace || !cfg.run_dir.empty(), "--trace needs --run-dir (the traces go there)");
  dp.validate();
  cfg.validate(n);
  parallel::check_batch_split(cfg.batch, cfg.micro_batch, n);
  if (data_parallel || n > 1) parallel::check_memory_fits(cfg.model.num_params(), n, n, dp, 0);
}

std::optional<int> launch_ranks_if_needed(const TrainConfig& cfg, const ParallelConfig& pc) {
  dump_into_run_dir(cfg);
  if (comm::launched_as_rank()) return std::nullopt;
  if (pc.nproc <= 1 && pc.max_restarts == 0) return std::nullopt;
  comm::LaunchOptions o;
  o.nproc = pc.nproc;
  o.backend = pc.backend;
  o.timeout_s = pc.timeout_s;
  o.prefix_output = false;  // rank 0 alone prints progress; --json output stays pure JSON
  o.max_restarts = pc.max_restarts;
  o.command = own_command_line();
  o.rank_exec = comm::self_executable();
  // Like torchrun: ranks sharing a host split its cores instead of each taking all of them.
  if (!std::getenv("OMP_NUM_THREADS")) {
    const int cores = int(std::max(1u, std::thread::hardware_concurrency()));
    o.extra_env.emplace_back("OMP_NUM_THREADS", std::to_string(std::max(1, cores / pc.nproc)));
  }
  comm::LaunchResult r = comm::launch(o);
  if (r.exit_code != 0) std::fprintf(stderr, "strata train: %s\n", r.message.c_str());
  return r.exit_code;
}

TrainResult train_as_rank(const TrainConfig& cfg, const ParallelConfig& pc) {
  const comm::RankEnv env = comm::detect_rank_env();
  dump_into_run_dir(cfg);
  STRATA_CHECK(pc.nproc == 1 || pc.nproc == env.world_size, "--nproc ", pc.nproc,
               " but the launcher started a world of ", env.world_size, " ranks");
  if (pc.trace) {
    tracer().enable(env.rank);
    tracer().name_thread("compute");
  }
  auto write_trace = [&] {
    if (pc.trace) tracer().write(trace_path(cfg, env.rank));
  };
  if (env.world_size == 1 && !pc.data_parallel) {
    TrainResult r = Trainer(cfg).run();
    write_trace();
    return r;
  }

  comm::Options co;
  co.backend = pc.backend;
  co.timeout_s = pc.timeout_s;
  comm::GroupPtr world =
      env.world_size > 1 ? comm::init_from_env(co) : comm::make_thread_world(1, co).front();
  // The checkpoint writer thread synchronises on a group of its own (ckpt/checkpointer.h).
  comm::GroupPtr ckpt_group = world->split(0, world->rank(), "ckpt");

  Topology topo;
  topo.rank = world->rank();
  topo.world = world->size();
  topo.group = world.get();
  topo.sum_across_ranks = [g = world.get()](double x) {
    g->all_reduce(&x, 1);
    return x;
  };
  topo.ckpt_barrier = [g = ckpt_group.get()] { g->barrier(); };
  topo.restart = comm::restart_attempt();

  parallel::DataParallelEngine* engine = nullptr;  // owned by the trainer's run
  EngineFactory factory;
  factory.model_owns_state = false;
  factory.make = [&](model::GPT& m, const parallel::OptimConfig& optim, uint64_t seed) {
    auto e = parallel::make_data_parallel_engine(m, *world, pc.dp, optim, seed);
    engine = e.get();
    return std::unique_ptr<parallel::StepEngine>(std::move(e));
  };
  factory.summary_extras = [&] {
    const parallel::MemoryReport mem = engine->memory_report();
    const parallel::ModelStateBytes want = parallel::zero_model_state_bytes(
        engine->layout().psi(), topo.world, pc.dp.stage, pc.dp.precision);
    json extras = {{"parallel", {{"zero", pc.dp.stage},
                                 {"precision", parallel::precision_name(pc.dp.precision)},
                                 {"bucket_mb", pc.dp.bucket_mb},
                                 {"prefetch", pc.dp.prefetch},
                                 {"buckets", engine->buckets().size()},
                                 {"describe", pc.dp.describe()}}},
                   {"engine_memory", mem.to_json()},
                   {"model_states_formula",
                    {{"parameters", want.parameters},
                     {"gradients", want.gradients},
                     {"optimizer", want.optimizer},
                     {"total", want.total()}}}};
    std::string text = cat("model states per rank: ", mem.model_states(), " B (formula ",
                           want.total(), " B for ZeRO ", pc.dp.stage, " over ", topo.world,
                           " rank(s)); buffers: comm ", mem.comm, " B, scratch ", mem.activations,
                           " B");
    if (pc.trace) {
      json ov = overlap_summary(*world);
      text += cat("\ngradient communication hidden behind compute: ",
                  int(100 * ov["hidden_share"].get<double>() + 0.5), "% of ",
                  ov["gradient_comm_ms"].get<double>(), " ms (all ranks)");
      extras["overlap"] = ov;
    }
    extras["text"] = text;
    return extras;
  };

  TrainResult r = Trainer(cfg, topo, factory).run();
  write_trace();
  world->barrier();  // nobody tears the segment down while a peer still reads it
  return r;
}

}  // namespace strata::train
