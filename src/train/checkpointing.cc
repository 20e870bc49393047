#include "train/checkpointing.h"

#include <algorithm>
#include <cctype>

#include <signal.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>

#include "ckpt/interval.h"
#include "ckpt/load.h"
#include "comm/bootstrap.h"
#include "core/error.h"
#include "core/phase.h"
#include "core/timer.h"
#include "cost/reliability.h"
#include "launcher/launcher.h"
#include "launcher/live_world.h"
#include "model/context/context_comm.h"

namespace strata::train {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// Every global tensor of the model, whatever part of it this rank holds.
std::vector<ckpt::TensorInfo> tensor_table(const model::StageModel& model) {
  std::vector<ckpt::TensorInfo> out;
  for (const model::ParamView& v : model::build_param_table(model.config()))
    out.push_back({v.name, v.shape, v.offset});
  return out;
}

// This rank's place in the mesh as checkpoints see it: where its flat states lie in those
// tensors, and the tensor-parallel degree the manifest records.
struct RankLayout {
  TensorLayout pieces;
  int tp = 1;
};
RankLayout rank_layout(const model::StageModel& model) { return {model.tensor_layout(), model.shard().size}; }

// The architecture keys of TrainConfig::to_json that must match between a checkpoint and
// the run loading it (the tensor table catches most differences; heads does not show in it).
void check_same_architecture(const json& saved, const TrainConfig& cfg, const std::string& dir) {
  const json now = cfg.to_json();
  const std::string arch = saved.value("arch", "gpt2"), want = now.value("arch", "gpt2");
  STRATA_CHECK(arch == want, "checkpoint ", dir, " was written for ", arch, " blocks, this run has ",
               want, " blocks (--arch)");
  for (const char* key : {"layers", "dim", "heads", "max_seq", "vocab", "kv_heads", "ffn",
                          "rope_theta", "rope_scaling", "norm_eps", "tie_embeddings"}) {
    if (!saved.contains(key) || !now.contains(key) || saved[key] == now[key]) continue;
    std::string flag = key;
    std::replace(flag.begin(), flag.end(), '_', '-');
    fail("checkpoint ", dir, " was written for a different model: --", flag, " ", saved[key].dump(),
         " in the checkpoint, ", now[key].dump(), " in this run");
  }
}

// The optimizer a checkpoint's moments belong to (checkpoints before it was saved: AdamW).
void check_same_optimizer(const json& saved, const TrainConfig& cfg, const std::string& dir) {
  const std::string then = saved.value("optimizer", "adamw"), now = parallel::optimizer_name(cfg.optim.kind);
  STRATA_CHECK(then == now, "--optimizer ", now, ": checkpoint ", dir, " was trained with ", then,
               ", whose moments ", now, " cannot continue; resume with --optimizer ", then,
               " or start a fresh run in another --run-dir");
}

// The settings a checkpoint's data position depends on: the loader position counts samples
// of seq + 1 tokens in the seed's order (data/sampler.h), so under another --seq or --seed it
// names other samples. Refused in one line before anything is printed or trained.
void check_same_data_position(const ckpt::TrainState& t, const TrainConfig& cfg,
                              const std::string& dir) {
  const json now = cfg.to_json();
  for (const char* key : {"seq", "seed"}) {
    if (!t.config.contains(key) || t.config[key] == now[key]) continue;
    fail("--", key, " ", now[key].dump(), ": checkpoint ", dir, " was trained at --", key, " ",
         t.config[key].dump(), ", and its data position (epoch ", t.loader_epoch, ", ",
         t.loader_consumed, " samples consumed) counts ",
         key == std::string("seq") ? "samples of --seq + 1 tokens" : "samples in that seed's order",
         "; resume with --", key, " ", t.config[key].dump(),
         " or start a fresh run in another --run-dir");
  }
}

// A checkpoint's or a run's data-parallel degree (checkpoints before dp was saved: what the
// other degrees leave of the world).
int dp_of(const ckpt::TrainState& t) {
  return t.dp > 0 ? t.dp : t.world / std::max(1, t.tp * t.pp * t.cp);
}

// The resume line's comparison of layouts: the checkpoint's whole layout, then every field
// this run has otherwise (dp, tp, pp with its schedule and virtual stages, cp, ep, ZeRO
// stage, precision); empty when they all match. "; checkpoint written at dp 2 tp 1 pp 1 cp 1
// ep 1 zero 1 fp32, this run is dp 1 pp 2 (1f1b) bf16: resharding".
std::string layout_differences(const ckpt::TrainState& then, const ckpt::TrainState& now) {
  auto pipeline = [](const ckpt::TrainState& t) {
    if (t.pp == 1) return std::string("pp 1");
    return cat("pp ", t.pp, " (", t.schedule,
               t.virtual_stages > 1 ? cat(", ", t.virtual_stages, " virtual stages") : "", ")");
  };
  // The schedule matters only where both runs have a pipeline of the same depth (another
  // depth is named by pp itself, with this run's schedule).
  const bool pipeline_differs =
      then.pp != now.pp ||
      (now.pp > 1 && (then.schedule != now.schedule || then.virtual_stages != now.virtual_stages));
  const bool reshards = dp_of(then) != dp_of(now) || then.tp != now.tp || pipeline_differs ||
                        then.cp != now.cp || then.ep != now.ep || then.zero_stage != now.zero_stage;
  std::string changed;
  auto add = [&](bool differs, const std::string& text) {
    if (differs) changed += (changed.empty() ? "" : " ") + text;
  };
  add(dp_of(then) != dp_of(now), cat("dp ", dp_of(now)));
  add(then.tp != now.tp, cat("tp ", now.tp));
  add(pipeline_differs, pipeline(now));
  add(then.cp != now.cp, cat("cp ", now.cp));
  add(then.ep != now.ep, cat("ep ", now.ep));
  add(then.zero_stage != now.zero_stage, cat("zero ", now.zero_stage));
  add(then.run_precision != now.run_precision, now.run_precision);
  if (changed.empty()) return "";
  return cat("; checkpoint written at dp ", dp_of(then), " tp ", then.tp, " ", pipeline(then),
             " cp ", then.cp, " ep ", then.ep, " zero ", then.zero_stage, " ", then.run_precision,
             ", this run is ", changed, reshards ? ": resharding" : ": converting the states");
}

// What a resume changes, for its line: the layout (world, tp, pp, cp, ep, ZeRO stage), which
// the states are resharded for, and the precision and batch split, which may change too (the
// loader continues from the same global sample; the schedule counts steps as before).
// `t` is the checkpoint's state, `now` this run's layout and precision in the same fields.
std::string resume_changes(const ckpt::TrainState& t, const ckpt::TrainState& now_layout,
                           const TrainConfig& cfg) {
  const ckpt::TrainState& n = now_layout;
  auto degrees = [](int tp, int pp, int cp, int ep) {
    std::string d;
    for (const auto& [name, n] : {std::pair{"tp", tp}, {"pp", pp}, {"cp", cp}, {"ep", ep}})
      if (n > 1) d += cat(d.empty() ? "" : ", ", name, " ", n);
    return d.empty() ? d : " (" + d + ")";
  };
  std::string out;
  if (t.world != n.world || t.tp != n.tp || t.pp != n.pp || t.cp != n.cp || t.ep != n.ep ||
      t.zero_stage != n.zero_stage)
    out = cat(", resharded from ", t.world, " rank(s)", degrees(t.tp, t.pp, t.cp, t.ep),
              " at ZeRO ", t.zero_stage, " to ", n.world, degrees(n.tp, n.pp, n.cp, n.ep),
              " at ZeRO ", n.zero_stage);
  if (t.run_precision != n.run_precision)
    out += cat(", precision ", t.run_precision, " -> ", n.run_precision);
  if (!t.config.contains("batch") || !t.config.contains("micro_batch")) return out;
  // Sequences per rank per micro-step as each run resolved them (--micro-batch 0: B / dp).
  const int64_t batch = t.config["batch"].get<int64_t>(), b = t.config["micro_batch"].get<int64_t>();
  const int dp = dp_of(t);
  const int64_t b_then = b > 0 ? b : batch / std::max(dp, 1);
  const int64_t b_now = cfg.batch / (int64_t(cfg.accum(n.dp)) * n.dp);
  if (batch != cfg.batch)
    out += cat(", --batch ", batch, " -> ", cfg.batch,
               " (the data continues from the same sample; steps count as before)");
  if (b_then != b_now) out += cat(", micro-batch ", b_then, " -> ", b_now, " sequences per rank");
  return out;
}

bool read_json_line(const std::string& line, json* j) {
  *j = json::parse(line, nullptr, false);
  return !j->is_discarded() && j->is_object();
}

// After falling back from damaged checkpoints: renames every committed step newer than the
// one loaded to .damaged-step-NNNNNN (kept for inspection, no longer a candidate) and points
// `latest` at the loaded one, so this run can save those steps again.
void set_aside_damaged(const std::string& run_dir, int64_t loaded) {
  const std::string root = ckpt::ckpt_root(run_dir);
  for (int64_t s : ckpt::list_steps(root)) {
    if (s <= loaded) continue;
    const std::string name = ckpt::step_dir_name(s);
    std::string to = root + "/.damaged-" + name;
    for (int i = 1; fs::exists(to); ++i) to = cat(root, "/.damaged-", name, "-", i);
    ckpt::rename_path(root + "/" + name, to);
  }
  ckpt::fsync_dir(root);
  ckpt::atomic_write_file(root + "/latest", ckpt::step_dir_name(loaded) + "\n");
}

}  // namespace

int64_t trim_metrics(const std::string& run_dir, int64_t step, std::vector<double>* losses) {
  const std::string path = run_dir + "/metrics.jsonl";
  std::ifstream in(path);
  if (!in) return -1;
  std::string kept, line;
  int64_t reached = -1;
  std::vector<std::pair<int64_t, double>> found;
  while (std::getline(in, line)) {
    json j;
    if (!read_json_line(line, &j) || !j.contains("step")) continue;  // a torn last line
    const int64_t s = j["step"].get<int64_t>();
    if (j.contains("loss")) reached = std::max(reached, s);
    if (s > step) continue;
    if (j.contains("loss")) found.push_back({s, j["loss"].get<double>()});
    kept += line + "\n";
  }
  in.close();
  ckpt::atomic_write_file(path, kept);
  if (losses) {
    losses->clear();
    bool complete = int64_t(found.size()) == step;
    for (size_t i = 0; complete && i < found.size(); ++i)
      complete = found[i].first == int64_t(i) + 1;
    if (complete)
      for (auto& f : found) losses->push_back(f.second);
  }
  return reached;
}

void check_checkpoint_flags(const TrainConfig& cfg) {
  const CheckpointConfig& c = cfg.ckpt;
  STRATA_CHECK(c.every >= 0, "--ckpt-every must be >= 0 (got ", c.every, ")");
  STRATA_CHECK(c.keep >= 0, "--ckpt-keep must be >= 0 (got ", c.keep, ")");
  STRATA_CHECK(c.keep_every >= 0, "--ckpt-keep-every must be >= 0 (got ", c.keep_every, ")");
  STRATA_CHECK(c.max_failures >= 0, "--ckpt-max-failures must be >= 0 (got ", c.max_failures, ")");
  STRATA_CHECK(c.mtbf_s >= 0 && std::isfinite(c.mtbf_s), "--mtbf must be a positive duration");
  STRATA_CHECK(c.every == 0 || !cfg.run_dir.empty(),
               "--ckpt-every needs --run-dir (checkpoints go to <run-dir>/ckpt)");
  STRATA_CHECK(c.resume != "auto" || !cfg.run_dir.empty(),
               "--resume auto needs --run-dir (it looks in <run-dir>/ckpt)");
  STRATA_CHECK(c.mtbf_s == 0 || c.every > 0,
               "--mtbf needs --ckpt-every: the interval advice comes from the measured save stall");
  const diag::FaultSpec& f = cfg.fault;
  if (f.kind == diag::FaultKind::kill_during_save) {
    STRATA_CHECK(c.every > 0, "--inject kill-during-save needs checkpoint saves to kill: add --ckpt-every N "
                 "(and --run-dir)");
    STRATA_CHECK(f.step % c.every == 0, "--inject kill-during-save at step ",
                 f.step, " needs a save after that step: the step must be a multiple of "
                 "--ckpt-every (", c.every, ")");
  }
  if (f.kind == diag::FaultKind::kill_during_mem_ckpt || f.kind == diag::FaultKind::kill_during_mem_commit ||
      f.kind == diag::FaultKind::corrupt_mem_ckpt) {
    STRATA_CHECK(c.mem_every > 0, "--inject ", diag::fault_kind_name(f.kind), " needs in-memory copies: add "
                 "--mem-ckpt-every K (and --run-dir)");
    STRATA_CHECK(f.step % c.mem_every == 0, "--inject ",
                 diag::fault_kind_name(f.kind), " at step ", f.step, " needs an in-memory copy "
                 "after that step: the step must be a multiple of --mem-ckpt-every (",
                 c.mem_every, ")");
  }
}

// Bytes an in-memory copy keeps for its state record: the fixed fields' 16 KiB, and the MoE
// blocks' balancing bias (run_state()), up to 32 bytes of JSON per value.
static uint64_t mem_state_reserve(const TrainConfig& cfg) {
  const model::expert::MoEConfig& moe = cfg.model.moe;
  const uint64_t bias = moe.bias_rate > 0 ? uint64_t(moe.moe_layers(cfg.model.layers)) * uint64_t(moe.experts) : 0;
  return (uint64_t(16) << 10) + 32 * bias;
}

RunCheckpoints::RunCheckpoints(const TrainConfig& cfg, const Topology& topo, int restart,
                               const model::StageModel& model, parallel::StepEngine& engine)
    : cfg_(cfg),
      topo_(topo),
      restart_(restart),
      model_(model),
      engine_(engine),
      die_in_save_(std::make_shared<std::atomic<bool>>(false)) {
  const CheckpointConfig& c = cfg.ckpt;
  check_checkpoint_flags(cfg);
  if (c.mem_every > 0) {
    STRATA_CHECK(!cfg.run_dir.empty(),
                 "--mem-ckpt-every needs --run-dir (the in-memory copies are named after it)");
    recovery::MemCheckpointOptions m;
    m.every = c.mem_every;
    m.run_dir = cfg.run_dir;
    m.rank = topo.rank;
    m.local_world = std::max(1, comm::detect_rank_env().local_world_size);
    m.job = comm::supervised_job_id();
    m.world = comm::detect_rank_env().job_id;
    m.state_reserve = mem_state_reserve(cfg);
    const bool live = topo.live.generation > 0;
    // Live recovery reads every old rank's segment before this world replaces them.
    if (live) live_ = resume_live();
    // An --elastic restart on fewer ranks after a lost host: the old world's copies (the
    // survivors' own and the replicas of the lost host's) are read before this world
    // replaces any of them.
    if (!live && c.mem_replicas > 0 && restart_ > 0) live_ = resume_other_world();
    if (live && topo.group) recovery::drop_segments_no_rank_keeps(cfg.run_dir, topo.replica_from, *topo.group);
    m.reuse = !live_ && (restart_ > 0 || c.resume == "auto");
    m.supervised = comm::launched_as_rank() && !m.job.empty();
    m.layout_text = mem_layout_text();
    if (restart_ == 0 && !live) m.fault = cfg.fault;
    m.log = [this](const std::string& line) { log(line); };
    m.replica_group = topo.replica_group;
    m.replica_to = topo.replica_to;
    m.replica_from = topo.replica_from;
    m.replica_mbps = c.mem_replica_mbps;
    mem_ = std::make_unique<recovery::MemCheckpoints>(std::move(m), engine_);
    // The cost, in the start-up log: rank 0's slots, and the whole job's.
    const double total = topo_.sum_across_ranks(double(mem_->bytes() + mem_->replica_bytes()));
    const std::string replicas =
        mem_->replica_bytes() > 0
            ? fmt(", and %d replica slots of rank %d's copies, %.1f MiB (--mem-ckpt-replicas 1: "
                  "the newest copy also goes to rank %d on the next host, %s)", recovery::MemCheckpoints::kReplicaSlots,
                  topo.replica_from, double(mem_->replica_bytes()) / (1 << 20), topo.replica_to,
                  c.mem_replica_mbps > 0 ? fmt("paced at %g MB/s", c.mem_replica_mbps).c_str() : "unpaced")
            : std::string();
    if (topo_.rank == 0)
      std::fprintf(stderr,
                   "strata train: mem-ckpt: a copy every %lld step(s) in /dev/shm%s: %d slots, "
                   "%.1f MiB on rank 0%s; %.1f MiB over the job's %d rank(s)\n",
                   (long long)c.mem_every, mem_->segment_name().c_str(), mem_->slots(),
                   double(mem_->bytes()) / (1 << 20), replicas.c_str(), total / (1 << 20), topo_.world);
  }
  if (c.every == 0) return;
  if (c.resume.empty() && restart_ == 0 && topo.live.generation == 0) {
    // A fresh run would overwrite another run's checkpoints step by step: refuse.
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(cfg.run_dir + "/ckpt", ec))
      STRATA_CHECK(e.path().filename().string().rfind("step-", 0) != 0, cfg.run_dir,
                   "/ckpt already holds checkpoints (", e.path().filename().string(),
                   "): pass --resume auto to continue that run, or use another --run-dir");
  }

  ckpt::CheckpointerOptions o;
  o.run_dir = cfg.run_dir;
  o.rank = topo.rank;
  o.world = topo.world;
  o.barrier = topo.ckpt_barrier;
  o.keep_last = c.keep;
  o.keep_every = c.keep_every;
  o.log = [this](const std::string& line) { log(line); };
  // kill-during-save: the writer thread dies after the first piece of this rank's shard is
  // written, before the file is complete or renamed; a rank whose shard holds no piece (its
  // dp replicas write its stage's pieces) dies once its empty shard is written, before the
  // file is synced and renamed.
  o.faults.at_point = [armed = die_in_save_](const char* point) {
    if (armed->load() && (std::strcmp(point, "shard_partial") == 0 || std::strcmp(point, "shard_written") == 0))
      raise(SIGKILL);
  };
  saver_ = std::make_unique<ckpt::Checkpointer>(std::move(o));
  saver_->prepare(request(0, {}));
}

RunCheckpoints::~RunCheckpoints() = default;

void RunCheckpoints::log(const std::string& line) const {
  if (topo_.world > 1) {
    std::fprintf(stderr, "strata train: rank %d: ckpt: %s\n", topo_.rank, line.c_str());
  } else {
    std::fprintf(stderr, "strata train: ckpt: %s\n", line.c_str());
  }
  std::fflush(stderr);
}

void RunCheckpoints::record_layout(ckpt::TrainState& t, int tp) const {
  t.world = topo_.world;
  t.tp = tp;
  t.dp = topo_.dp_world > 0 ? topo_.dp_world : topo_.world / tp;
  t.pp = topo_.pp;
  t.schedule = topo_.schedule;
  t.virtual_stages = topo_.virtual_stages;
  t.cp = topo_.cp ? topo_.cp->size() : 1;
  t.ep = topo_.ep ? topo_.ep->size() : 1;
  t.zero_stage = engine_.zero_stage();
  t.precision = engine_.precision();
  t.run_precision = topo_.precision.empty() ? t.precision : topo_.precision;
}

ckpt::SaveRequest RunCheckpoints::request(int64_t done, const data::LoaderState& loader) const {
  ckpt::SaveRequest req;
  req.step = done;
  ckpt::TrainState& t = req.train;
  t.step = done;
  t.schedule_step = done;
  t.tokens_seen = tokens_seen_;
  t.loader_epoch = loader.epoch;
  t.loader_consumed = loader.consumed;
  t.extra = {{"loader_samples", loader.samples}, {"loader_fingerprint", loader.fingerprint}};
  t.extra.update(run_state());
  // Initialisation and data order derive from the seed alone; samples use counter-based
  // streams keyed by the step, so the seed is the whole random state.
  t.rng["init"] = {cfg_.seed, 0, 0};
  t.rng["sample"] = {cfg_.seed, 0x5A3D1E00, 0};
  t.config = cfg_.to_json();
  const RankLayout layout = rank_layout(model_);
  record_layout(t, layout.tp);
  req.tensors = tensor_table(model_);
  req.layout = layout.pieces;
  const int64_t psi = ckpt::layout_numel(req.layout);
  for (const parallel::StateShard& s : engine_.state_shards()) {
    ckpt::StateSlice sl;
    sl.name = s.name;
    sl.dtype = s.dtype;
    sl.numel = psi;
    sl.held = {s.begin, s.end};
    sl.data = s.data;
    sl.write = ckpt::Range{s.write_begin, s.write_end};
    sl.partial = s.partial;
    req.states.push_back(sl);
  }
  return req;
}

std::string RunCheckpoints::mem_layout_text() const {
  ckpt::TrainState t;
  record_layout(t, rank_layout(model_).tp);
  const json arch = cfg_.to_json();
  std::string text = cat("world ", t.world, " dp ", t.dp, " tp ", t.tp, " pp ", t.pp, " (", t.schedule,
                         " x", t.virtual_stages, ") cp ", t.cp, " ep ", t.ep, " zero ", t.zero_stage,
                         " ", t.run_precision, ";");
  for (const char* key : {"layers", "dim", "heads", "max_seq", "vocab", "seq", "seed"})
    text += cat(" ", key, " ", arch[key].dump());
  if (arch.contains("moe")) text += " moe " + arch["moe"].dump();
  if (arch.contains("arch")) text += " arch " + arch["arch"].get<std::string>();
  return text;
}

// The run's state beyond model, optimizer and data position that a copy or checkpoint keeps:
// the MoE blocks' balancing bias (model/expert/config.h bias_rate).
json RunCheckpoints::run_state() const {
  json j = json::object();
  if (model_.moe() && cfg_.model.moe.bias_rate > 0) j["router_bias"] = model_.moe()->router_bias();
  return j;
}

void RunCheckpoints::set_run_state(const json& j, const std::string& where) const {
  if (!model_.moe() || cfg_.model.moe.bias_rate <= 0) return;
  // A checkpoint of a run without the bias starts it at zero, as a fresh run would.
  if (!j.contains("router_bias")) return;
  const std::vector<float> b = j["router_bias"].get<std::vector<float>>();
  STRATA_CHECK(b.size() == model_.moe()->router_bias().size(), where, " holds a balancing bias of ", b.size(),
               " values; this model's MoE blocks have ", model_.moe()->router_bias().size());
  model_.moe()->set_router_bias(b);
}

ResumePoint RunCheckpoints::resume_point(int64_t step, const data::LoaderState& loader,
                                         int64_t tokens_seen, const std::string& dir, const json& extra) {
  set_run_state(extra, dir);
  ResumePoint p;
  p.step = step;
  p.dir = dir;
  p.tokens_seen = tokens_seen;
  p.loader = loader;
  tokens_seen_ = tokens_seen;
  if (topo_.rank == 0 && !cfg_.run_dir.empty())
    p.steps_lost = trim_metrics(cfg_.run_dir, step, &p.losses);
  if (p.steps_lost >= 0) p.steps_lost = std::max<int64_t>(0, p.steps_lost - step);
  return p;
}

ResumePoint RunCheckpoints::resume() {
  if (live_) {
    resumed_ = *live_;
    // What a re-formed world loaded is its first copy: a death before the copy of its first
    // step is committed resumes from it, not from disk or the start.
    if (mem_ && live_->step > 0) mem_->copy(live_->step, live_->loader, live_->tokens_seen, run_state());
    return *live_;
  }
  const CheckpointConfig& c = cfg_.ckpt;
  const std::string prefix = restart_ > 0 ? cat("restart ", restart_, ": ") : std::string();
  if (mem_ && (restart_ > 0 || c.resume == "auto")) {
    if (std::optional<ResumePoint> p = resume_from_memory(prefix)) {
      resumed_ = *p;
      return *p;
    }
  }
  ResumePoint p = resume_from_disk();
  if (mem_) mem_->clear();  // copies of steps this run does not continue from
  return p;
}

std::optional<ResumePoint> RunCheckpoints::resume_from_memory(const std::string& prefix) {
  const bool lead = topo_.rank == 0;
  auto note = [&](const std::string& line) {
    if (lead) std::fprintf(stderr, "strata train: %s%s\n", prefix.c_str(), line.c_str()), std::fflush(stderr);
  };
  // Every rank must restore the same step: rank 0's candidates, newest first, are tried in
  // turn until one is held by every rank (sums are the collective every layout has).
  const std::vector<int64_t> mine = mem_->usable_steps(restart_ > 0);
  auto rank0 = [&](double value) { return int64_t(topo_.sum_across_ranks(lead ? value : 0.0)); };
  const int64_t without = int64_t(topo_.sum_across_ranks(mine.empty() ? 1.0 : 0.0));
  const int64_t passed = int64_t(topo_.sum_across_ranks(double(mem_->passed_over())));
  const std::string passed_text =
      passed > 0 ? cat("; ", passed, " copy(ies) passed over, see the lines above") : "";
  int64_t chosen = -1;
  for (size_t i = 0; i < size_t(ckpt::kMaxMemSlots) && chosen < 0; ++i) {
    const int64_t candidate = rank0(i < mine.size() ? double(mine[i]) : -1.0);
    if (candidate < 0) break;
    const bool have = std::find(mine.begin(), mine.end(), candidate) != mine.end();
    if (topo_.sum_across_ranks(have ? 0.0 : 1.0) == 0.0) chosen = candidate;
  }
  std::vector<int64_t> disk_steps;
  if (lead) disk_steps = ckpt::list_steps(ckpt::ckpt_root(cfg_.run_dir));
  const int64_t disk = rank0(disk_steps.empty() ? -1.0 : double(disk_steps.back()));
  const std::string disk_text = disk >= 0 ? cat("disk: step ", disk) : std::string("disk: none");
  if (chosen < 0) {
    note(cat(without > 0 ? cat("in-memory copies: ", without, " rank(s) hold no usable copy")
                         : std::string("in-memory copies: no step is held by every rank"),
             passed_text, "; resuming from disk (", disk_text, ")"));
    return std::nullopt;
  }
  if (chosen <= disk) {
    note(cat("the in-memory copy of step ", chosen, " is not newer than the disk checkpoint of step ",
             disk, passed_text, "; resuming from disk"));
    return std::nullopt;
  }
  STRATA_CHECK(chosen <= cfg_.schedule.steps, "in-memory copy of step ", chosen, " is past --steps ",
               cfg_.schedule.steps);
  Stopwatch sw;
  const recovery::MemCopy m = mem_->load(chosen);
  engine_.state_loaded(chosen);
  ResumePoint p = resume_point(chosen, m.loader, m.tokens_seen, cat("in-memory copy of step ", chosen), m.extra);
  p.from_memory = true;
  const std::string lost = p.steps_lost >= 0 ? cat(", ", p.steps_lost, " step(s) lost") : "";
  note(cat("resuming from the in-memory copy of step ", chosen, " (", disk_text, "; ",
           fmt("%.3f", sw.seconds()), " s to load", passed_text, ")", lost));
  return p;
}

int64_t RunCheckpoints::common_step(recovery::EarlierWorld& old) {
  // Every rank computes the same steps (EarlierWorld agreed on where each copy lies); the
  // holders verify their copies' checksums, each a share.
  for (int64_t step : old.common_steps())
    if (old.verify(step)) return step;
  return -1;
}

std::function<bool(int)> RunCheckpoints::same_states_in(int old_world) const {
  if (!topo_.same_states) return {};
  return [same = topo_.same_states, old_world](int q) { return same(q, old_world); };
}

std::optional<ResumePoint> RunCheckpoints::resume_other_world() {
  const bool lead = topo_.rank == 0;
  const std::string prefix = cat("restart ", restart_, ": ");
  auto note = [&](const std::string& line) {
    if (lead) std::fprintf(stderr, "strata train: %s%s\n", prefix.c_str(), line.c_str()), std::fflush(stderr);
  };
  // The world that failed: one past the highest rank any host holds a segment of (its own
  // ranks' and, with replicas, the previous host's).
  double segment_ranks = recovery::mem_segment_ranks(cfg_.run_dir);
  if (topo_.group) topo_.group->all_reduce(&segment_ranks, 1, comm::ReduceOp::max);
  const int old_world = int(segment_ranks);
  if (old_world <= 0 || old_world == topo_.world) return std::nullopt;  // the own segments decide
  const RankLayout layout = rank_layout(model_);
  const int cp = topo_.cp ? topo_.cp->size() : 1, ep = topo_.ep ? topo_.ep->size() : 1;
  // Under tp, cp or pp the world that failed had the same degrees (the restart keeps the flags)
  // and a larger dp: each rank reads the old ranks of its tp rank and stage (same_states).
  const int inner = layout.tp * cp * topo_.pp;
  if (ep != 1 || engine_.zero_stage() > 2 || (inner > 1 && (!topo_.same_states || old_world % inner != 0))) {
    note(cat("the in-memory copies of the ", old_world, "-rank world are not loaded into this world of ",
             topo_.world, ": resharding them needs ep 1, ZeRO 0-2 and, under tp, cp or pp, an old world "
             "of whole tp x cp x pp replicas (", inner, " ranks each); resuming from disk"));
    return std::nullopt;
  }
  Stopwatch sw;
  std::unique_ptr<recovery::EarlierWorld> old;
  try {
    old = std::make_unique<recovery::EarlierWorld>(cfg_.run_dir, comm::supervised_job_id(), "", old_world, topo_.group,
                                         [this](const std::string& line) { log(line); });
  } catch (const Error& e) {  // the same on every rank: an old rank's copies are on no host
    note(cat("the ", old_world, "-rank world's in-memory copies are not all on this world's hosts: ",
             e.what(), " (--mem-ckpt-replicas 1 keeps each on a second host); resuming from disk"));
    return std::nullopt;
  }
  const int64_t chosen = common_step(*old);
  std::vector<int64_t> disk_steps;
  if (lead) disk_steps = ckpt::list_steps(ckpt::ckpt_root(cfg_.run_dir));
  const int64_t disk = int64_t(topo_.sum_across_ranks(lead && !disk_steps.empty() ? double(disk_steps.back()) : (lead ? -1.0 : 0.0)));
  const std::string disk_text = disk >= 0 ? cat("disk: step ", disk) : std::string("disk: none");
  if (chosen < 0 || chosen <= disk) {
    note(chosen < 0 ? cat("no step has a complete in-memory copy of every rank of the ", old_world,
                          "-rank world; resuming from disk (", disk_text, ")")
                    : cat("the in-memory copy of step ", chosen, " is not newer than the disk "
                          "checkpoint of step ", disk, "; resuming from disk"));
    topo_.sum_across_ranks(0.0);
    return std::nullopt;
  }
  STRATA_CHECK(chosen <= cfg_.schedule.steps, "in-memory copy of step ", chosen, " is past --steps ",
               cfg_.schedule.steps);
  const double read_s = sw.seconds();
  const recovery::MemCopy m = old->load(chosen, ckpt::layout_numel(layout.pieces), engine_.state_shards(),
                              same_states_in(old_world));
  engine_.state_loaded(chosen);
  ResumePoint p = resume_point(chosen, m.loader, m.tokens_seen, cat("in-memory copy of step ", chosen), m.extra);
  p.from_memory = true;
  // Nobody replaces an old rank's segment (this world's MemCheckpoints) while a peer reads it;
  // the same all-reduce adds the bytes that came from other hosts.
  const double moved = topo_.sum_across_ranks(double(old->received_bytes()));
  const std::string lost = p.steps_lost >= 0 ? cat(", ", p.steps_lost, " step(s) lost") : "";
  note(cat("resuming from the in-memory copies of step ", chosen, " of the ", old_world,
           "-rank world (its ranks' own and their replicas on this world's hosts), resharded onto ",
           topo_.world, " rank(s) (", disk_text, "; ", fmt("%.3f", read_s), " s to read, ",
           fmt("%.3f", sw.seconds() - read_s), " s to load, ", fmt("%.2f", moved / (1 << 20)),
           " MiB sent between hosts)", lost));
  return p;
}

ResumePoint RunCheckpoints::resume_live() {
  const LiveRecovery& live = topo_.live;
  const bool lead = topo_.rank == 0;
  const double regroup_s = double(live.formed_ns - live.failed_ns) * 1e-9;
  const double rebuild_s = double(now_ns() - live.formed_ns) * 1e-9;
  Stopwatch sw;
  const GroupCopies copies = group_copies();
  recovery::EarlierWorld old(cfg_.run_dir, comm::supervised_job_id(), live.old_world_id, live.old_world, topo_.group,
                             [this](const std::string& line) { log(line); }, {}, copies.needed);
  const int64_t chosen = common_step(old);
  const bool none = chosen < 0;  // no step every old rank holds a good copy of
  STRATA_CHECK(chosen <= cfg_.schedule.steps, "in-memory copy of step ", chosen, " is past --steps ",
               cfg_.schedule.steps);
  const double read_s = sw.seconds();
  ResumePoint p;
  std::string from;
  if (none) {
    // A rank died before its first copy was committed: the run's disk checkpoint, else the
    // start (the engine holds the seed's initial state): no more is lost than the copies'.
    p = resume_from_disk(true);
    if (p.dir.empty()) p = resume_point(0, {}, 0, "");
    from = p.dir.empty() ? std::string("step 0 (no step has a complete in-memory copy on every rank)")
                         : cat("the disk checkpoint of step ", p.step, " (no step has a complete "
                               "in-memory copy on every rank)");
  } else {
    const recovery::MemCopy m = old.load(chosen, ckpt::layout_numel(rank_layout(model_).pieces), copies.shards,
                                         copies.same ? copies.same : same_states_in(live.old_world));
    engine_.state_loaded(chosen);
    p = resume_point(chosen, m.loader, m.tokens_seen, cat("in-memory copy of step ", chosen), m.extra);
    p.from_memory = true;
    from = cat("the in-memory copy of step ", chosen);
  }
  // Nobody replaces an old rank's segment (this world's MemCheckpoints) while a peer reads it.
  topo_.sum_across_ranks(0.0);
  if (lead) launcher::announce_live_world_formed(live.generation);  // a replacement may join it now
  const double since = double(now_ns() - live.failed_ns) * 1e-9;
  if (lead) {
    live.records->push_back({{"failure", live.failure},
                             {"failed_step", live.failed_step},
                             {"resumed_step", p.step},
                             {"resumed_from", none ? (p.dir.empty() ? "start" : "disk") : "memory"},
                             {"world_before", live.old_world},
                             {"world_after", topo_.world},
                             {"steps_lost", p.steps_lost},
                             {"seconds_since_failure", since},
                             {"seconds_to_regroup", regroup_s},
                             {"seconds_to_rebuild", rebuild_s},
                             {"seconds_to_read", read_s},
                             {"seconds_to_load", sw.seconds() - read_s}});
    if (topo_.outer.options.groups > 1) {  // the replica groups before and after, in rank order
      live.records->back()["groups_before"] = topo_.outer.before;
      live.records->back()["groups_after"] = topo_.outer.present;
    }
    std::fprintf(stderr, "strata train: live recovery: %s at step %lld; continuing on %d rank(s) "
                 "from %s (%.2f s since the failure: %.3f s to re-form the groups, %.3f s to "
                 "rebuild data, model and engine, %.3f s to read the %d rank(s)' copies, %.3f s "
                 "to load)\n", live.failure.c_str(), (long long)live.failed_step, topo_.world,
                 from.c_str(), since, regroup_s, rebuild_s, read_s, live.old_world,
                 sw.seconds() - read_s);
    std::fflush(stderr);
  }
  return p;
}

// Live recovery under --replica-groups: a world that lost a group reads the survivors' copies
// only (each rank its own position's, in the world before); a replacement group reads the
// lowest surviving group's states as its own (at the end of a round: the outer sync's θ, and that
// group's inner optimizer), except what its own encoding left over (outer.residual: zeros).
RunCheckpoints::GroupCopies RunCheckpoints::group_copies() {
  GroupCopies c;
  c.shards = engine_.state_shards();
  const Topology::Outer& o = topo_.outer;
  if (o.options.groups <= 1 || o.before.empty()) return c;
  const int n = o.group_ranks, pos = topo_.rank % n;
  auto has = [](const std::vector<int>& groups, int g) { return std::count(groups.begin(), groups.end(), g) > 0; };
  c.needed = [before = o.before, present = o.present, n, has](int q) {
    return has(present, before[size_t(q / n)]);
  };
  c.same = [n, pos](int q) { return q % n == pos; };
  if (has(o.before, o.group)) return c;
  // The lowest group the world before held, as a disk resume's fallback (group*.X) takes the
  // lowest saved.
  const int source = *std::min_element(o.before.begin(), o.before.end());
  const std::string own = cat("group", o.group, "."), from = cat("group", source, ".");
  std::vector<parallel::StateShard> shards;
  for (parallel::StateShard s : c.shards) {
    if (s.name.rfind(own, 0) == 0) {
      if (s.name == own + "outer.residual") continue;
      s.name = from + s.name.substr(own.size());
    }
    shards.push_back(s);
  }
  c.shards = std::move(shards);
  return c;
}

namespace {

// Replica groups (DiLoCo) save each group's own states as group<g>.<name> (one group: <name>),
// the global ones as outer.<name>. Resumed with another number of groups, a group the
// checkpoint lacks starts from the lowest saved group's states (group 0's, unless the
// checkpoint was saved while group 0 was lost), and one group from a checkpoint of several
// takes those too (docs/diloco.md).
std::vector<std::string> group_state_fallbacks(const std::string& name) {
  if (name.rfind("outer.", 0) == 0) return {};
  size_t i = 0;
  if (name.rfind("group", 0) == 0) {
    i = 5;
    while (i < name.size() && std::isdigit(static_cast<unsigned char>(name[i]))) ++i;
  }
  if (i > 5 && i < name.size() && name[i] == '.') {
    const std::string own = name.substr(i + 1);
    return {"group*." + own, own};
  }
  return {"group*." + name};
}

// Loads the checkpoint `mode` names: auto, the run's newest good one (nullopt when it has
// none); else a run directory, its ckpt/ directory or a step-* directory (refused in one line
// when none is there).
std::optional<ckpt::LoadResult> load_resume(const std::string& mode, const std::string& run_dir,
                                            const std::vector<ckpt::StateTarget>& targets,
                                            const ckpt::LoadOptions& lo) {
  if (mode == "auto") return ckpt::load_latest(run_dir, targets, lo);
  const ckpt::CkptLocation where = ckpt::locate(mode);
  if (!where.step_dir.empty()) return ckpt::load_checkpoint(where.step_dir, targets, lo);
  STRATA_CHECK(fs::path(where.root).filename() == "ckpt", "--resume ", mode,
               ": name a run directory, its ckpt/ directory or a step-* directory");
  std::optional<ckpt::LoadResult> r = ckpt::load_latest(fs::path(where.root).parent_path().string(), targets, lo);
  STRATA_CHECK(r.has_value(), "--resume ", mode, ": no checkpoint there");
  return r;
}

}  // namespace

ResumePoint RunCheckpoints::resume_from_disk(bool after_failure) {
  const CheckpointConfig& c = cfg_.ckpt;
  const bool lead = topo_.rank == 0;
  auto note = [&](const std::string& line) {
    if (lead) std::fprintf(stderr, "strata train: %s\n", line.c_str()), std::fflush(stderr);
  };
  // A supervised restart continues this run from its own checkpoints when there are any;
  // otherwise whatever --resume names.
  std::string mode = c.resume;
  if ((restart_ > 0 || after_failure) && c.every > 0) {
    if (!ckpt::list_steps(ckpt::ckpt_root(cfg_.run_dir)).empty() || mode.empty()) mode = "auto";
  }
  if (mode.empty()) {
    if (restart_ > 0)
      note(cat("restart ", restart_,
               ": no checkpoints (--ckpt-every 0); starting again from step 0"));
    return {};
  }

  std::vector<ckpt::StateTarget> targets;
  for (const parallel::StateShard& s : engine_.state_shards())
    targets.push_back({s.name, s.dtype, {s.begin, s.end}, s.data, group_state_fallbacks(s.name)});
  ckpt::LoadOptions lo;
  lo.expected_tensors = tensor_table(model_);
  const RankLayout layout = rank_layout(model_);
  lo.layout = layout.pieces;
  lo.log = [&](const std::string& line) { note("ckpt: " + line); };
  lo.check = [&](const ckpt::TrainState& t, const std::string& dir) { check_same_optimizer(t.config, cfg_, dir); };
  if (topo_.world > 1)
    lo.all_ok = [this](bool ok) { return topo_.sum_across_ranks(ok ? 0.0 : 1.0) == 0.0; };

  const std::optional<ckpt::LoadResult> r = load_resume(mode, cfg_.run_dir, targets, lo);
  if (!r) {
    note(cat(restart_ > 0 ? cat("restart ", restart_, ": ") : std::string(), "no checkpoint in ",
             ckpt::ckpt_root(cfg_.run_dir), "; starting fresh"));
    return {};
  }
  check_same_architecture(r->train.config, cfg_, r->dir);
  check_same_data_position(r->train, cfg_, r->dir);
  if (mode == "auto" && !r->skipped.empty() && lead) set_aside_damaged(cfg_.run_dir, r->train.step);
  if (mode == "auto" && lead) {
    // A malformed pointer would fail every save of this run: point it at what was loaded.
    const std::string root = ckpt::ckpt_root(cfg_.run_dir);
    const std::string was = ckpt::repair_latest(root, fs::path(r->dir).filename().string());
    if (!was.empty()) note(cat("ckpt: ", was, "; rewrote it to name ", r->dir));
  }
  const ckpt::TrainState& t = r->train;
  STRATA_CHECK(t.step <= cfg_.schedule.steps, "checkpoint ", r->dir, " is at step ", t.step,
               ", past --steps ", cfg_.schedule.steps);
  engine_.state_loaded(t.step);

  data::LoaderState loader;
  loader.epoch = t.loader_epoch;
  loader.consumed = t.loader_consumed;
  loader.samples = t.extra.value("loader_samples", int64_t(-1));
  loader.fingerprint = t.extra.value("loader_fingerprint", uint64_t(0));
  ResumePoint p = resume_point(t.step, loader, t.tokens_seen, r->dir, t.extra);

  ckpt::TrainState now;  // this run's layout, as request() records it
  record_layout(now, layout.tp);
  const std::string reshard = resume_changes(t, now, cfg_);
  std::string lost = p.steps_lost >= 0 ? cat(", ", p.steps_lost, " step(s) lost") : "";
  note(cat(restart_ > 0 ? cat("restart ", restart_, ": ") : std::string(), "resuming from step ",
           t.step, " (", r->dir, ", ", fmt("%.2f", r->seconds), " s to load", reshard, ")", lost,
           layout_differences(t, now)));
  resumed_ = p;
  return p;
}

void RunCheckpoints::after_step(int64_t done, const data::LoaderState& loader, int64_t step_tokens,
                                MetricsWriter* out) {
  tokens_seen_ += step_tokens;
  // The in-memory copy first: a kill in it must not leave a disk save of the step half done.
  if (mem_) mem_->after_step(done, loader, tokens_seen_, run_state());
  if (!saver_) return;
  // A save is reported once it is done, on the step it finishes, not when the next starts.
  if (saver_->poll()) record_finished(out);
  if (done % cfg_.ckpt.every != 0) return;
  const diag::FaultSpec& f = cfg_.fault;
  if (restart_ == 0 && topo_.live.generation == 0 && f.kind == diag::FaultKind::kill_during_save &&
      f.fires(topo_.rank, done)) {
    saver_->wait();  // the previous save must not be the one that dies
    die_in_save_->store(true);
  }
  current_phase().set_kind(PhaseKind::checkpoint);
  saver_->save_async(request(done, loader));  // returns once the previous save is finished
  record_finished(out);
  // Saves that keep failing (a full disk) protect nothing: stop rather than train on without
  // a way back. Every rank sees the same history (a save succeeds or fails for the group).
  const std::vector<ckpt::SaveStats>& h = saver_->history();
  const int k = cfg_.ckpt.max_failures;
  if (k == 0 || int64_t(h.size()) < k) return;
  for (size_t i = h.size() - size_t(k); i < h.size(); ++i)
    if (h[i].ok) return;
  fail("--ckpt-max-failures ", k, ": the last ", k, " checkpoint saves failed (step ",
       h.back().step, ": ", h.back().error, "); stopping at step ", done, ", ",
       good_checkpoint_text());
}

int64_t RunCheckpoints::roll_back() {
  STRATA_CHECK(mem_ != nullptr, "--spike-action rollback needs --mem-ckpt-every");
  const recovery::MemCopy m = mem_->restore_newest();
  if (m.step < 0) return -1;
  engine_.state_loaded(m.step);
  tokens_seen_ = m.tokens_seen;
  set_run_state(m.extra, cat("in-memory copy of step ", m.step));
  return m.step;
}

json RunCheckpoints::mem_summary() {
  if (!mem_) return json();
  mem_->finish();
  json j = mem_->summary_json();
  if (resumed_.from_memory) j["resumed_step"] = resumed_.step;
  return j;
}

std::string RunCheckpoints::good_checkpoint_text() const {
  std::string newest = resumed_.dir;
  for (const ckpt::SaveStats& s : saver_->history())
    if (s.ok) newest = s.dir;
  return newest.empty() ? "there is no good checkpoint" : "the newest good checkpoint is " + newest;
}

void RunCheckpoints::require_good_checkpoint() const {
  if (!saver_) return;
  const std::vector<ckpt::SaveStats>& h = saver_->history();
  for (const ckpt::SaveStats& s : h)
    if (s.ok) return;
  if (!resumed_.dir.empty() || h.empty()) return;
  fail("no good checkpoint: all ", h.size(), " checkpoint save(s) of this run failed (last, step ",
       h.back().step, ": ", h.back().error, ")");
}

void RunCheckpoints::record_finished(MetricsWriter* out) {
  const std::vector<ckpt::SaveStats>& h = saver_->history();
  for (; recorded_ < h.size(); ++recorded_) {
    const ckpt::SaveStats& s = h[recorded_];
    if (!out) continue;
    json rec = {{"step", s.step},
                {"ckpt",
                 {{"stall_ms", s.stall_s * 1e3},
                  {"wait_prev_ms", s.wait_prev_s * 1e3},
                  {"copy_ms", s.copy_s * 1e3},
                  {"write_ms", s.write_s * 1e3},
                  {"commit_ms", s.commit_s * 1e3},
                  {"bytes", s.total_bytes > 0 ? s.total_bytes : s.bytes},
                  {"ok", s.ok}}}};
    if (!s.ok) rec["ckpt"]["error"] = s.error;
    out->record(rec, s.ok ? fmt("ckpt  step %lld | stall %.2f ms | written in %.1f ms | %.1f MiB",
                                (long long)s.step, s.stall_s * 1e3, (s.write_s + s.commit_s) * 1e3,
                                double(s.total_bytes > 0 ? s.total_bytes : s.bytes) / (1 << 20))
                          : fmt("ckpt  step %lld FAILED: %s", (long long)s.step, s.error.c_str()));
  }
}

json RunCheckpoints::finish(double step_s, MetricsWriter* out) {
  if (!saver_) return resumed_.dir.empty() ? json() : json{{"resumed_from", resumed_.dir}};
  try {
    saver_->wait();
  } catch (const std::exception& e) {
    log(cat("last save failed: ", e.what()));
  }
  record_finished(out);
  json j = saver_->summary_json();
  j["every"] = cfg_.ckpt.every;
  j["keep"] = cfg_.ckpt.keep;
  j["keep_every"] = cfg_.ckpt.keep_every;
  j["restart"] = restart_;
  if (!resumed_.dir.empty()) {
    j["resumed_from"] = resumed_.dir;
    j["resumed_step"] = resumed_.step;
    if (resumed_.steps_lost >= 0) j["steps_lost"] = resumed_.steps_lost;
  }
  const int64_t saves = int64_t(saver_->history().size());
  if (step_s > 0 && saves > 0)
    j["stall_pct_of_step"] = 100 * j["stall_s"]["mean"].get<double>() / step_s;
  if (cfg_.ckpt.mtbf_s > 0 && saves > 0) {
    const ckpt::IntervalAdvice a =
        ckpt::advise_interval(j["stall_s"]["mean"].get<double>(), cfg_.ckpt.mtbf_s,
                              cost::measured_restart_s(cost::Recovery::disk), step_s, cfg_.ckpt.mem_every,
                              cost::measured_restart_s(cost::Recovery::memory),
                              cost::measured_restart_s(cost::Recovery::live));
    j["advice"] = a.to_json();
    if (out) out->note(a.text());
  }
  return j;
}

}  // namespace strata::train
