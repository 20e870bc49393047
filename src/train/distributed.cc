#include "train/distributed.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <fstream>
#include <iterator>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "comm/bootstrap.h"
#include "comm/hier/topology.h"
#include "comm/process_group.h"
#include "comm/runtime.h"
#include "core/env.h"
#include "core/error.h"
#include "core/files.h"
#include "core/phase.h"
#include "core/timer.h"
#include "core/trace.h"
#include "cost/activations.h"
#include "cost/comm.h"
#include "data/dataset.h"
#include "diag/net_check.h"
#include "launcher/launcher.h"
#include "launcher/live_world.h"
#include "launcher/rank_status.h"
#include "model/context/context_comm.h"
#include "model/shard.h"
#include "model/tensor/collectives.h"
#include "nlohmann/json.hpp"
#include "parallel/data_parallel.h"
#include "parallel/overlap.h"
#include "parallel/placement.h"
#include "train/context_metrics.h"
#include "train/expert_state.h"
#include "train/metrics.h"
#include "recovery/mem_checkpoints.h"
#include "train/pipeline_rank.h"
#include "recovery/run_dir_lock.h"

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

// summary.json's "tensor_parallel" section: the figures of every rank next to cost/'s
// prediction for the same model and layout (what `strata plan --local` prints): model
// states, the model's activation buffers, and the payload of the last step's tp collectives.
void add_tensor_parallel_section(SummaryBuilder& summary, const TrainConfig& cfg,
                                 const ParallelConfig& pc, parallel::DataParallelEngine& engine,
                                 const model::GPT& gpt, parallel::Mesh& mesh) {
  const parallel::MeshDims d = mesh.dims();
  // The ranks sharing each global batch: dp, times the replica groups that split it.
  const int data_ranks = pc.data_ranks(), W = mesh.world().size(), A = cfg.accum(data_ranks),
            b = cfg.batch / (A * data_ranks);
  // Under cp the activations include the cp attention's buffers (cost/activations.h).
  const int64_t cp_buffers = gpt.context_comm() ? gpt.context_comm()->buffer_bytes() : 0;
  const double mine[3] = {double(engine.memory_report().model_states()),
                          double(gpt.activation_bytes() + cp_buffers),
                          double(engine.tp_bytes_last_step())};
  std::vector<double> all(size_t(3 * W));
  mesh.world().all_gather(mine, all.data(), 3, DType::f64);
  const cost::GptShape m = model::gpt_shape(cfg.model);
  const bool sp = pc.sequence_parallel;
  json ranks = json::array();
  std::string text = cat("tensor parallel: ", d.describe(), sp ? ", sequence parallel" : "",
                         "; per rank measured (plan):");
  for (int r = 0; r < W; ++r) {
    const parallel::MeshCoord at = parallel::Mesh::coord_of(d, r);
    const int t = at.tp;
    // Dense views over dp x cp, the rank's E/ep experts over dp x cp / ep (parallel/region.h).
    const int64_t experts = model::expert_params(cfg.model, d.ep, d.tp);
    const int64_t psi = model::local_num_params(cfg.model, {d.tp, t}, {d.ep, 0});
    const int64_t states =
        cost::moe_model_state_bytes(psi - experts, d.dp * d.cp, experts, d.dp * d.cp / d.ep,
                                    pc.dp.stage, pc.dp.precision)
            .total();
    const bool bf16 = gpt.compute() == DType::bf16;
    const int64_t acts =
        d.cp > 1 ? cost::cp_activation_bytes(m, d.tp, sp, t, b, bf16,
                                             pc.cp.mode == model::CpMode::ring, d.cp,
                                             cfg.train_seq())
                 : cost::tp_activation_bytes(m, d.tp, sp, t, b, bf16);
    const int64_t bytes = A * cost::tp_comm_bytes_per_micro(m, d.tp, sp, b, cfg.train_seq() / d.cp);
    const double* x = &all[size_t(3 * r)];
    ranks.push_back({{"rank", r},
                     {"tp_rank", t},
                     {"cp_rank", at.cp},
                     {"dp_rank", at.dp},
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
  summary.set("tensor_parallel",
              {{"tp", d.tp}, {"dp", d.dp}, {"sequence_parallel", sp}, {"ranks", ranks}});
  summary.line(text);
}

// Across hosts: a warning when tp groups span hosts (parallel/placement.h), and with
// --preflight the bandwidth doctor (diag/net_check.h), its report on stderr and in
// <run-dir>/preflight.json. Collective over the world.
void check_hosts_before_training(const TrainConfig& cfg, const ParallelConfig& pc, comm::ProcessGroup& world,
                                 const parallel::MeshDims& dims) {
  const comm::HostLayout layout = comm::discover_hosts(world);
  const std::string warning = parallel::tp_placement_warning(layout, dims);
  if (world.rank() == 0 && !warning.empty()) std::fprintf(stderr, "strata train: warning: %s\n", warning.c_str());
  if (!pc.preflight) return;
  diag::NetCheckOptions o;
  o.net.p2p_bytes = size_t(1) << 20;
  o.net.reps = 2;
  o.net.coll_bytes = size_t(4) << 20;
  o.net.coll_iters = 2;
  o.host.tp = dims.tp;
  o.host.wanted_ifaces = pc.ifaces;
  nlohmann::json report = diag::run_net_check(world, o);
  if (world.rank() != 0) return;
  std::ostringstream text;
  const int findings = diag::print_net_check(report, false, text);
  std::fprintf(stderr, "strata train: preflight (strata doctor net):\n%s", text.str().c_str());
  if (findings > 0)
    std::fprintf(stderr, "strata train: preflight found %d problem(s) (above); training goes on\n", findings);
  if (!cfg.run_dir.empty()) {
    atomic_write_file(cfg.run_dir + "/preflight.json", report.dump(2) + "\n");
  }
}


// Data, tensor, context and expert parallelism: the trainer's model on this rank, its dense
// gradients reduced over dp x cp (each cp rank's are its tokens' share) and its expert
// gradients over edp (the model was built for the ep group, topo.ep).
class MeshRunner final : public ModelRunner {
 public:
  MeshRunner(const TrainConfig& cfg, const ParallelConfig& pc, parallel::Mesh& mesh, comm::ProcessGroup& world,
             model::ContextComm* cp)
      : ModelRunner(pc.dp.precision == cost::Precision::bf16 ? DType::bf16 : DType::f32, cp),
        cfg_(cfg), pc_(pc), mesh_(mesh), world_(world), dims_(mesh.dims()) {}

  // With MoE: the last step's gradient-reduce bytes, in all and of the expert region.
  json step_metrics() override {
    if (!cfg_.model.moe.enabled()) return nullptr;
    const parallel::Region* x = dp_engine_->expert_region();  // null: no expert unit here
    const int64_t rx = x ? dp_engine_->grad_reduce_bytes_last_step(*x) : 0;
    return json{{"grad_reduce_bytes", dp_engine_->grad_reduce_bytes_last_step()}, {"grad_reduce_bytes_experts", rx}};
  }

  void summary_sections(SummaryBuilder& summary) override;

 private:
  std::unique_ptr<parallel::StepEngine> build_engine(model::GPT& m, const parallel::OptimConfig& optim,
                                                     uint64_t seed) override {
    parallel::ExpertGroups xg;
    if (mesh_.has_ep()) xg = {&mesh_.edp(), &mesh_.ep()};
    auto e = parallel::make_data_parallel_engine(m, mesh_.dp_cp(), pc_.dp, optim, seed, xg);
    dp_engine_ = e.get();
    return e;
  }
  int64_t outer_state_formula(bool overlap, bool error_feedback) const override {
    const RankStateFormula f = formula();
    const int stage = pc_.dp.stage;
    return cost::outer_state_bytes(f.dense_params, f.dense_ranks, stage, overlap, error_feedback) +
           (f.expert_params > 0 ? cost::outer_state_bytes(f.expert_params, f.edp_ranks, stage, overlap, error_feedback)
                                : 0);
  }
  // Model states and reduce bytes by region against the formulas (train/expert_state.h).
  RankStateFormula formula() const {
    RankStateFormula f = rank_state_formula(model_->num_params(), model::expert_params(cfg_.model, dims_.ep, dims_.tp),
                                            dims_, pc_.dp, cfg_.accum(pc_.data_ranks()));
    if (muon()) {
      const MuonFormula m = muon_plan();
      f.states.optimizer -= 4 * (m.dense_updated + m.expert_updated);  // one moment, not two
    }
    return f;
  }
  bool muon() const { return cfg_.optim.kind == parallel::OptimizerKind::muon; }
  MuonFormula muon_plan() const {
    const RankStateFormula f = rank_state_formula(model_->num_params(),
                                                  model::expert_params(cfg_.model, dims_.ep, dims_.tp), dims_, pc_.dp,
                                                  cfg_.accum(pc_.data_ranks()));
    const int dense_rank = mesh_.dp_cp().rank(), edp_rank = mesh_.has_ep() ? mesh_.edp().rank() : dense_rank;
    return muon_formula(*model_, f, pc_.dp.stage, dense_rank, edp_rank, cfg_.optim.muon.ns_steps);
  }

  const TrainConfig& cfg_;
  const ParallelConfig& pc_;
  parallel::Mesh& mesh_;
  comm::ProcessGroup& world_;
  const parallel::MeshDims dims_;
  parallel::DataParallelEngine* dp_engine_ = nullptr;  // the engine build_engine made (the trainer owns it)
};

// The engine's memory and reduce bytes against the formulas, and the tp, cp and overlap
// sections of the layouts that have them.
void MeshRunner::summary_sections(SummaryBuilder& summary) {
  const parallel::MemoryReport mem = dp_engine_->memory_report();
  const RankStateFormula f = formula();
  const cost::ModelStateBytes want = f.states;
  const json by_region = rank_state_summary(f, *dp_engine_);
  summary.set("parallel", {{"zero", pc_.dp.stage},
                           {"precision", parallel::precision_name(pc_.dp.precision)},
                           {"bucket_mb", pc_.dp.bucket_mb},
                           {"prefetch", pc_.dp.prefetch},
                           {"buckets", dp_engine_->num_buckets()},
                           {"reduce_dtype", parallel::precision_name(pc_.dp.reduce())},
                           {"grad_reduce_bytes_per_step", dp_engine_->grad_reduce_bytes_last_step()},
                           {"describe", pc_.dp.describe()}});
  summary.set("engine_memory", mem.to_json());
  summary.set_all(by_region);
  std::string text = cat("model states per rank: ", mem.model_states(), " B (formula ", want.total(),
                         " B for ZeRO ", pc_.dp.stage, " over ", dims_.dp * dims_.cp, " data-parallel rank(s)",
                         f.expert_params > 0 ? cat(", experts over ", f.edp_ranks, " edp rank(s)") : "",
                         "); buffers: comm ", mem.comm, " B, scratch ", mem.activations, " B");
  if (by_region.contains("experts")) {
    const json& x = by_region["experts"];
    text += cat("\nexperts: ", f.expert_params, " of this rank's ", model_->num_params(),
                " parameters; model states dense ", x["dense_model_states"].get<int64_t>(), " B + experts ",
                x["expert_model_states"].get<int64_t>(), " B; gradient reduce bytes per step dense ",
                x["grad_reduce_bytes_dense"].get<int64_t>(), " (formula ", f.reduce_bytes_dense, ") + experts ",
                x["grad_reduce_bytes_experts"].get<int64_t>(), " (", f.reduce_bytes_experts, ")");
  }
  summary.line(text);
  if (muon()) add_muon_section(summary, cfg_.optim.muon, *model_, *dp_engine_, muon_plan());
  if (dims_.tp > 1) add_tensor_parallel_section(summary, cfg_, pc_, *dp_engine_, *model_, mesh_);
  if (dims_.cp > 1) add_cp_section(summary, *model_, world_);
  if (pc_.trace) {
    const json ov = overlap_summary(world_);
    summary.set("overlap", ov);
    summary.line(cat("gradient communication hidden behind compute: ", int(100 * ov["hidden_share"].get<double>() + 0.5),
                     "% of ", ov["gradient_comm_ms"].get<double>(), " ms (all ranks)"));
  }
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
  args[0] = launcher::self_executable();  // the same binary, wherever PATH points
  return args;
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
  if (pc.nproc <= 1 && pc.max_restarts == 0 && pc.hosts.empty()) return std::nullopt;
  recovery::RunDirLock lock(cfg.run_dir);  // held across the ranks' lives and restarts
  launcher::LaunchOptions o;
  o.nproc = pc.nproc;
  o.backend = pc.backend;
  o.timeout_s = pc.timeout_s;
  o.prefix_output = false;  // rank 0 alone prints progress; --json output stays pure JSON
  o.max_restarts = pc.max_restarts;
  o.hosts = pc.hosts;
  o.hosts_source = pc.hosts_source;
  o.rsh_agent = pc.rsh_agent;
  o.ifaces = pc.ifaces;
  o.elastic = pc.elastic;
  o.live = pc.recovery != Recovery::restart;
  o.live_rejoin = pc.recovery == Recovery::live;
  o.command = own_command_line();
  o.rank_exec = launcher::self_executable();
  // On a terminal, rank 0 draws the live progress line through the launcher's pipe.
  if (isatty(STDOUT_FILENO)) o.extra_env.emplace_back("STRATA_PROGRESS_TTY", "1");
  // Like torchrun: ranks sharing a host split its cores instead of each taking all of them.
  if (!std::getenv("OMP_NUM_THREADS")) {
    const int cores = int(std::max(1u, std::thread::hardware_concurrency()));
    int per_host = pc.nproc;  // across hosts: the most ranks any host runs
    if (!pc.hosts.empty()) {
      per_host = 1;
      for (const launcher::HostSlots& h : pc.hosts) per_host = std::max(per_host, h.slots);
    }
    o.extra_env.emplace_back("OMP_NUM_THREADS", std::to_string(std::max(1, cores / per_host)));
  }
  const parallel::MeshDims dims = pc.mesh_dims();
  // Live recovery re-forms whole data-parallel replicas: the tp x pp ranks of a dp index.
  o.live_inner = dims.tp * dims.cp;
  o.live_stages = dims.pp;
  if (pc.outer.groups > 1) {  // replica groups: a group goes and comes back whole
    o.live_inner = pc.world() / pc.outer.groups;
    o.live_stages = 1;
  }
  o.rank_role = [dims, groups = pc.outer.groups, n = pc.world() / std::max(1, pc.outer.groups)](int rank, int world) {
    try {
      if (groups <= 1) return parallel::Mesh::describe_rank(dims.resolved(world), rank);
      // Under --replica-groups: the group (its place in the world), then the rank in it.
      const std::string in_group = parallel::Mesh::describe_rank(dims.resolved(n), rank % n);
      return cat("group ", rank / n, in_group.empty() ? "" : " ", in_group);
    } catch (const Error&) {
      return std::string();  // a world the mesh does not fit (an elastic restart): no role
    }
  };
  // The job's in-memory checkpoints outlive its ranks for their restarts, not the job: the
  // launcher removes them when it ends, however it ends (launcher/run_segments.h).
  launcher::LaunchResult r = launcher::launch(o);
  if (r.exit_code != 0) std::fprintf(stderr, "strata train: %s\n", r.message.c_str());
  return r.exit_code;
}

static const EnvVar kAwaitJoin("STRATA_LIVE_AWAIT_JOIN", "0",
                                "testing: under --recovery live, a world smaller than the launch's "
                                "waits at its next step boundary until its replacements join (1)");

static comm::GroupPtr join_world(int world_size, const comm::Options& co);
static TrainResult train_in_world(const TrainConfig& cfg, const ParallelConfig& pc,
                                  comm::GroupPtr world, const LiveRecovery& live);

static TrainResult train_with_live_recovery(const TrainConfig& cfg, const ParallelConfig& pc, int launched_world,
                                            const comm::Options& co);

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
  std::optional<recovery::RunDirLock> lock;
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
  if (pc.recovery == Recovery::restart) {
    TrainResult r = train_in_world(cfg, pc, join_world(env.world_size, co), {});
    write_trace();
    return r;
  }
  TrainResult r = train_with_live_recovery(cfg, pc, env.world_size, co);
  write_trace();
  return r;
}

static comm::GroupPtr join_world(int world_size, const comm::Options& co) {
  if (world_size > 1) return comm::init_from_env(co);
  // A world of one moves no bytes: the one-rank thread world serves every backend (a tcp live
  // world or an mpi --elastic restart down to one rank).
  comm::Options alone = co;
  alone.backend = comm::Backend::shm;
  return comm::make_thread_world(1, alone).front();
}

// --recovery shrink|live: a world that loses a rank is re-formed by its survivors, in this
// process, as the launcher names it (launcher/live_world.h), and the run continues there; under
// live a replacement joins them at a step boundary, in a world re-formed the same way.
static TrainResult train_with_live_recovery(const TrainConfig& cfg, const ParallelConfig& pc, int launched_world,
                                            const comm::Options& co) {
  const double wait_s = pc.timeout_s > 0 ? pc.timeout_s : 60;
  LiveRecovery live;
  live.launched_world = launched_world;
  int world_size = launched_world;
  ParallelConfig now = pc;
  now.mesh.dp = 0;  // every rank is a data-parallel replica, however many remain
  // ... or under --replica-groups every group keeps its layout, however many groups remain.
  if (pc.outer.groups > 1) now.group_ranks = launched_world / pc.outer.groups, now.mesh = pc.mesh_dims();
  // Opened once (by a replacement before it announces itself): a re-formed world's trainer
  // reads the same sources.
  live.data = std::make_shared<data::Split>(
      data::open_split(cfg.data, cfg.seed, cfg.val_fraction, cfg.model.vocab));
  live.launched_rank = comm::detect_rank_env().rank;
  if (const int after = launcher::live_join_generation(); after > 0) {  // this process is a replacement
    live.launched_rank = launcher::live_replaced_rank();
    launcher::announce_live_join();
    const std::optional<launcher::LiveWorld> w = launcher::wait_for_live_world(after, wait_s, true);
    STRATA_CHECK(w.has_value(), "live recovery: this replacement was not asked to join within ",
                 wait_s, " s");
    launcher::adopt_live_world(*w);
    live.generation = w->generation;
    live.old_world = w->from;
    live.failure = w->failure;
    live.failed_ns = now_ns();
    world_size = w->world;
  }
  for (;;) {
    comm::GroupPtr world;
    try {
      world = join_world(world_size, co);
      live.formed_ns = now_ns();
      return train_in_world(cfg, now, world, live);
    } catch (const std::exception& e) {
      // Not a peer's failure: an error of this rank, or the job's first world not forming.
      // A re-formed world that did not form (a peer died before joining) waits for the next.
      const auto* change = dynamic_cast<const WorldChange*>(&e);
      if (!change && (world ? !world->runtime().broken() : live.generation == 0)) throw;
      if (!change) launcher::announce_live_world_broken(live.generation);  // a stopped peer goes
      const bool formed = world != nullptr;
      const int64_t failed_ns = now_ns();
      const int64_t failed_step = change ? change->step : current_phase().get().step;
      world.reset();
      const std::optional<launcher::LiveWorld> next = launcher::wait_for_live_world(live.generation, wait_s);
      if (!next) throw;  // the launcher stops the job instead
      const std::string broken_id = comm::detect_rank_env().job_id;  // until adopt_live_world
      launcher::adopt_live_world(*next);
      live.generation = next->generation;
      live.failure = next->failure;
      live.failed_ns = failed_ns;
      if (formed) {  // else the copies to continue from are still those of the world before
        live.old_world = world_size;
        live.old_world_id = broken_id;
        live.failed_step = failed_step;
      }
      world_size = next->world;
    }
  }
}

// --mem-ckpt-replicas: the in-memory writer thread's exchange of copies with the peers on
// the neighbouring hosts (the same local rank on the next and the previous host), on a group
// of its own. to = from = -1 when replicas are off in this world.
struct ReplicaPeers {
  comm::GroupPtr group;
  int to = -1, from = -1;
};

static ReplicaPeers replica_peers(const TrainConfig& cfg, comm::ProcessGroup& world, const LiveRecovery& live) {
  ReplicaPeers p;
  if (cfg.ckpt.mem_replicas == 0 || world.size() <= 1) return p;
  p.group = world.split(0, world.rank(), "mem-replica");
  p.group->set_background();  // its chunks wait for gaps in the foreground's traffic
  const comm::HostLayout hl = comm::discover_hosts(world);
  const int h = hl.host_of[size_t(world.rank())], n = hl.num_hosts();
  if (n > 1 && !hl.uniform() && live.generation > 0) {
    // A world live recovery re-formed after a death: its hosts hold unequal numbers of ranks
    // until the replacements join.
    if (world.rank() == 0)
      std::fprintf(stderr, "strata train: mem-ckpt: replicas off in this world (%s) until its hosts "
                   "hold equal numbers of ranks again\n", hl.describe().c_str());
  } else if (n > 1) {
    STRATA_CHECK(hl.uniform(), "--mem-ckpt-replicas ", cfg.ckpt.mem_replicas, " needs the same "
                 "number of ranks on every host (each rank's peer is the same local rank on the "
                 "next host), this job has ", hl.describe());
    const int local = hl.local_rank[size_t(world.rank())];
    auto rank_on = [&](int host) {
      for (int r = 0; r < world.size(); ++r)
        if (hl.host_of[size_t(r)] == host && hl.local_rank[size_t(r)] == local) return r;
      return -1;
    };
    p.to = rank_on((h + 1) % n);
    p.from = rank_on((h + n - 1) % n);
  } else if (world.rank() == 0) {
    std::fprintf(stderr, "strata train: mem-ckpt: replicas off: all %d ranks run on one host "
                 "(%s)\n", world.size(), hl.hosts.front().c_str());
  }
  return p;
}

// Live recovery's rejoin (Topology::world_changes): rank 0 reads the world file after each
// copy; one all-reduce tells the others. A world smaller than the launch's waits there for its
// replacements under the test knob (up to half the --timeout the others wait in the all-reduce).
static std::function<bool()> world_change_probe(const ParallelConfig& pc, comm::ProcessGroup& world,
                                                const LiveRecovery& live) {
  const bool await = kAwaitJoin.get_int() > 0 && world.size() < live.launched_world;
  const double await_s = (pc.timeout_s > 0 ? pc.timeout_s : 60) / 2;
  return [g = &world, generation = live.generation, await, await_s] {
    double newer = 0;
    if (g->rank() == 0) {
      Stopwatch waited;
      for (;;) {
        const std::optional<launcher::LiveWorld> w = launcher::read_live_world();
        newer = w && w->generation > generation ? 1 : 0;
        if (newer > 0 || !await || waited.seconds() > await_s) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
    }
    g->all_reduce(&newer, 1);
    return newer > 0.5;
  };
}

// --replica-groups: this rank's group (a world of its own for the mesh) and the group across
// the groups at its position in them; one group: the world, and no group across.
struct ReplicaGroups {
  comm::GroupPtr inner, across;
  int index = 0;  // this rank's group
  int size = 0;   // ranks per group
  std::vector<int> present, before;  // the groups of this world and of the one it re-formed from
};

// The groups a world holds, in rank order: all of them, unless live recovery re-formed it
// without one (its ranks name their groups by the rank they were launched as; the world's
// rank 0, never a replacement, names the groups of the world before).
static std::vector<int> groups_present(const ParallelConfig& pc, comm::ProcessGroup& world, const LiveRecovery& live,
                                       int size, std::vector<int>& before) {
  const int R = pc.outer.groups;
  std::vector<int> all(static_cast<size_t>(R));
  for (int g = 0; g < R; ++g) all[size_t(g)] = g;
  if (live.launched_rank < 0) return all;
  std::vector<int32_t> mine(static_cast<size_t>(R) + 1, -1), got(mine.size() * size_t(world.size()));
  mine[0] = live.launched_rank / size;
  if (world.rank() == 0)
    std::copy(live.groups->begin(), live.groups->end(), mine.begin() + 1);
  world.all_gather(mine.data(), got.data(), mine.size(), DType::i32);
  std::vector<int> present;
  for (int r = 0; r < world.size(); r += size) present.push_back(got[size_t(r) * mine.size()]);
  for (size_t i = 1; i < mine.size() && got[i] >= 0; ++i) before.push_back(got[i]);
  *live.groups = present;
  return present;
}

static ReplicaGroups replica_groups(const ParallelConfig& pc, comm::ProcessGroup& world, const LiveRecovery& live) {
  ReplicaGroups g;
  if (!pc.outer.active()) {
    g.inner = std::shared_ptr<comm::ProcessGroup>(&world, [](comm::ProcessGroup*) {});
    return g;
  }
  g.size = pc.group_world();
  g.present = groups_present(pc, world, live, g.size, g.before);
  STRATA_CHECK(world.size() == int(g.present.size()) * g.size, "replica groups: a world of ", world.size(),
               " ranks is not whole groups of ", g.size);
  const int k = world.rank() / g.size;  // this rank's group's place in the world
  g.index = g.present[size_t(k)];
  g.inner = world.split(k, world.rank() % g.size, cat("group", g.index));
  // In group order, wherever a group's ranks sit (a replacement group joins as the last): the
  // outer sync sums the groups in the same order as a world that never lost one.
  g.across = world.split(world.rank() % g.size, g.index, "across");
  return g;
}

// One world's training: its mesh and groups, the engine, the trainer.
static TrainResult train_in_world(const TrainConfig& cfg, const ParallelConfig& pc,
                                  comm::GroupPtr world, const LiveRecovery& live) {
  // The checkpoint writer thread synchronises on a group of its own (ckpt/checkpointer.h).
  comm::GroupPtr ckpt_group = world->split(0, world->rank(), "ckpt");
  ckpt_group->set_background();  // a checkpoint's barriers are no gradient traffic
  const ReplicaPeers replicas = replica_peers(cfg, *world, live);
  // Under --replica-groups R: each group of world / R consecutive ranks is a mesh of its own,
  // and `across` joins the ranks of one position in every group (parallel/outer.h).
  const ReplicaGroups groups = replica_groups(pc, *world, live);
  parallel::Mesh mesh(*groups.inner, pc.mesh_dims());
  const parallel::MeshDims dims = mesh.dims();
  if (pc.backend == comm::Backend::mpi) check_hosts_before_training(cfg, pc, *world, dims);
  std::unique_ptr<model::TensorComm> tensor_comm;
  if (mesh.has_tp())
    tensor_comm = std::make_unique<model::TensorComm>(
        mesh.tp(), pc.sequence_parallel, int(cost::tp_kv_share(cfg.model.kv(), dims.tp)));
  std::unique_ptr<model::ContextComm> context_comm;
  if (mesh.has_cp()) context_comm = std::make_unique<model::ContextComm>(mesh.cp(), pc.cp);

  Topology topo;
  topo.rank = world->rank();
  topo.world = world->size();
  topo.dp_rank = mesh.dp_rank();
  topo.dp_world = dims.dp;
  if (groups.across) {
    topo.outer = {pc.outer, groups.across.get(), groups.index, groups.present, groups.before, groups.size};
    if (pc.outer.data == parallel::GroupData::split) {  // the groups share each global batch
      topo.dp_rank += groups.index * dims.dp;
      topo.dp_world *= pc.outer.groups;
    }
  }
  topo.pp = dims.pp;
  topo.schedule = parallel::pipeline::schedule_name(pc.pipeline.schedule);
  topo.virtual_stages = pc.pipeline.virt;
  topo.precision = parallel::precision_name(pc.dp.precision);
  topo.tp = tensor_comm.get();
  topo.cp = context_comm.get();
  if (mesh.has_ep()) topo.ep = &mesh.ep();
  // Groups that read the same data compute the same losses: the first counts them.
  topo.counts_loss_of_group =
      !groups.across || world->rank() < groups.size || pc.outer.data == parallel::GroupData::split;
  topo.counts_group_loss = topo.counts_tokens = mesh.tp_rank() == 0 && mesh.cp_rank() == 0;
  topo.counts_loss = topo.counts_loss_of_group && topo.counts_group_loss;
  topo.group = world.get();
  topo.sum_across_ranks = [g = world.get()](double x) {
    g->all_reduce(&x, 1);
    return x;
  };
  topo.ckpt_barrier = [g = ckpt_group.get()] { g->barrier(); };
  if (replicas.to >= 0) {
    topo.replica_group = replicas.group.get();
    topo.replica_to = replicas.to;
    topo.replica_from = replicas.from;
  }
  topo.restart = comm::restart_attempt();
  topo.live = live;
  if (dims.tp * dims.cp * dims.pp > 1) {
    // A re-formed world keeps its tp, cp and pp degrees: the old ranks of this rank's tp rank
    // and stage hold its states (live recovery re-forms whole data-parallel replicas; the cp
    // ranks of a tp rank and stage hold the same parameters).
    topo.same_states = [dims, me = mesh.coord()](int q, int old_world) {
      parallel::MeshDims before = dims;
      before.dp = 0;
      const parallel::MeshCoord c = parallel::Mesh::coord_of(before.resolved(old_world), q);
      return c.tp == me.tp && c.pp == me.pp;
    };
  }
  if (pc.recovery == Recovery::live) topo.world_changes = world_change_probe(pc, *world, live);
  if (dims.pp > 1) {
    TrainResult r = train_pipeline_rank(cfg, pc, mesh, topo);
    world->barrier();
    return r;
  }

  TrainResult r = Trainer(cfg, topo, std::make_unique<MeshRunner>(cfg, pc, mesh, *world, context_comm.get())).run();
  world->barrier();  // nobody tears the segment down while a peer still reads it
  return r;
}

}  // namespace strata::train
