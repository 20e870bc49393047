#include "train/distributed.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <fstream>
#include <iterator>
#include <optional>
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
#include "model/tensor/tp_cost.h"
#include "parallel/zero_memory.h"
#include "train/pipeline_rank.h"
#include "train/run_dir_lock.h"
#include "model/shard.h"
#include "model/tensor/collectives.h"

namespace strata::train {
namespace {

using nlohmann::json;

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

// The tensor-parallel figures of every rank next to model/tensor/tp_cost.h's prediction for the same
// model and layout (what `strata plan --local` prints): model states, the model's
// activation buffers, and the payload of the last step's tp collectives.
json tensor_parallel_summary(const TrainConfig& cfg, const ParallelConfig& pc,
                             parallel::DataParallelEngine& engine, const model::GPT& gpt,
                             parallel::Mesh& mesh) {
  const parallel::MeshDims d = mesh.dims();
  const int W = mesh.world().size(), A = cfg.accum(d.dp), b = cfg.batch / (A * d.dp);
  const double mine[3] = {double(engine.memory_report().model_states()),
                          double(gpt.activation_bytes()), double(engine.tp_bytes_last_step())};
  std::vector<double> all(size_t(3 * W));
  mesh.world().all_gather(mine, all.data(), 3, DType::f64);
  const model::TpModel m = model::tp_model(cfg.model);
  const bool sp = pc.sequence_parallel;
  json ranks = json::array();
  std::string text = cat("tensor parallel: ", d.describe(), sp ? ", sequence parallel" : "",
                         "; per rank measured (plan):");
  for (int r = 0; r < W; ++r) {
    const int t = r % d.tp;
    const int64_t states = parallel::zero_model_state_bytes(model::tp_local_params(m, d.tp, t), d.dp,
                                                        pc.dp.stage, pc.dp.precision)
                               .total();
    const int64_t acts =
        model::tp_activation_bytes(m, d.tp, sp, t, b, gpt.compute() == DType::bf16);
    const int64_t bytes = A * model::tp_comm_bytes_per_micro(m, d.tp, sp, b, cfg.train_seq());
    const double* x = &all[size_t(3 * r)];
    ranks.push_back({{"rank", r},
                     {"tp_rank", t},
                     {"dp_rank", r / d.tp},
                     {"model_states", int64_t(x[0])},
                     {"model_states_plan", states},
                     {"activations", int64_t(x[1])},
                     {"activations_plan", acts},
                     {"tp_bytes_per_step", int64_t(x[2])},
                     {"tp_bytes_per_step_plan", bytes}});
    text += cat("\n  rank ", r, ": model states ", int64_t(x[0]), " B (", states,
                "), activations ", int64_t(x[1]), " B (", acts, "), tp bytes/step ",
                int64_t(x[2]), " (", bytes, ")");
  }
  return {{"tp", d.tp}, {"dp", d.dp}, {"sequence_parallel", sp}, {"ranks", ranks},
          {"text", text}};
}

}  // namespace

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
  const parallel::MeshDims d = mesh_dims();
  model::check_tensor_parallel(cfg.model, d.tp, sequence_parallel, cfg.train_seq());
  cfg.validate(d.dp);
  parallel::check_batch_split(cfg.batch, cfg.micro_batch, d.dp);
  validate_pipeline(cfg, *this);
  const int64_t psi = model::local_num_params(cfg.model, {d.tp, 0});
  if (data_parallel || n > 1) parallel::check_memory_fits(psi, d.dp, n, dp, 0);
}

std::optional<int> launch_ranks_if_needed(const TrainConfig& cfg, const ParallelConfig& pc) {
  dump_into_run_dir(cfg);
  if (comm::launched_as_rank()) {
    if (pc.nproc > 1) comm::refuse_stale_rank_env(cat("--nproc ", pc.nproc));
    if (pc.max_restarts > 0) comm::refuse_stale_rank_env(cat("--max-restarts ", pc.max_restarts));
    if (comm::strata_rank_env_is_stale()) {
      const comm::RankEnv env = comm::detect_rank_env();
      std::fprintf(stderr, "strata train: running as rank %d of %d from the environment (%s; no strata launcher "
                   "started this process), waiting for the other ranks\n", env.rank, env.world_size,
                   comm::strata_rank_env_text().c_str());
    }
    return std::nullopt;
  }
  if (pc.nproc <= 1 && pc.max_restarts == 0) return std::nullopt;
  RunDirLock lock(cfg.run_dir);  // held across the ranks' lives and restarts
  comm::LaunchOptions o;
  o.nproc = pc.nproc;
  o.backend = pc.backend;
  o.timeout_s = pc.timeout_s;
  o.prefix_output = false;  // rank 0 alone prints progress; --json output stays pure JSON
  o.max_restarts = pc.max_restarts;
  o.command = own_command_line();
  o.rank_exec = comm::self_executable();
  // On a terminal, rank 0 draws the live progress line through the launcher's pipe.
  if (isatty(STDOUT_FILENO)) o.extra_env.emplace_back("STRATA_PROGRESS_TTY", "1");
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
  // Rank 0 takes the run dir unless its launcher holds it; another job's rank 0 stops here.
  std::optional<RunDirLock> lock;
  if (env.rank == 0) lock.emplace(cfg.run_dir);
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

  parallel::Mesh mesh(*world, pc.mesh_dims());
  const parallel::MeshDims dims = mesh.dims();
  std::unique_ptr<model::TensorComm> tensor_comm;
  if (mesh.has_tp())
    tensor_comm = std::make_unique<model::TensorComm>(mesh.tp(), pc.sequence_parallel);

  Topology topo;
  topo.rank = world->rank();
  topo.world = world->size();
  topo.dp_rank = mesh.dp_rank();
  topo.dp_world = dims.dp;
  topo.tp = tensor_comm.get();
  topo.counts_loss = mesh.tp_rank() == 0;
  topo.group = world.get();
  topo.sum_across_ranks = [g = world.get()](double x) {
    g->all_reduce(&x, 1);
    return x;
  };
  topo.ckpt_barrier = [g = ckpt_group.get()] { g->barrier(); };
  topo.restart = comm::restart_attempt();
  if (dims.pp > 1) {
    TrainResult r = train_pipeline_rank(cfg, pc, mesh, topo);
    write_trace();
    world->barrier();
    return r;
  }

  parallel::DataParallelEngine* engine = nullptr;  // owned by the trainer's run
  EngineFactory factory;
  factory.model_owns_state = false;
  const model::GPT* built_model = nullptr;
  factory.compute = pc.dp.precision == parallel::Precision::bf16 ? DType::bf16 : DType::f32;
  factory.make = [&](model::GPT& m, const parallel::OptimConfig& optim, uint64_t seed) {
    built_model = &m;
    auto e = parallel::make_data_parallel_engine(m, mesh.dp(), pc.dp, optim, seed);
    engine = e.get();
    return std::unique_ptr<parallel::StepEngine>(std::move(e));
  };
  factory.summary_extras = [&] {
    const parallel::MemoryReport mem = engine->memory_report();
    const parallel::ModelStateBytes want = parallel::zero_model_state_bytes(
        engine->layout().psi(), dims.dp, pc.dp.stage, pc.dp.precision);
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
                           want.total(), " B for ZeRO ", pc.dp.stage, " over ", dims.dp,
                           " data-parallel rank(s)); buffers: comm ", mem.comm, " B, scratch ",
                           mem.activations, " B");
    if (dims.tp > 1) {
      json tp = tensor_parallel_summary(cfg, pc, *engine, *built_model, mesh);
      text += "\n" + tp["text"].get<std::string>();
      tp.erase("text");
      extras["tensor_parallel"] = tp;
    }
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
