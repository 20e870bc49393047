#include "train/run_spec.h"

#include <algorithm>

#include "comm/bootstrap.h"
#include "core/error.h"
#include "data/mixture.h"
#include "data/prepared.h"
#include "model/context/layout.h"
#include "model/parallel_rules.h"
#include "model/shard.h"
#include "model/stage.h"
#include "parallel/options.h"
#include "train/checkpointing.h"
#include "train/context_metrics.h"
#include "train/init_from.h"

namespace strata::train {

std::string in_flags(const std::exception& e) {
  const auto* refusal = dynamic_cast<const SettingError*>(&e);
  return refusal ? refusal->render("--") : e.what();
}

namespace pl = parallel::pipeline;

namespace {

// How the step's micro-batch count came about, for a refusal that names it: the flag when
// typed, else the batch split that gave it.
std::string micro_batches_origin(int64_t batch, const parallel::ParallelLayout& l, bool given) {
  if (given) return "";
  return cat(" (--batch ", batch, " / (", l.dp, " data-parallel rank(s) x micro-batch ",
             l.micro_batch, "); set it with --micro-batches)");
}

void check_experts(const model::GPTConfig& m, const parallel::ParallelLayout& l) {
  STRATA_CHECK(model::ep_has_experts(m.moe.experts, l.ep), "--ep ", l.ep, " needs --experts");
  STRATA_CHECK(model::ep_splits_experts(m.moe.experts, l.ep), "--experts ", m.moe.experts,
               " is not divisible by --ep ", l.ep,
               " (each expert-parallel rank owns E/ep experts)");
}

// More stages than layers, a --pp-split of the wrong length or sum, virtual stages that do
// not divide the layers, a schedule its micro-batches cannot fill, zero-bubble with ZeRO 2/3,
// and the compositions the pipeline does not run yet.
void check_pipeline(const model::GPTConfig& m, int seq, int64_t batch,
                    const parallel::ParallelLayout& l, bool micro_batches_given) {
  const int L = m.layers, P = l.pp, V = l.virtual_stages;
  STRATA_CHECK(V >= 1, "--virtual-stages must be at least 1 (got ", V, ")");
  if (P <= 1) {
    STRATA_CHECK(V == 1 && l.pp_split.empty() && !micro_batches_given,
                 "--virtual-stages, --pp-split and --micro-batches need --pp 2 or more");
    return;
  }
  STRATA_CHECK(parallel::stages_fit_layers(P, L), "--pp ", P, " stages but the model has only ", L,
               " layers (--layers)");
  // Bounded before P x V is formed in int (2^31 - 1 virtual stages wrapped it to -2).
  STRATA_CHECK(int64_t(P) * V <= L, "--virtual-stages ", V, " x --pp ", P, " = ", int64_t(P) * V,
               " chunks do not divide the ", L, " layers (--layers; each chunk needs one)");
  STRATA_CHECK(V == 1 || parallel::chunks_divide_layers(L, P, V) || !l.pp_split.empty(),
               "--virtual-stages ", V, " x --pp ", P, " = ", P * V, " chunks do not divide the ", L,
               " layers");
  STRATA_CHECK(parallel::virtual_stages_allowed(l.schedule, V), "--virtual-stages ", V,
               " needs --schedule interleaved (got ", pl::schedule_name(l.schedule), ")");
  model::split_layers(m, seq, P, V, l.pp_split);  // a --pp-split of the wrong length or sum
  const int64_t M = l.micro_batches(batch);
  if (l.schedule == pl::ScheduleKind::interleaved &&
      !parallel::interleaved_micro_batches_fit(M, P)) {
    const std::string origin = micro_batches_origin(batch, l, micro_batches_given);
    STRATA_CHECK(M >= P, "--schedule interleaved needs --micro-batches >= --pp: ", M, " < ", P,
                 origin);
    fail("--schedule interleaved needs --micro-batches a multiple of --pp: ", M,
         " is not a multiple of ", P, origin);
  }
  const pl::Schedule schedule = pl::make_schedule(l.schedule, P, int(M), V);
  if (!parallel::zero_bubble_allows_zero(l.schedule, l.zero)) {
    // Zero-bubble runs a block's weight pass after later micro-batches' input passes: its
    // gradients stay live in between (ZeRO 2's bucket buffers, ZeRO 3's gathered layers).
    const int deferred = pl::max_deferred_weight_passes(schedule);
    fail("--schedule zb with --zero ", l.zero, ": zero-bubble defers up to ", deferred,
         " weight passes per stage past later micro-batches' backward, so every block's ",
         l.zero == 2 ? "gradient bucket" : "gathered parameters and gradient bucket",
         " would stay live in between (", deferred, " x ", L / P,
         " blocks vs the 2 bucket buffers ZeRO ", l.zero,
         " keeps); use --zero 0 or 1 with zb, or --schedule 1f1b / interleaved with --zero ",
         l.zero);
  }
}

}  // namespace

void check_layout(const model::GPTConfig& model, int seq, int64_t batch,
                  const parallel::ParallelLayout& l, bool micro_batches_given) {
  // The degrees themselves: each at least 1, ep carved out of dp x cp (parallel/mesh.h).
  l.mesh().resolved(int(l.world()));
  model::check_context_parallel(model, l.tp, l.cp, l.cp_options, seq);
  // Sequence parallelism splits each cp rank's seq / cp rows.
  model::check_tensor_parallel(model, l.tp, l.sequence_parallel, seq, l.cp);
  check_experts(model, l);
  STRATA_CHECK(l.micro_batch >= 1 && parallel::batch_splits(batch, l.dp, l.micro_batch), "--batch ",
               batch, " does not split into ", l.dp, " data-parallel rank(s) x micro-batch ",
               l.micro_batch, " x a whole number of accumulation steps");
  check_pipeline(model, seq, batch, l, micro_batches_given);
}

parallel::ParallelLayout RunSpec::layout() const {
  parallel::MeshDims d;
  try {
    d = parallel.mesh_dims();
  } catch (const SettingError& e) {
    throw Error(in_flags(e));
  }
  parallel::ParallelLayout l;
  l.tp = d.tp, l.cp = d.cp, l.dp = d.dp, l.pp = d.pp, l.ep = d.ep;
  l.zero = parallel.dp.stage;
  l.schedule = parallel.pipeline.schedule;
  l.virtual_stages = parallel.pipeline.virt;
  l.pp_split = parallel.pipeline.split;
  l.micro_batch = train.micro_batch > 0 ? train.micro_batch : std::max(1, int(group_batch() / d.dp));
  l.sequence_parallel = parallel.sequence_parallel;
  l.cp_options = parallel.cp;
  return l;
}

int64_t RunSpec::group_batch() const {
  const parallel::OuterOptions& o = parallel.outer;
  return o.groups > 1 && o.data == parallel::GroupData::split ? train.batch / o.groups : train.batch;
}

// --replica-groups R (parallel/outer.h): R groups of world / R consecutive ranks, each its own
// layout, meeting every --inner-steps steps. Across hosts a group is one host, whole hosts, or
// part of one host, never parts of two.
void RunSpec::check_replica_groups() const {
  const parallel::OuterOptions& o = parallel.outer;
  const int R = o.groups, n = parallel.world();
  STRATA_CHECK(R >= 1, "--replica-groups must be at least 1 (got ", R, ")");
  if (given.inner_steps) STRATA_CHECK(o.inner_steps >= 1, "--inner-steps must be at least 1 (got ", o.inner_steps, ")");
  const bool streaming = o.fragments != 1 || o.overlap != 0 || o.dtype != parallel::OuterDType::fp32 || o.error_feedback;
  if (!o.active()) {
    STRATA_CHECK(!streaming, "--fragments, --outer-overlap and --outer-dtype shape the outer syncs of "
                 "--replica-groups R (or --inner-steps H); this run has none");
    return;
  }
  o.check(train.model.layers, "the model's layers", o.steps_per_sync());
  STRATA_CHECK(o.dtype == parallel::OuterDType::fp32 || R >= 2, "--outer-dtype ", parallel::outer_dtype_name(o.dtype),
               " encodes what crosses the groups: it needs --replica-groups 2 or more (got ", R, ")");
  STRATA_CHECK(n % R == 0, "--replica-groups ", R, " does not divide the job's ", n, " rank(s)");
  STRATA_CHECK(o.data == parallel::GroupData::same || train.batch % R == 0, "--batch ", train.batch,
               " does not split over --replica-groups ", R, " (each group trains its share; or --group-data same)");
  if (parallel.recovery != Recovery::restart) {
    // A lost group is left out of the outer syncs; its replacement joins at the end of a round.
    const std::string flag = cat("--recovery ", recovery_name(parallel.recovery));
    STRATA_CHECK(R >= 2, flag, " with --inner-steps goes on without a lost replica group: it needs "
                 "--replica-groups 2 or more (got ", R, ")");
    STRATA_CHECK(o.overlap == 0, flag, " with --replica-groups: a group lost with exchanges in flight "
                 "(--outer-overlap ", o.overlap, ") cannot be left out of them; use --outer-overlap 0");
    const int every = train.ckpt.mem_every;
    STRATA_CHECK(every <= 0 || o.steps_per_sync() % every == 0, flag, " with --replica-groups: a "
                 "replacement group joins at the end of a round, from that step's in-memory copy: "
                 "--mem-ckpt-every ", every, " must divide --inner-steps ", o.steps_per_sync());
  }
  if (parallel.hosts.empty()) return;
  std::vector<int> host_of;  // ranks fill the hosts' slots in order
  for (size_t h = 0; h < parallel.hosts.size(); ++h) host_of.insert(host_of.end(), size_t(parallel.hosts[h].slots), int(h));
  if (int(host_of.size()) < n) return;  // too few slots: the hosts' own check says so
  const int size = n / R;
  for (int g = 0; g < R; ++g) {
    const int first = g * size, last = first + size - 1;
    const int h0 = host_of[size_t(first)], h1 = host_of[size_t(last)];
    const bool starts_a_host = first == 0 || host_of[size_t(first - 1)] != h0;
    const bool ends_a_host = last + 1 == n || host_of[size_t(last + 1)] != h1;
    const int cut = starts_a_host ? h1 : h0;  // a host the group holds part of
    STRATA_CHECK(h0 == h1 || (starts_a_host && ends_a_host), "--replica-groups ", R, ": group ", g, " (ranks ",
                 first, "-", last, ") holds part of ", parallel.hosts_source, " host ",
                 parallel.hosts[size_t(cut)].host, " and ranks of another; a group must be one host, whole hosts or "
                 "part of one host");
  }
}

// --recovery shrink|live: the survivors of a data-parallel replica's death (one rank, or the
// tp x cp x pp ranks of one data-parallel index) continue on one replica fewer, from their
// in-memory copies, in groups re-formed by the launcher (docs/checkpoints.md, "Live recovery").
void RunSpec::check_live_recovery(const parallel::ParallelLayout& l) const {
  const TrainConfig& cfg = train;
  const ParallelConfig& pc = parallel;
  const int stage = pc.dp.stage;
  const std::string flag = cat("--recovery ", recovery_name(pc.recovery));
  std::string other;
  if (l.ep > 1) other = cat("ep ", l.ep);
  if (stage > 2) other += cat(other.empty() ? "" : ", ", "ZeRO ", stage);
  STRATA_CHECK(other.empty(), flag, " re-forms data-parallel replicas (tp x cp x pp groups) at ZeRO "
               "0-2 with ep 1, this run has ", other, "; use --recovery restart");
  STRATA_CHECK(cfg.ckpt.mem_every > 0, flag, " continues from the in-memory copies: it "
               "needs --mem-ckpt-every K (1: lose at most one step)");
  const int n = pc.world();
  STRATA_CHECK(n >= 2 && ((pc.hosts.empty() && pc.backend == comm::Backend::shm) ||
                          pc.backend == comm::Backend::tcp),
               flag, " needs 2 or more ranks started by strata with the shm backend on one host "
               "or the tcp backend (across hosts: OpenMPI cannot shrink a communicator)");
  // Replica groups: the unit is a group (check_replica_groups); inside it any such layout.
  if (pc.outer.groups > 1) return;
  const int group = l.tp * l.cp * l.pp;
  STRATA_CHECK(l.dp >= 2, flag, " continues on the data-parallel replicas left after one dies: it "
               "needs --dp 2 or more, this run has ", n, " rank(s) = ", group, " per replica (tp ",
               l.tp, " x cp ", l.cp, " x pp ", l.pp, ") x dp ", l.dp);
  // The smaller world must be a layout this run could start with.
  parallel::ParallelLayout less = l;
  less.dp = l.dp - 1;
  less.micro_batch = cfg.micro_batch > 0 ? cfg.micro_batch : std::max(1, cfg.batch / less.dp);
  const std::string after = group > 1 ? cat(less.dp, " data-parallel replica(s) of ", group, " rank(s)")
                                      : cat(less.dp, " rank(s)");
  try {
    cfg.accum(less.dp);
    check_layout(cfg.model, cfg.train_seq(), cfg.batch, less, given.micro_batches || pc.pipeline.micro > 0);
  } catch (const Error& e) {
    fail(flag, " continues on ", after, " after a replica's death, and ", in_flags(e));
  }
}

void RunSpec::validate() const {
  try {
    check_all();
  } catch (const SettingError& e) {  // a lower layer's refusal, in the flags' words
    throw Error(in_flags(e));
  }
}

void RunSpec::check_all() const {
  const TrainConfig& cfg = train;
  const ParallelConfig& pc = parallel;
  // The job: ranks, restarts, hosts, timeouts, traces.
  STRATA_CHECK(pc.nproc >= 1, "--nproc must be at least 1 (got ", pc.nproc, ")");
  const int n = pc.world();
  STRATA_CHECK(pc.max_restarts >= 0, "--max-restarts must not be negative (got ", pc.max_restarts,
               ")");
  STRATA_CHECK(
      !pc.elastic || (pc.hosts.size() > 1 && pc.max_restarts > 0) || comm::launched_as_rank(),
      "--elastic restarts on the remaining hosts: it needs --max-restarts R and two or more hosts "
      "(--hosts, --hostfile or --slurm)");
  STRATA_CHECK(pc.timeout_s >= 0, "--timeout must not be negative (got ", pc.timeout_s, ")");
  STRATA_CHECK(!pc.trace || !cfg.run_dir.empty(), "--trace needs --run-dir (the traces go there)");
  check_checkpoint_flags(cfg);
  // The --data text (a mixture's parts and weights) and a prepared directory's manifest, read
  // here so that a bad one is refused before the run dir is written.
  const auto mixture = data::parse_mixture(cfg.data);
  if (mixture.empty() && data::is_prepared(cfg.data)) data::read_manifest(cfg.data);
  for (const auto& part : mixture)
    if (data::is_prepared(part.first)) data::read_manifest(part.first);
  pc.dp.validate();
  check_replica_groups();
  const parallel::MeshDims& m = pc.mesh;
  if (given.dp) STRATA_CHECK(m.dp >= 1, "--dp must be at least 1 (got ", m.dp, ")");
  if (given.schedule)
    STRATA_CHECK(m.pp > 1, "--schedule ", pl::schedule_name(pc.pipeline.schedule),
                 " needs --pp 2 or more (got --pp ", m.pp, ")");
  if (given.cp_mode)
    STRATA_CHECK(m.cp > 1, "--cp-mode ", model::cp_mode_name(pc.cp.mode),
                 " needs --cp 2 or more (got --cp ", m.cp, ")");
  if (given.cp_chunks)
    STRATA_CHECK(m.cp > 1, "--cp-chunks ", model::cp_chunks_name(pc.cp.chunks),
                 " needs --cp 2 or more (got --cp ", m.cp, ")");
  // The model and the optimizer, then the layout they run on.
  const parallel::ParallelLayout l = layout();
  if (pc.recovery != Recovery::restart) check_live_recovery(l);
  STRATA_CHECK(cfg.optim.kind != parallel::OptimizerKind::muon || l.tp == 1 || cfg.model.kv() >= l.tp,
               "--optimizer muon with --tp ", l.tp, " and ", cfg.model.kv(), " key/value heads: ranks sharing a key/value "
               "head hold the same k and v rows, and Muon gathers each matrix from equal slices; use --tp at most "
               "--kv-heads, or AdamW");
  // The layout is each replica group's, and so is the batch it trains.
  const int64_t batch = group_batch();
  cfg.validate(l.dp * int(cfg.batch / batch));
  parallel::check_batch_split(batch, cfg.micro_batch, l.dp);
  check_layout(cfg.model, cfg.train_seq(), batch, l, given.micro_batches || pc.pipeline.micro > 0);
  // What the layout needs of this host. Under --pp each stage checks its own activations once
  // built (train/pipeline_rank.cc): the whole model's figure is no stage's.
  if (l.pp == 1)
    check_activation_budget(cfg.max_activation_mb, cfg.model, l.tp, l.sequence_parallel && l.tp > 1,
                            l.cp, l.cp_options.mode, l.micro_batch, cfg.train_seq(),
                            pc.dp.precision == parallel::Precision::bf16);
  // Dense gradients and ZeRO shards span dp x cp (cp ranks hold the same parameters); a rank's
  // E/ep experts span the dp x cp / ep ranks holding them (parallel/region.h).
  const int64_t experts = model::expert_params(cfg.model, l.ep, l.tp);
  const int64_t psi =
      model::local_num_params(cfg.model, {l.tp, 0}) - model::expert_params(cfg.model, 1, l.tp);
  // One process too: a count of experts the host cannot hold spent minutes building before
  // failing, so the bytes are compared with the host's memory first, naming --experts.
  try {
    parallel::check_memory_fits(psi, l.dp * l.cp, n, pc.dp, 0, 0, experts, l.dp * l.cp / l.ep);
  } catch (const Error& e) {
    if (!cfg.model.moe.enabled()) throw;
    throw Error(cat("--experts ", cfg.model.moe.experts, ": ", in_flags(e)));
  }
  // Last, as it reads files: every tensor of --init-from against the model, and its values
  // once, by the launcher (a rank reads them again to load them).
  if (!cfg.init_from.empty()) check_init_from(cfg.init_from, cfg.model, !comm::launched_as_rank());
}

}  // namespace strata::train
