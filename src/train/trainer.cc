#include "train/trainer.h"

#include <cblas.h>
#include <omp.h>
#include <xxhash.h>

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <optional>
#include <thread>

#include "comm/bootstrap.h"
#include "comm/process_group.h"
#include "comm/work.h"
#include "core/error.h"
#include "core/memory.h"
#include "core/phase.h"
#include "core/stats.h"
#include "core/threads.h"
#include "core/timer.h"
#include "core/trace.h"
#include "cost/activations.h"
#include "cost/flops.h"
#include "data/dataset.h"
#include "data/sampler.h"
#include "kernels/gemm_bf16.h"
#include "kernels/selfcheck.h"
#include "launcher/launcher.h"
#include "model/context/context_comm.h"
#include "model/shard.h"
#include "model/tensor/collectives.h"
#include "parallel/data_parallel.h"
#include "parallel/outer.h"
#include "train/checkpointing.h"
#include "train/context_metrics.h"
#include "train/generate.h"
#include "train/init_from.h"
#include "train/kernel_paths.h"
#include "train/metrics.h"
#include "train/moe_load.h"
#include "train/peak.h"

namespace strata::train {

using nlohmann::json;


// ---- pieces of a run -----------------------------------------------------------------------

namespace {

constexpr uint64_t kSampleStream = 0x5A3D1E00;  // Rng stream base for generation

void set_threads(int threads) {
  if (threads <= 0) return;
  omp_set_num_threads(threads);
  openblas_set_num_threads(threads);
}

// "1h02m", "3m07s", "12s": an ETA.
std::string duration_text(double s) {
  if (!std::isfinite(s) || s < 0) return "?";
  const long t = std::lround(s);
  if (t >= 3600) return fmt("%ldh%02ldm", t / 3600, t / 60 % 60);
  if (t >= 60) return fmt("%ldm%02lds", t / 60, t % 60);
  return fmt("%lds", t);
}

std::string mib(int64_t bytes) { return fmt("%.1f MiB", double(bytes) / (1 << 20)); }

// The held-out set: the first eval_batches x batch sequences of the held-out split's order
// (fewer when the split is smaller), the same sequences whatever the layout, and the same at
// every eval so that evals are comparable. The data-parallel ranks split them as they split a
// training step (data/sampler.h), in this rank's micro-batches of b; every rank runs the same
// number of micro-batches, so engines that gather parameters in forward (ZeRO-3) take part
// together. The loss is the sum of token losses over every rank divided by the real tokens of
// all of them (token-weighted, not a mean of per-rank means). Collective over the job.
struct EvalResult {
  double loss = 0;
  int64_t sequences = 0, tokens = 0;  // the whole job's
};
// The token documents begin with under --doc-mask (-1 without it): --doc-token, else the
// data's own (a prepared directory's manifest); refused in one line when neither names one.
int32_t document_token(const TrainConfig& cfg, const data::TokenSource& src) {
  if (!cfg.doc_mask) return -1;
  const int32_t t = cfg.doc_token >= 0 ? cfg.doc_token : src.document_token();
  STRATA_CHECK(t >= 0, "--doc-mask: ", src.describe(),
               " names no document token (prepare it with `strata data prepare`, or give --doc-token)");
  return t;
}

EvalResult evaluate(const model::StageModel& part, const data::TokenSource& val, const TrainConfig& cfg,
                    const Topology& topo, int b, int A, StepRunner& runner) {
  PhaseScope phase(PhaseKind::eval);
  data::SamplerConfig sc;
  sc.seq = cfg.train_seq();
  sc.micro_batch = b;
  sc.accum = cfg.eval_batches * A;  // b x eval_batches x A x dp = eval_batches x batch
  sc.world = topo.dp_world;
  sc.seed = cfg.seed;
  sc.policy = data::TailPolicy::uneven;  // a small held-out split gives what it has
  sc.doc_token = document_token(cfg, val);
  data::Loader loader(val, sc, topo.dp_rank, {}, /*prefetch=*/0);
  data::StepBatch batch = loader.next();
  double sum = 0;
  model::expert::MoE* moe = part.moe();
  if (moe) moe->set_training(false);  // no router jitter
  sum = runner.forward_sum(batch);  // a pipeline: the stages run the batch together
  if (moe) moe->set_training(true);
  if (!topo.counts_loss) sum = 0;  // a tp or cp peer (or an earlier stage): its group counts it
  sum = topo.sum_across_ranks(sum);
  STRATA_CHECK(batch.global_real_tokens > 0, "held-out split gave no tokens to evaluate");
  // Every held-out sample is a whole window: T real targets each.
  return {sum / double(batch.global_real_tokens), batch.global_real_tokens / cfg.train_seq(),
          batch.global_real_tokens};
}

// Tokens as the data shows them: decoded text when the source knows its tokenizer (escaped as
// a text file's bytes are), else bytes of a text file or ids.
static std::string render_sample(const data::TokenSource& src, const std::vector<int32_t>& tokens) {
  if (src.can_decode()) {
    try {
      const std::string text = src.decode(tokens);
      std::vector<int32_t> bytes;
      for (const char c : text) bytes.push_back(int32_t(uint8_t(c)));
      return render_tokens(bytes, true);
    } catch (const std::exception&) {
      // an id past the tokenizer's vocabulary (a padded model vocabulary): show ids
    }
  }
  return render_tokens(tokens, src.is_text());
}

std::string sample_text(model::GPT& model, const data::TokenSource& val, const TrainConfig& cfg,
                        int64_t step) {
  PhaseScope phase(PhaseKind::eval);
  int n_prompt = int(std::min<int64_t>({8, val.size(), cfg.train_seq()}));
  std::vector<int32_t> prompt(n_prompt);
  val.read(0, n_prompt, prompt.data());
  std::vector<int32_t> gen = generate(model, prompt, cfg.sample_tokens, cfg.train_seq(),
                                      cfg.model.vocab, cfg.seed, kSampleStream + uint64_t(step));
  return render_sample(val, prompt) + " | " + render_sample(val, gen);
}

// Every live re-formation of the run (train/distributed.cc), as rank 0 of each world recorded
// it in metrics.jsonl: the rank 0 of a later world need not have lived through the earlier ones.
json live_recoveries(const std::string& run_dir) {
  json out = json::array();
  std::ifstream f(run_dir + "/metrics.jsonl");
  std::string line;
  while (std::getline(f, line)) {
    const json j = json::parse(line, nullptr, false);
    if (!j.is_discarded() && j.is_object() && j.contains("live_recovery")) out.push_back(j["live_recovery"]);
  }
  return out;
}

std::string floor_text(double loss, double floor) {
  if (floor < 0) return fmt("%.4f", loss);
  return fmt("%.4f vs floor %.4f (%+.4f)", loss, floor, loss - floor);
}

}  // namespace

// ---- the loop ------------------------------------------------------------------------------

// One run's state; Trainer::run drives it step by step.
struct Trainer::Run {
  const TrainConfig& cfg;
  const Topology& topo;
  StepRunner& runner;
  int world, A, T, b, threads;  // world: data-parallel ranks (topo.dp_world)
  bool lead;
  std::unique_ptr<MetricsWriter> out;
  std::shared_ptr<data::Split> split;  // topo.live.data when a live world keeps it
  model::StageModel* part = nullptr;  // the model this rank runs (the runner's: a GPT or a stage's chunks)
  std::unique_ptr<parallel::StepEngine> engine;
  parallel::OuterSyncEngine* outer = nullptr;  // --replica-groups: the engine, as its outer syncs
  std::unique_ptr<data::Loader> loader;
  std::unique_ptr<RunCheckpoints> ckpt;
  int64_t start_step = 0;   // > 0 when resumed from a checkpoint
  int64_t rolled_back_to = -1;  // the last step rolled back to its in-memory copy (-1: none)
  int64_t rollbacks = 0;
  int64_t step_tokens = 0;  // real tokens of the last step
  int64_t own_tokens = 0;   // ... this rank trained (its micro-batches')
  // --replica-groups: each group's mean token loss of the last step (NaN: not in this world),
  // and the real tokens the job's loss is over (fewer than the batch's while a group is lost).
  std::vector<double> group_losses;
  int64_t group_tokens = 0;
  bool inject = false;      // cfg.fault fires in this attempt (the supervisor's first only)
  Peak peak;
  double recorded_peak = 0;  // the last peak written back to the cache by track_peak
  std::string gemm;  // which GEMM the model's matmuls run (kernels::matmul_gemm_name)
  KernelPaths kernel_paths;  // this rank's instruction-set level and bf16 path, and why
  std::string kernel_words;  // the job's paths in words (every rank's, when they differ)
  double flops_per_token = 0, floor = -1;
  TrainResult result;
  std::vector<double> tok_s, mfus, step_ms;
  double straggler_wait_s = -1;  // this window's wait for the slowest rank (last check)
  double run_s = 0;              // time in training steps so far (the progress line's ETA)

  Run(const TrainConfig& c, const Topology& t, StepRunner& runner);
  diag::ComputeWindow compute_window;
  CollapseWatch collapse{cfg.moe_collapse_pct, cfg.moe_collapse_steps};
  SpikeGuard guard{cfg.guard};
  std::vector<double> expert_rows_window;  // rows each rank's experts processed, this window
  int64_t ep_bytes_at_step_begin = 0, ep_off_host_at_step_begin = 0, ep_rows_at_step_begin = 0;
  // The MoE layer whose load the step reports (null for a dense model).
  model::expert::MoE* moe() const { return part->moe(); }
  // The step's MoE load summed over the ranks (docs/moe.md); null for a dense model.
  std::optional<nlohmann::json> moe_step_load(int64_t step, int64_t tokens);
  // A step's named parts (train/trainer.h), in the order train_step calls them.
  struct Update {
    double lr = 0, loss = 0;
    float grad_norm = 0;
    std::string skip_why;      // non-empty: the guard refused the step
    int64_t rolled_back = -1;  // the in-memory copy's step the run went back to (-1: none)
    int64_t optimizer_ns = 0;
  };
  struct StepTimes {
    Stopwatch sw;
    int64_t blocked_step0 = 0, compute_ns = 0;
    double data_s = 0;
  };
  void train_step(int64_t step);
  diag::FaultKind fault_of(int64_t step);
  double passes(const data::StepBatch& batch, float scale, diag::FaultKind fault);
  double job_loss(double loss_sum, int64_t tokens, diag::FaultKind fault);
  double group_loss(double loss_sum);
  Update update(int64_t step, double loss_sum, int64_t tokens, diag::FaultKind fault);
  void settle(int64_t step, Update& u);
  void record_step(int64_t step, const Update& u, const StepTimes& times, int64_t tokens, const nlohmann::json& cp_rec);
  void add_moe_record(const nlohmann::json& moe, double loss, nlohmann::json& rec);
  void print_step(int64_t step, const nlohmann::json& rec, const Update& u, double tps, double mfu, double secs);
  void track_peak(double tokens_per_s, int64_t step);
  std::optional<diag::StragglerCheck> check_stragglers(int64_t step);
  void inject_at_step_start(int64_t step);
  void eval_and_sample(int64_t step);
  void finish(double wall_s);
  void choose_kernels();
  void open_loader(const data::LoaderState& from);
  void note_peak_raised();
  SummaryBuilder summary_of_run(double wall_s);
  nlohmann::json outer_section();
  nlohmann::json recompute_section(const model::StageModel& worker, int64_t steps) const;
};

Trainer::Run::Run(const TrainConfig& c, const Topology& t, StepRunner& runner)
    : cfg(c), topo(t), runner(runner), world(t.dp_world), A(c.accum(t.dp_world)), T(c.train_seq()),
      b(c.batch / (A * world)), threads(omp_get_max_threads()), lead(t.rank == 0) {
  current_phase().set(-1, -1, PhaseKind::data);
  split = topo.live.data ? topo.live.data
                         : std::make_shared<data::Split>(
                               data::open_split(cfg.data, cfg.seed, cfg.val_fraction, cfg.model.vocab));
  STRATA_CHECK(split->train->vocab() <= cfg.model.vocab, "data ", split->train->describe(),
               " has token ids up to ", split->train->vocab() - 1, " but the model's vocabulary is ",
               cfg.model.vocab, " (set --vocab ", split->train->vocab(), ")");
  floor = split->val->entropy_floor();

  part = &runner.build_model(cfg, topo, b);
  engine = runner.make_engine(cfg.optim, cfg.seed);
  if (!cfg.init_from.empty()) {  // before the resume, which replaces it when a checkpoint loads
    const std::string line = init_from_hf(
        cfg.init_from, cfg.model, part->tensor_layout(), *engine);
    if (lead) std::fprintf(stderr, "strata train: %s\n", line.c_str());
  }
  // Replica groups: the groups' engines meet every H steps (parallel/outer.h); the global
  // parameters start as the ones just made (the same seed, or --init-from, in every group).
  if (topo.outer.options.active()) {
    const int F = topo.outer.options.fragments;
    auto o = std::make_unique<parallel::OuterSyncEngine>(
        std::move(engine), topo.outer.options, topo.outer.across, topo.outer.group, cfg.schedule.steps,
        parallel::fragment_ranges(part->tensor_layout(), F), topo.outer.present);
    outer = o.get();
    engine = std::move(o);
    if (lead) std::fprintf(stderr, "strata train: %s\n", topo.outer.options.describe().c_str());
  }

  // Checkpoints and resume (train/checkpointing.h); metrics.jsonl is opened after the resume
  // so that a resumed run appends to its own history.
  const int restart = std::max(topo.restart, comm::restart_attempt());
  const diag::FaultKind fk = cfg.fault.kind;
  STRATA_CHECK(topo.group || (fk != diag::FaultKind::skip_collective &&
                              fk != diag::FaultKind::wrong_count),
               "--inject ", diag::fault_kind_name(fk), " needs a collective to break: run on 2 or "
               "more ranks (--nproc)");
  inject = cfg.fault.active() && restart == 0 && topo.live.generation == 0;
  ckpt = std::make_unique<RunCheckpoints>(cfg, topo, restart, *part, *engine);
  const ResumePoint from = ckpt->resume();
  start_step = from.step;
  if (lead) {
    out = std::make_unique<MetricsWriter>(cfg.run_dir, cfg.json, stdout, from.step > 0);
    result.losses = from.losses;
    if (from.step > 0 || restart > 0 || topo.live.generation > 0) {  // a resume or a supervised restart, for the report
      json rec = {{"step", from.step}, {"restart", restart}, {"resumed_from", from.dir}};
      if (from.steps_lost >= 0) rec["steps_lost"] = from.steps_lost;
      if (topo.live.generation > 0 && !topo.live.records->empty())
        rec["live_recovery"] = topo.live.records->back();
      out->record(rec, "");
    }
  }
  choose_kernels();
  open_loader(from.loader);
}

// The kernel paths and GEMM the model's passes run, and the machine's peak for MFU.
void Trainer::Run::choose_kernels() {
  const bool bf16 = part->compute() == DType::bf16;  // what the model's passes run
  gemm = kernels::matmul_gemm_name(bf16);
  kernel_paths = chosen_kernel_paths(bf16);
  kernel_words = kernel_paths_of_group(kernel_paths, topo.group);
  if (lead)
    for (const std::string& n : kernels::path_notes()) out->note("note: " + n);
  if (lead) peak = machine_peak(threads, cfg.peak_gflops, 1.0, bf16);
  if (lead && bf16 && kernels::bf16_gemm_path() == kernels::GemmPath::fp32)
    out->note("note: --precision bf16 runs emulated: no bf16 matrix unit (AMX or AVX-512 BF16) " +
              std::string(kernels::cpu_has_avx512bf16() ? "selected (STRATA_KERNELS=fp32)"
                                                        : "on this CPU") +
              ", so its matmuls run in fp32 on the bf16-stored values");
  // The whole model's FLOPs, also on a tensor-parallel rank (which holds 1/T of them).
  // 6N + 12·L·h·s with N the weights a token multiplies by, the planner's count (cost/flops.h).
  flops_per_token = cost::model_flops_per_token(model::gpt_shape(cfg.model), T);
  // Muon's Newton-Schulz iterations are work of the step too: every matrix once per step,
  // spread over the step's tokens (docs/muon.md).
  if (cfg.optim.kind == parallel::OptimizerKind::muon)
    flops_per_token += parallel::muon_ns_flops(parallel::muon_matrices(model::build_param_table(cfg.model)),
                                               cfg.optim.muon.ns_steps) /
                       double(cfg.batch * cfg.train_seq());
}

// This rank's loader over the training split, from the resumed position; and the run's line.
void Trainer::Run::open_loader(const data::LoaderState& from) {
  data::SamplerConfig sc;
  sc.seq = T;
  sc.micro_batch = b;
  sc.accum = A;
  sc.world = world;
  sc.seed = cfg.seed;
  sc.policy = data::parse_tail_policy(cfg.tail);
  sc.doc_token = document_token(cfg, *split->train);
  loader = std::make_unique<data::Loader>(*split->train, sc, topo.dp_rank, from,
                                          cfg.prefetch);
  result.entropy_floor = floor;
  if (lead)
    out->note(fmt("strata train: %s, %lld params, data %s, batch %d = %d x %d accum x %d rank(s), "
                  "seq %d, %d threads, kernels %s, gemm %s, %s peak %s",
                  cfg.model_name.c_str(), (long long)cfg.model.num_params(),
                  split->train->describe().c_str(), cfg.batch, b, A, world, T, threads,
                  kernel_words.c_str(), gemm.c_str(), peak.kind.c_str(), peak.label().c_str()));
}

// kill, exit and hang hit at the start of the step; the others inside it (train_step).
void Trainer::Run::inject_at_step_start(int64_t step) {
  if (!inject || !cfg.fault.fires(topo.rank, step + 1)) return;
  switch (cfg.fault.kind) {
    case diag::FaultKind::kill:
      raise(SIGKILL);
      break;
    case diag::FaultKind::exit:
      _exit(3);  // no cleanup, no goodbye to the group: peers see a dead rank
    case diag::FaultKind::hang:
      for (;;) pause();
    default:
      break;
  }
}

// Every K steps the ranks share the compute time of the window (one all-gather).
std::optional<diag::StragglerCheck> Trainer::Run::check_stragglers(int64_t step) {
  if (topo.world <= 1 || !topo.group ||
      !diag::straggler_check_due(step + 1, cfg.straggler.every_steps))
    return std::nullopt;
  double mine = compute_window.take();
  std::vector<double> all(size_t(topo.world), 0.0);
  topo.group->all_gather(&mine, all.data(), 1, DType::f64);
  // What this rank waited for the slowest one, per step of the window.
  const int every = std::max(1, cfg.straggler.every_steps);
  straggler_wait_s = (*std::max_element(all.begin(), all.end()) - mine) / every;
  return diag::find_stragglers(all, cfg.straggler.threshold_pct, step + 1);
}

// A step whose model FLOP/s beat the peak proves the peak low (probed under load, or a
// --peak-gflops below the machine): the peak becomes that rate, so MFU never exceeds 100%,
// and a measured or cached peak is written back to the cache whenever it grew by 2%.
void Trainer::Run::track_peak(double tokens_per_s, int64_t step) {
  const double achieved = tokens_per_s * flops_per_token / topo.world * 1e-9;  // per process
  if (!peak.raise(achieved, step + 1) || peak.origin == "flag") return;
  if (peak.gflops > recorded_peak * 1.02) {
    record_peak(threads, peak.gflops, peak.bf16_path);
    recorded_peak = peak.gflops;
  }
}

// The fault --inject asks of this step, if it hits this rank (once: a step trained again
// after a rollback runs clean). kill, exit and hang fire at the step's start.
diag::FaultKind Trainer::Run::fault_of(int64_t step) {
  inject_at_step_start(step);
  if (!inject || !cfg.fault.fires(topo.rank, step + 1)) return diag::FaultKind::none;
  inject = false;
  return cfg.fault.kind;
}

// passes: the step's forward and backward passes through the runner, gradients scaled by
// `scale`, reduced by the engine; returns this rank's sum of token losses.
double Trainer::Run::passes(const data::StepBatch& batch, float scale, diag::FaultKind fault) {
  engine->begin_step();
  if (moe()) {  // what evals and samples routed is not this step's
    moe()->take_load();
    moe()->take_owned_rows();
    ep_bytes_at_step_begin = moe()->group().bytes_sent();
    ep_off_host_at_step_begin = moe()->group().bytes_sent_off_host();
    ep_rows_at_step_begin = moe()->group().rows_sent();
  }
  current_phase().set_kind(PhaseKind::forward);
  if (fault == diag::FaultKind::sleep)
    std::this_thread::sleep_for(std::chrono::duration<double>(cfg.fault.sleep_s));
  const double loss_sum = runner.forward_backward(batch, scale);
  current_phase().set_kind(PhaseKind::backward);  // the gradients' last reductions
  engine->end_backward();
  return loss_sum;
}

// The job's mean token loss of the step (collective). skip_collective and wrong_count break
// the reduction on purpose.
double Trainer::Run::job_loss(double loss_sum, int64_t tokens, diag::FaultKind fault) {
  if (!topo.counts_loss) loss_sum = 0;  // a tp or cp peer: rank 0 of its group counts it
  double total = loss_sum;
  if (fault == diag::FaultKind::skip_collective) {
    // this rank skips the loss all-reduce: its peers wait there until they time out
  } else if (fault == diag::FaultKind::wrong_count) {
    double pair[2] = {loss_sum, 0};  // two elements where the peers reduce one
    topo.group->all_reduce(pair, 2);
    total = pair[0];
  } else if (topo.outer.options.groups > 1 && topo.group) {
    return group_loss(loss_sum);
  } else {
    total = topo.sum_across_ranks(loss_sum);
  }
  return total / double(tokens);
}

// Replica groups: the job's mean token loss over the groups this world holds (all but a lost
// one: its tokens are not the job's this step), and each group's own (collective).
double Trainer::Run::group_loss(double loss_sum) {
  const int R = topo.outer.options.groups, g = topo.outer.group;
  std::vector<double> v(2 + 2 * size_t(R), 0.0);  // job: loss, tokens; then each group's
  const double tokens = topo.counts_tokens ? double(own_tokens) : 0.0;
  if (topo.counts_loss) v[0] = loss_sum;
  if (topo.counts_loss_of_group) v[1] = tokens;
  if (topo.counts_group_loss) v[2 + size_t(g)] = loss_sum;
  v[2 + size_t(R + g)] = tokens;
  topo.group->all_reduce(v.data(), v.size());
  group_losses.assign(size_t(R), std::nan(""));
  for (int k = 0; k < R; ++k)
    if (v[2 + size_t(R + k)] > 0) group_losses[size_t(k)] = v[2 + size_t(k)] / v[2 + size_t(R + k)];
  group_tokens = int64_t(v[1]);
  return v[0] / v[1];
}

// update: the optimizer step at the step's learning rate. The guard judges the job's loss
// before the update, so the loss is reduced first under a guard (without one, train_step
// reduces it after the step's compute time is taken).
Trainer::Run::Update Trainer::Run::update(int64_t step, double loss_sum, int64_t tokens, diag::FaultKind fault) {
  Update u;
  u.lr = cfg.schedule.lr_at(step);
  ckpt->before_update();  // the in-memory copy of the last step reads the states until now
  const int64_t t0 = now_ns(), blocked0 = comm::thread_blocked_ns();
  if (guard.config().active()) {
    u.loss = job_loss(loss_sum, tokens, fault);
    u.grad_norm = engine->step_if(float(u.lr), [&](float norm) {
      u.skip_why = guard.verdict(u.loss, norm);
      return u.skip_why.empty();
    });
  } else {
    u.grad_norm = engine->step(float(u.lr));
  }
  u.optimizer_ns = (now_ns() - t0) - (comm::thread_blocked_ns() - blocked0);
  return u;
}

// settle: a refused step is skipped or rolled back to the newest in-memory copy; an accepted
// one must be finite, and its loss joins the run's curve.
void Trainer::Run::settle(int64_t step, Update& u) {
  if (!u.skip_why.empty()) {
    guard.skipped(step + 1, u.skip_why);  // throws past --max-skipped-steps
    if (cfg.guard.rollback) u.rolled_back = ckpt->roll_back();
    if (lead && u.rolled_back >= 0)
      out->note(fmt("step %lld rolled back to the in-memory copy of step %lld (its batch is "
                    "skipped, the run continues at step %lld): %s",
                    (long long)(step + 1), (long long)u.rolled_back, (long long)(u.rolled_back + 1),
                    u.skip_why.c_str()));
    else if (lead)
      out->note(fmt("step %lld skipped (parameters and optimizer state unchanged%s): %s", (long long)(step + 1),
                    cfg.guard.rollback ? "; no in-memory copy yet to roll back to" : "", u.skip_why.c_str()));
  } else {
    STRATA_CHECK(std::isfinite(u.loss), "loss became ", u.loss, " at step ", step + 1, " (lr ", u.lr,
                 "); try a lower --lr, or --skip-nonfinite to skip such steps");
    STRATA_CHECK(std::isfinite(u.grad_norm), "the gradient norm became ", u.grad_norm, " at step ", step + 1,
                 " (lr ", u.lr, "); try a lower --lr, or --skip-nonfinite to skip such steps");
    guard.accepted(u.loss, u.grad_norm);
  }
  if (u.rolled_back >= 0) {
    // The steps after the copy are trained again: their losses are no longer the run's.
    const size_t redone = size_t(step - u.rolled_back);
    result.losses.resize(result.losses.size() - std::min(redone, result.losses.size()));
    rolled_back_to = u.rolled_back;
    ++rollbacks;
  } else if (std::isfinite(u.loss)) {
    result.losses.push_back(u.loss);
  }
}

void Trainer::Run::train_step(int64_t step) {
  // Steps count from 1, as printed; set before a fault at the step's start, so that a rank
  // hung there dumps as in this step, not in the last phase of the one before.
  current_phase().set(step + 1, -1, PhaseKind::data);
  const diag::FaultKind fault = fault_of(step);
  StepTimes times;
  TraceSpan step_span(tracer(), tracer().enabled() ? cat("step ", step + 1) : "", "step");
  times.blocked_step0 = comm::thread_blocked_ns();
  data::StepBatch batch = [&] {
    TraceSpan span(tracer(), "data", "data");
    return loader->next();
  }();
  times.data_s = times.sw.seconds();
  STRATA_CHECK(batch.global_real_tokens > 0, "step ", step + 1, " has no real tokens");
  float scale = float(1.0 / double(batch.global_real_tokens));
  if (fault == diag::FaultKind::nan_grad) scale = std::nanf("");
  if (fault == diag::FaultKind::spike_grad) scale *= 1000.0f;
  const int64_t compute_t0 = now_ns(), blocked_t0 = comm::thread_blocked_ns();
  const CpMark cp0 = cp_mark(*part);
  const double loss_sum = passes(batch, scale, fault);
  int64_t sequences = 0;
  own_tokens = 0;
  for (const data::MicroBatch& mb : batch.micro) sequences += mb.B, own_tokens += mb.real_tokens;
  const json cp_rec = cp_step_metrics(*part, cp0, sequences, T);
  current_phase().set_kind(PhaseKind::optimizer);
  Update u = update(step, loss_sum, batch.global_real_tokens, fault);
  // Compute time: forward, backward and optimizer, less the time blocked in communication.
  times.compute_ns = (now_ns() - compute_t0) - (comm::thread_blocked_ns() - blocked_t0);
  compute_window.add(double(times.compute_ns) * 1e-9);
  if (!guard.config().active()) u.loss = job_loss(loss_sum, batch.global_real_tokens, fault);
  step_tokens = group_losses.empty() ? batch.global_real_tokens : group_tokens;
  settle(step, u);
  record_step(step, u, times, step_tokens, cp_rec);
}

// record: the step's throughput, MFU, MoE load and stragglers (collective where they are),
// then rank 0's metrics record and progress line.
void Trainer::Run::record_step(int64_t step, const Update& u, const StepTimes& times, int64_t tokens,
                               const json& cp_rec) {
  const double secs = times.sw.seconds();
  run_s += secs;
  const double comm_wait_s = double(comm::thread_blocked_ns() - times.blocked_step0) * 1e-9;
  const double tps = double(tokens) / secs;
  // The peak is one process's (its threads); the job has `world` of them.
  if (lead) track_peak(tps, step);
  const double mfu = cost::mfu(tps, flops_per_token, peak.gflops * 1e9 * topo.world);
  const int64_t steps = cfg.schedule.steps;
  if (step > 0 || steps == 1) {  // the first step pays for warm-up
    tok_s.push_back(tps);
    mfus.push_back(mfu);
    step_ms.push_back(secs * 1e3);
  }
  std::optional<diag::StragglerCheck> stragglers = check_stragglers(step);
  std::optional<json> moe = moe_step_load(step, tokens);
  // Replica groups: what every rank put into the step's exchanges across groups, summed
  // (collective on the steps that start one, which every rank shares; a rank whose ZeRO shard
  // holds none of a fragment puts in nothing but still takes part).
  const int64_t outer_bytes =
      outer && outer->stats().started_last > 0 ? int64_t(topo.sum_across_ranks(double(outer->stats().bytes_last))) : 0;
  if (!lead) return;
  json rec = {{"step", step + 1},         {"loss", u.loss},       {"lr", u.lr},
              {"grad_norm", u.grad_norm}, {"tokens_per_s", tps},  {"mfu", mfu},
              {"ms", secs * 1e3},         {"tokens", tokens},
              // where the step went (rank 0): docs/report.md
              {"data_ms", times.data_s * 1e3},  {"compute_ms", double(times.compute_ns - u.optimizer_ns) * 1e-6},
              {"optimizer_ms", double(u.optimizer_ns) * 1e-6}, {"comm_wait_ms", comm_wait_s * 1e3}};
  if (!u.skip_why.empty()) {
    rec["skipped"] = true;
    rec["skip_reason"] = u.skip_why;
  }
  if (u.rolled_back >= 0) {
    // Not a step of the run's curve: the step is trained again after the copy's step.
    rec["rolled_back_to"] = u.rolled_back;
    rec["rolled_back_loss"] = u.loss;
    rec.erase("loss");
  }
  rec.update(cp_rec);  // context parallelism: bytes sent vs formula (train/context_metrics.h)
  if (outer_bytes > 0) rec["outer_bytes"] = outer_bytes;  // the step ended with an outer sync
  if (!group_losses.empty()) {  // each replica group's loss; null: a group this world lacks
    json gl = json::array();
    for (double l : group_losses) gl.push_back(std::isnan(l) ? json() : json(l));
    rec["group_losses"] = gl;
  }
  if (outer && outer->stats().ns_last > 0) {  // starts and merges (docs/report.md's split)
    rec["outer_ms"] = double(outer->stats().ns_last) * 1e-6;
    rec["outer_wait_ms"] = double(outer->stats().wait_ns_last) * 1e-6;
  }
  if (moe) add_moe_record(*moe, u.loss, rec);
  const json layout = runner.step_metrics();
  if (!layout.is_null()) rec.update(layout);
  if (stragglers) {
    rec["straggler_wait_ms"] = std::min(straggler_wait_s, comm_wait_s) * 1e3;
    diag::add_straggler_metrics(*stragglers, rec);
    std::string line = diag::straggler_log_line(*stragglers);
    if (!line.empty() && moe) line += expert_load_text(*stragglers, expert_rows_window);
    if (!line.empty()) out->note(line);
    std::fill(expert_rows_window.begin(), expert_rows_window.end(), 0.0);
  }
  print_step(step, rec, u, tps, mfu, secs);
}

void Trainer::Run::add_moe_record(const json& moe, double loss, json& rec) {
  rec["ce_loss"] = loss - moe["aux_loss"].get<double>() - moe["z_loss"].get<double>();
  rec["aux_loss"] = moe["aux_loss"];
  rec["z_loss"] = moe["z_loss"];
  rec["moe"] = moe["blocks"];
  rec["expert_rows_per_rank"] = moe["expert_rows_per_rank"];
  rec["ep_bytes"] = moe["ep_bytes"];  // all-to-all payload of every rank this step
  rec["ep_bytes_off_host"] = moe["ep_bytes_off_host"];  // the part sent to other hosts
  rec["ep_rows"] = moe["ep_rows"];  // token rows dispatched (cost/comm.h ep_group_bytes)
  if (moe.contains("warning")) out->note(moe["warning"].get<std::string>());
}

// Rank 0: the record into metrics.jsonl, with a progress line every --log-every steps (on a
// terminal, one line updated in place every step).
void Trainer::Run::print_step(int64_t step, const json& rec, const Update& u, double tps, double mfu, double secs) {
  const int64_t steps = cfg.schedule.steps;
  const bool show = (step + 1) % cfg.log_every == 0 || step + 1 == steps || step == 0;
  if (out->live()) {
    const double eta = run_s / double(step + 1 - start_step) * double(steps - step - 1);
    out->progress(rec, fmt("step %5lld/%lld | loss %.4f | %.0f tok/s | MFU %.1f%% | ETA %s",
                           (long long)(step + 1), (long long)steps, u.loss, tps, 100 * mfu,
                           duration_text(eta).c_str()),
                  step + 1 == steps);
    return;
  }
  out->record(rec, show ? fmt("step %5lld/%lld | loss %.4f | lr %.2e | grad-norm %.3f | "
                              "%.0f tok/s | MFU %.1f%% of %s | %.1f ms",
                              (long long)(step + 1), (long long)steps, u.loss, u.lr, u.grad_norm, tps,
                              100 * mfu, peak.label().c_str(), secs * 1e3)
                        : std::string());
}

std::optional<json> Trainer::Run::moe_step_load(int64_t step, int64_t tokens) {
  if (!moe()) return std::nullopt;
  model::expert::LoadStats s = moe()->take_load();
  double mine = double(moe()->take_owned_rows());
  std::vector<double> rows(size_t(topo.world), mine);
  double ep_bytes[3] = {double(moe()->group().bytes_sent() - ep_bytes_at_step_begin),
                        double(moe()->group().bytes_sent_off_host() - ep_off_host_at_step_begin),
                        double(moe()->group().rows_sent() - ep_rows_at_step_begin)};
  // tp peers route the same tokens alike: tp rank 0 counts the load (docs/moe.md).
  if (topo.tp && topo.tp->rank() != 0) std::fill(s.v.begin(), s.v.end(), 0.0);
  if (topo.group && topo.world > 1) {
    topo.group->all_reduce(ep_bytes, 3);
    topo.group->all_reduce(s.v.data(), s.v.size());
    topo.group->all_gather(&mine, rows.data(), 1, DType::f64);
  }
  expert_rows_window.resize(rows.size(), 0.0);
  for (size_t r = 0; r < rows.size(); ++r) expert_rows_window[r] += rows[r];
  json j = moe_load_json(s, cfg.model.moe.top_k, double(tokens));
  if (cfg.model.moe.bias_rate > 0) {  // every rank from the same sums: the same bias
    moe()->update_router_bias(s);
    const std::vector<float>& b = moe()->router_bias();
    const size_t E = size_t(cfg.model.moe.experts);
    for (size_t m = 0; m < j["blocks"].size(); ++m)
      j["blocks"][m]["router_bias"] = std::vector<float>(b.begin() + long(m * E), b.begin() + long((m + 1) * E));
  }
  j["expert_rows_per_rank"] = rows;
  j["ep_bytes"] = int64_t(ep_bytes[0]);
  j["ep_bytes_off_host"] = int64_t(ep_bytes[1]);
  j["ep_rows"] = int64_t(ep_bytes[2]);
  const std::string warning = collapse.update(s, step + 1);
  if (!warning.empty()) j["warning"] = warning;
  return j;
}

void Trainer::Run::eval_and_sample(int64_t step) {
  const bool last = step + 1 == cfg.schedule.steps;
  if (last || (cfg.eval_every > 0 && (step + 1) % cfg.eval_every == 0)) {
    const EvalResult e = evaluate(*part, *split->val, cfg, topo, b, A, runner);
    result.eval_loss = e.loss;
    result.eval_sequences = e.sequences;
    json rec = {{"step", step + 1}, {"eval_loss", e.loss}, {"eval_sequences", e.sequences},
                {"eval_tokens", e.tokens}};
    if (floor >= 0) rec["floor"] = floor;
    if (lead)
      out->record(rec, fmt("eval  step %lld | loss %s | %lld held-out sequences, %lld tokens",
                           (long long)(step + 1), floor_text(e.loss, floor).c_str(),
                           (long long)e.sequences, (long long)e.tokens));
  }
  model::GPT* whole = runner.whole_model();  // a pipeline stage has no whole model to sample
  if (cfg.sample_tokens > 0 && whole &&
      (last || (cfg.sample_every > 0 && (step + 1) % cfg.sample_every == 0))) {
    std::string text = sample_text(*whole, *split->val, cfg, step);
    if (lead) out->record({{"step", step + 1}, {"sample", text}}, "sample: " + text);
  }
}

// Activation recomputation (docs/recompute.md): the policy, this rank's activation bytes (the
// model's buffers; without pp and cp also the formula's, by buffer, as `strata plan --local
// --recompute` gives them), and what recomputing cost: FLOPs per step (the recomputed blocks'
// forward matmuls and attention under full; elementwise norm and GELU work under selective)
// and this rank's measured time.
json Trainer::Run::recompute_section(const model::StageModel& worker, int64_t steps) const {
  const model::GPTConfig& m = cfg.model;
  const cost::GptShape shape = model::gpt_shape(m);
  const int64_t tokens = int64_t(cfg.batch) * cfg.train_seq();  // one step, the whole job
  const double C = m.dim;
  // Selective: the two norms and, under fp32, a dense block's GELU/SwiGLU output (bf16 keeps
  // it; an MoE block's experts keep theirs), as the planner counts them; zero-bubble's weight
  // pass recomputes a second time.
  const cost::ElementwiseWork sel =
      cost::selective_recompute_per_token(C, m.hidden(), m.llama(), topo.precision == "bf16");
  const double passes = topo.pp > 1 && topo.schedule == "zb" ? 2 : 1;
  const double flops_per_token =
      passes * (m.recompute.mode == model::Recompute::full
                    ? double(shape.recomputed_layers) *
                          cost::block_forward_flops_per_token(C, T, m.heads, m.kv(), m.hidden(),
                                                              m.llama())
                    : double(m.layers) * sel.norm_ops +
                          double(m.layers - m.moe.moe_layers(m.layers)) * sel.act_ops);
  json j = {{"policy", cost::recompute_name(m.recompute.mode)},
            {"layers", m.recompute.mode == model::Recompute::full ? json(shape.recomputed_layers) : json()},
            {"inputs", m.recompute.bf16_inputs ? "bf16" : "fp32"},
            // the model's buffers (a GPT's include its copy of the inputs)
            {"activation_bytes", worker.activation_bytes()},
            {"flops_per_step", flops_per_token * double(tokens)},
            {"flops_kind", m.recompute.mode == model::Recompute::full ? "matmul and attention" : "elementwise"},
            {"seconds_per_step", steps > 0 ? double(worker.recompute_ns()) * 1e-9 / double(steps) : 0.0}};
  if (topo.pp == 1 && !topo.cp) {
    const int tp = topo.tp ? topo.tp->size() : 1, tp_rank = topo.tp ? topo.tp->rank() : 0;
    const bool sp = topo.tp && topo.tp->sequence_parallel();
    const cost::ActivationBuffers plan = cost::activation_buffers(
        shape, tp, sp, tp_rank, b, worker.compute() == DType::bf16, false);
    j["activation_bytes_plan"] = plan.total();
    for (const auto& [name, bytes] : plan.named()) j["buffers_plan"][name] = bytes;
  }
  return j;
}

// Under pure data parallelism at ZeRO 0 every rank holds the whole model and optimizer
// state, and they must be the same bits (each rank updates its copy from the same averaged
// gradients, with an update that rounds alike on every kernel path, kernels/isa.h): whether
// they are, by one 52-bit digest of every state per rank (one all-gather). nullopt where the
// ranks hold different shards (ZeRO 1-3, tp, cp, pp, ep) or run alone.
static std::optional<bool> replicas_identical(const Topology& topo, parallel::StepEngine& engine) {
  if (!topo.group || topo.group->size() <= 1 || engine.zero_stage() != 0 || topo.tp || topo.cp ||
      topo.outer.options.groups > 1 ||
      topo.ep || topo.pp != 1 || (topo.dp_world != 0 && topo.dp_world != topo.world))
    return std::nullopt;
  XXH3_state_t* st = XXH3_createState();
  XXH3_64bits_reset(st);
  for (const parallel::StateShard& sh : engine.state_shards())
    XXH3_64bits_update(st, sh.data, size_t(sh.end - sh.begin) * dtype_size(sh.dtype));
  const double mine = double(XXH3_64bits_digest(st) >> 12);  // exact in a double
  XXH3_freeState(st);
  std::vector<double> all(size_t(topo.group->size()));
  topo.group->all_gather(&mine, all.data(), 1, DType::f64);
  return std::all_of(all.begin(), all.end(), [&](double d) { return d == all[0]; });
}

// A run whose own model FLOP/s beat the peak says so, and re-measures a cached peak.
void Trainer::Run::note_peak_raised() {
  if (!lead || peak.raised_at <= 0) return;
  std::string cached;
  if (peak.origin != "flag") {
    // The old figure was probed under load: probe again now (about a second, only in a run
    // that proved the cache low) and keep the better of that and the run's own rate.
    const double fresh = peak.bf16_path.empty() ? measure_sgemm_gflops() : measure_bf16_gflops();
    record_peak(threads, std::max(fresh, peak.gflops), peak.bf16_path);
    cached = fmt("; a fresh probe reads %.1f GFLOP/s, and the cache now holds %.1f", fresh,
                 std::max(fresh, peak.gflops));
  }
  out->note(fmt("note: the run's own model FLOP/s beat the %s %s peak of %.1f GFLOP/s (a "
                "probe taken under load reads low): MFU is measured against %.1f GFLOP/s%s",
                peak.origin.c_str(), peak.kind.c_str(), peak.initial, peak.gflops, cached.c_str()));
}

// summary.json: the run's figures, then each part's section (collective: the runner's may
// communicate, and so may the replica check).
SummaryBuilder Trainer::Run::summary_of_run(double wall_s) {
  SummaryBuilder summary;
  summary.set_all({{"config", cfg.to_json()},
                   {"seed", cfg.seed},
                   {"data", split->train->describe()},
                   {"params", cfg.model.num_params()},        // the whole model
                   {"params_per_rank", part->num_params()},  // this rank's share (its tp slice of its stage)
                   {"steps", cfg.schedule.steps},
                   {"steps_trained", cfg.schedule.steps - start_step},  // by this attempt (0: resumed at the end)
                   {"accum", A},
                   {"world", topo.world},
                   {"dp_world", world},
                   {"threads", threads},
                   {"final_loss", result.losses.empty() ? json() : json(result.losses.back())},
                   {"eval_loss", result.eval_loss},
                   {"eval_sequences", result.eval_sequences},
                   {"entropy_floor", floor >= 0 ? json(floor) : json()},
                   {"median_tokens_per_s", result.median_tokens_per_s},
                   {"median_mfu", result.median_mfu},
                   {"median_ms", median(step_ms)},
                   {"flops_per_token", flops_per_token},
                   {"peak_gflops", peak.gflops},
                   {"peak_source", peak.source},
                   {"peak_raised_at", peak.raised_at},
                   {"peak_kind", peak.kind},
                   {"gemm", gemm},
                   {"kernels", kernel_paths.to_json()},
                   {"wall_s", wall_s},
                   {"data_wait_s", loader->wait_seconds()},
                   {"skipped_steps", guard.skips()},
                   {"rolled_back_steps", rollbacks},
                   {"mem_ckpt_bytes_per_rank", ckpt->mem_bytes()},
                   {"cpu_s", cpu_seconds_by_thread()},  // this rank's, by thread
                   {"memory", memory_tracker().to_json()}});
  if (floor >= 0) summary.set("eval_gap", result.eval_loss - floor);
  if (outer) summary.set("outer", outer_section());
  if (const std::optional<bool> same = replicas_identical(topo, *engine))
    summary.set("dp_replicas_identical", *same);
  if (topo.live.generation > 0 && lead) summary.set("live_recovery", live_recoveries(cfg.run_dir));
  if (cfg.model.recompute.mode != model::Recompute::none)
    summary.set("recompute", recompute_section(*part,
                                               cfg.schedule.steps - start_step));
  const json ck = ckpt->finish(median(step_ms) / 1e3, lead ? out.get() : nullptr);
  if (!ck.is_null()) summary.set("ckpt", ck);
  const json mem_ckpt = ckpt->mem_summary();
  if (!mem_ckpt.is_null()) summary.set("mem_ckpt", mem_ckpt);
  runner.summary_sections(summary);
  return summary;
}

// --replica-groups: the groups, their syncs and what crossed between them (every rank's
// payload summed; collective), and the global state each rank holds.
json Trainer::Run::outer_section() {
  const parallel::OuterOptions& o = topo.outer.options;
  const parallel::OuterSyncStats& s = outer->stats();
  const double bytes = topo.sum_across_ranks(double(s.bytes_sent));
  return {{"groups", o.groups},
          {"inner_steps", o.steps_per_sync()},
          {"outer_lr", o.lr},
          {"outer_momentum", o.momentum},
          {"group_data", parallel::group_data_name(o.data)},
          {"syncs", s.syncs},
          {"bytes", int64_t(bytes)},
          {"bytes_per_step", (cfg.schedule.steps - start_step) > 0 ? bytes / double(cfg.schedule.steps - start_step) : 0.0},
          {"state_bytes_per_rank", outer->state_bytes()},
          {"state_bytes_per_rank_plan",
           runner.outer_state_formula(o.overlap > 0, o.error_feedback && o.dtype != parallel::OuterDType::fp32)}};
}

void Trainer::Run::finish(double wall_s) {
  result.median_tokens_per_s = median(tok_s);
  result.median_mfu = median(mfus);
  note_peak_raised();
  result.wall_s = wall_s;
  SummaryBuilder summary = summary_of_run(wall_s);
  result.summary = summary.doc();
  if (!lead) return;
  const MemoryTracker& mt = memory_tracker();
  std::string mem;
  for (int c = 0; c < kNumMemCategories; ++c)
    mem += std::string(c ? ", " : "") + mem_category_name(MemCategory(c)) + " " +
           mib(mt.peak(MemCategory(c)));
  // A run resumed at its last step timed no step: it reports no throughput rather than 0.
  const std::string speed =
      start_step < cfg.schedule.steps
          ? fmt("median %.0f tok/s | MFU %.1f%% of %s peak %s | gemm %s | %.1f ms/step",
                result.median_tokens_per_s, 100 * result.median_mfu, peak.kind.c_str(),
                peak.label().c_str(), gemm.c_str(), median(step_ms))
          : fmt("no step trained in this attempt (resumed at step %lld)", (long long)start_step);
  out->summary(result.summary,
               fmt("done: %lld steps in %.1f s | final loss %.4f | eval loss %s\n%s\n"
                   "peak memory: %s; total %s%s",
                   (long long)cfg.schedule.steps, wall_s,
                   result.losses.empty() ? NAN : result.losses.back(),
                   floor_text(result.eval_loss, floor).c_str(), speed.c_str(), mem.c_str(),
                   mib(mt.peak_total()).c_str(), summary.text().c_str()));
}

// ---- the loop ------------------------------------------------------------------------------

Trainer::Trainer(TrainConfig cfg, Topology topo, std::unique_ptr<StepRunner> runner)
    : cfg_(std::move(cfg)), topo_(std::move(topo)), runner_(std::move(runner)) {
  if (!topo_.sum_across_ranks) topo_.sum_across_ranks = [](double x) { return x; };
  if (topo_.dp_world == 0) {
    topo_.dp_world = topo_.world;
    topo_.dp_rank = topo_.rank;
  }
  STRATA_CHECK(topo_.world > 0 && topo_.rank >= 0 && topo_.rank < topo_.world, "rank ",
               topo_.rank, " outside a world of ", topo_.world);
  STRATA_CHECK(runner_ != nullptr, "trainer needs a step runner");
}

Trainer::~Trainer() = default;

TrainResult Trainer::run() {
  Stopwatch wall;
  set_threads(cfg_.threads);
  cfg_.validate(topo_.dp_world);
  Run run(cfg_, topo_, *runner_);
  const int64_t steps = cfg_.schedule.steps;
  if (run.start_step >= steps) {
    // Resumed at the last step. If the attempt that trained it ended (summary.json written),
    // nothing was trained, so nothing is measured or evaluated, and summary.json keeps the
    // figures of the run that did the work. If it stopped after the last checkpoint (killed in
    // the final eval), the end is still owed: the final eval, sample and summary.
    // Rank 0 reads the run dir; every rank follows its answer (the eval is collective).
    const bool ended =
        run.topo.sum_across_ranks(run.lead && run.out->ended(steps) ? 1.0 : 0.0) > 0.5;
    if (ended) {
      if (run.lead)
        run.out->note(cat("strata train: nothing to do: the checkpoint is at step ", run.start_step,
                          " = --steps ", steps, " (raise --steps to train further)"));
      run.result.summary = {{"nothing_to_do", true}, {"steps", steps}};
      return std::move(run.result);
    }
    if (run.lead)
      run.out->note(cat("strata train: the checkpoint is at step ", run.start_step, " = --steps ",
                        steps, ", but the run did not end there (no summary.json of ", steps,
                        " steps): running its final eval and writing the summary"));
    run.eval_and_sample(steps - 1);
    current_phase().set(steps, -1, PhaseKind::idle);
    run.finish(wall.seconds());
    run.ckpt->require_good_checkpoint();
    return std::move(run.result);
  }
  if (run.lead) run.out->discard_summary();  // this attempt trains: the run has not ended
  for (int64_t step = run.start_step; step < steps; ++step) {
    run.train_step(step);
    if (run.rolled_back_to >= 0) {  // the run continues after the copy's step
      step = run.rolled_back_to - 1;
      run.rolled_back_to = -1;
      continue;
    }
    run.ckpt->after_step(step + 1, run.loader->state(), run.step_tokens, run.out.get());
    run.eval_and_sample(step);
    // Live recovery's rejoin, at a step whose in-memory copy is what the larger world loads;
    // under --replica-groups at the end of a round (a group joins from the outer sync's θ).
    const int64_t every = cfg_.ckpt.mem_every;
    const int64_t round = topo_.outer.options.groups > 1 ? topo_.outer.options.steps_per_sync() : 1;
    if (topo_.world_changes && every > 0 && (step + 1) % every == 0 && (step + 1) % round == 0 &&
        step + 1 < steps && topo_.world_changes())
      throw WorldChange(step + 1);
  }
  current_phase().set(cfg_.schedule.steps, -1, PhaseKind::idle);
  run.finish(wall.seconds());
  run.ckpt->require_good_checkpoint();
  return std::move(run.result);
}

}  // namespace strata::train
