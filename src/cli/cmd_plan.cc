// `strata plan`: will a model fit on a cluster, how to lay it out, how fast, how often to
// checkpoint. Flags build a plan::PlanRequest; the planner library does the rest.
#include <cmath>
#include <cstdio>
#include <iostream>
#include <limits>

#include "cli/command.h"
#include "cli/run_config.h"
#include "core/error.h"
#include "cost/activations.h"
#include "cost/comm.h"
#include "cost/shapes.h"
#include "model/context/layout.h"
#include "model/gpt.h"
#include "model/shard.h"
#include "nlohmann/json.hpp"
#include "parallel/pipeline/schedule.h"
#include "plan/planner.h"
#include "train/run_spec.h"

namespace strata::cli {

void add_plan_calibrate(CLI::App& plan);  // cmd_plan_calibrate.cc

namespace {

using namespace strata::plan;

// "2T", "300B", "15.6e12", "4M" -> a count.
double parse_count(const std::string& flag, const std::string& s) {
  size_t used = 0;
  double x = 0;
  try {
    x = std::stod(s, &used);
  } catch (const std::exception&) {
    fail(flag, " '", s, "' is not a number (e.g. 300B, 2T, 1.5e12)");
  }
  std::string suffix = s.substr(used);
  double mult = 1;
  if (suffix == "K" || suffix == "k")
    mult = 1e3;
  else if (suffix == "M")
    mult = 1e6;
  else if (suffix == "B" || suffix == "G")
    mult = 1e9;
  else if (suffix == "T")
    mult = 1e12;
  else if (!suffix.empty())
    fail(flag, " '", s, "': unknown suffix '", suffix, "' (K, M, B, T)");
  STRATA_CHECK(x >= 0 && std::isfinite(x), flag, " must not be negative (got ", s, ")");
  return x * mult;
}

struct Flags {
  std::string model, arch = "gpt", gpu = "h100-80g", intra_bench, inter_bench, critic;
  int64_t layers = 0, hidden = 0, heads = 0, kv_heads = 0, ffn = 0, seq = 0, vocab = 0;
  int64_t experts = 0, top_k = 0;
  int64_t gpus = 0, gpus_per_node = 0, global_batch = 0;
  int tp = 0, pp = 0, dp = 0, cp = 0, ep = 0, zero = 0, micro_batch = 0;
  std::string recompute, precision = "bf16", grad_precision, optimizer = "adamw", tokens;
  std::string cp_mode = "ring", schedule = "1f1b";
  int virtual_stages = 1;
  int64_t micro_batches = 0;
  bool no_sp = false, json = false, rlhf = false, local = false;
  int accum = 1, moe_every = 1;
  int64_t max_seq = 0;
  double headroom = 0.10, efficiency = 0, bucket_mb = 25, overlap = 1.0;
  double gpu_mtbf_h = 50000, job_mtbf_h = 0, storage_gbps = 50, restart_min = 10, stall_s = -1;
  int64_t rollout_batch = 8;
  int top = 10;
};

ModelSpec build_model(const Flags& f, const CLI::App& app) {
  ModelSpec m;
  const bool preset = !f.model.empty();
  if (preset) {
    m = model_preset(f.model);
    if (app.count("--arch")) apply_arch(m, f.arch);
  } else {
    for (const char* k : {"--layers", "--hidden", "--heads", "--seq", "--vocab"})
      STRATA_CHECK(
          app.count(k), "give --model PRESET (",
          [] {
            std::string n;
            for (const std::string& x : model_preset_names()) n += (n.empty() ? "" : ", ") + x;
            return n;
          }(),
          ") or --layers, --hidden, --heads, --seq and --vocab (missing ", k, ")");
    apply_arch(m, f.arch);
    m.name = "custom";
  }
  auto set = [&](const char* flag, int64_t v, int64_t& field) {
    if (app.count(flag)) field = v;
  };
  set("--layers", f.layers, m.layers);
  set("--hidden", f.hidden, m.hidden);
  set("--heads", f.heads, m.heads);
  set("--seq", f.seq, m.seq);
  set("--vocab", f.vocab, m.vocab);
  set("--experts", f.experts, m.experts);
  set("--top-k", f.top_k, m.top_k);
  if (!preset) {
    m.kv_heads = m.heads;
    m.ffn = m.mlp == MlpKind::swiglu ? (8 * m.hidden / 3 + 255) / 256 * 256 : 4 * m.hidden;
  }
  set("--kv-heads", f.kv_heads, m.kv_heads);
  set("--ffn", f.ffn, m.ffn);
  if (m.experts > 0 && m.top_k == 0) m.top_k = std::min<int64_t>(2, m.experts);
  if (preset && (app.count("--layers") || app.count("--hidden") || app.count("--heads") ||
                 app.count("--ffn") || app.count("--experts")))
    m.name += " (modified)";
  m.validate();
  return m;
}

GpuSpec build_gpu(const Flags& f, const CLI::App& app, std::vector<std::string>& notes) {
  GpuSpec g = load_gpu(f.gpu);
  if (app.count("--gpus-per-node")) {
    STRATA_CHECK(f.gpus_per_node >= 1 && f.gpus_per_node <= (int64_t(1) << 24),
                 "--gpus-per-node must be in [1, 2^24] (got ", f.gpus_per_node, ")");
    g.gpus_per_node = int(f.gpus_per_node);
  }
  if (app.count("--efficiency")) {
    STRATA_CHECK(f.efficiency > 0 && f.efficiency <= 1, "--efficiency must be in (0, 1]");
    g.efficiency = f.efficiency;
  }
  auto fit = [&](const std::string& path, Link& link, const char* where) {
    FittedLink fl = fit_link_from_bench(path);
    link = fl.link;
    char b[256];
    std::snprintf(b, sizeof b, "%s link from %s: %d %s rows on %d ranks -> %.1f GB/s, %.2f us/step",
                  where, path.c_str(), fl.rows, fl.op.c_str(), fl.ranks, link.gbps, link.alpha_us);
    notes.push_back(b);
  };
  if (!f.intra_bench.empty()) fit(f.intra_bench, g.intra, "intra-node");
  if (!f.inter_bench.empty()) fit(f.inter_bench, g.inter, "inter-node");
  g.validate("--gpu " + f.gpu);
  return g;
}

// `strata plan --local`: a strata run on this machine (`strata train --tp T --dp D --zero S
// --precision P --micro-batch b --seq s`): per tp rank, the model states, the model's
// activation buffers and the tensor-parallel bytes per step, from the cost models the
// training summary prints its prediction with (cost/).
void run_local(const Flags& f, const CLI::App& app) {
  model::GPTConfig g = model::GPTConfig::preset(f.model.empty() ? "tiny" : f.model);
  if (app.count("--layers")) g.layers = int(f.layers);
  if (app.count("--hidden")) g.dim = int(f.hidden);
  if (app.count("--heads")) g.heads = int(f.heads);
  if (app.count("--vocab")) g.vocab = int(f.vocab), g.padded_vocab = int((f.vocab + 63) / 64 * 64);
  if (app.count("--max-seq")) g.seq = int(f.max_seq);
  if (app.count("--experts")) {  // docs/moe.md
    g.moe.experts = int(f.experts);
    g.moe.top_k = app.count("--top-k") ? int(f.top_k) : 2;
    g.moe.every = f.moe_every;
  }
  g.validate();
  const int tp = app.count("--tp") ? f.tp : 1, dp = app.count("--dp") ? f.dp : 1;
  const int ep = app.count("--ep") ? f.ep : 1;
  const int stage = app.count("--zero") ? f.zero : 0;
  const int64_t seq = app.count("--seq") ? f.seq : g.seq;
  const int64_t b = app.count("--micro-batch") ? f.micro_batch : 1;
  STRATA_CHECK(dp >= 1, "--dp must be at least 1 (got ", dp, ")");
  STRATA_CHECK(seq >= 1 && seq <= g.seq, "--seq ", seq, " outside [1, ", g.seq, "]");
  STRATA_CHECK(b >= 1 && f.accum >= 1, "--micro-batch and --accum must be at least 1");
  STRATA_CHECK(b <= std::numeric_limits<int>::max(), "--micro-batch ", b, " is past ",
               std::numeric_limits<int>::max(), " sequences");
  const int cp = app.count("--cp") ? f.cp : 1;
  const model::CpMode cpm = model::parse_cp_mode(f.cp_mode);
  // The layout `strata train` would run, checked as train checks it (train/run_spec.h).
  parallel::ParallelLayout layout;
  layout.tp = tp, layout.cp = cp, layout.dp = dp, layout.ep = ep, layout.zero = stage;
  layout.micro_batch = int(b);
  layout.sequence_parallel = !f.no_sp;
  layout.cp_options = {cpm, model::CpChunks::zigzag};
  train::check_layout(g, int(seq), b * f.accum * dp, layout);
  const Precision p = f.precision == "fp32" ? Precision::fp32 : Precision::bf16;
  const cost::GptShape m = model::gpt_shape(g);
  nlohmann::json ranks = nlohmann::json::array();
  std::string text = cat("strata run: ", f.model.empty() ? "tiny" : f.model, ", tp ", tp,
                         cp > 1 ? cat(" x cp ", cp, " (", f.cp_mode, ")") : "", " x dp ",
                         dp, ", zero ", stage, ", ", f.precision, tp > 1 && !f.no_sp ? ", sp" : "",
                         ", micro-batch ", b, " x seq ", seq, " x accum ", f.accum, "\n");
  // Context parallelism: 1/cp of each sequence per rank, ZeRO over dp x cp, ring or Ulysses
  // bytes (cost/comm.h).
  const bool ring = cpm == model::CpMode::ring;
  const int64_t cp_bytes = f.accum * cost::cp_bytes_per_micro(ring, cp, g.layers, b, seq, g.dim / tp);
  // MoE: dense parameters over dp x cp, the rank's E/ep experts over the dp x cp / ep ranks
  // that hold them (parallel/region.h); gradient reductions move both once per step (ZeRO
  // 0-1) or per micro-batch (2-3).
  const int64_t experts = model::expert_params(g, ep, tp);
  for (int r = 0; r < tp; ++r) {
    const int64_t psi = model::local_num_params(g, {tp, r}, {ep, 0});  // MoE blocks included
    const ModelStateBytes st =
        moe_model_state_bytes(psi - experts, dp * cp, experts, dp * cp / ep, stage, p);
    const int64_t reduce =
        grad_reduce_bytes_per_step(psi - experts, dp * cp, stage, f.accum, p) +
        grad_reduce_bytes_per_step(experts, dp * cp / ep, stage, f.accum, p);
    const int64_t acts =
        cp > 1 ? cost::cp_activation_bytes(m, tp, !f.no_sp, r, b, p == Precision::bf16, ring, cp, seq)
               : cost::tp_activation_bytes(m, tp, !f.no_sp, r, b, p == Precision::bf16);
    const int64_t bytes = f.accum * cost::tp_comm_bytes_per_micro(m, tp, !f.no_sp, b, seq / cp);
    ranks.push_back({{"tp_rank", r}, {"params", psi}, {"expert_params", experts},
                     {"grad_reduce_bytes_per_step", reduce}, {"parameters", st.parameters},
                     {"gradients", st.gradients}, {"optimizer", st.optimizer},
                     {"model_states", st.total()}, {"activations", acts},
                     {"tp_bytes_per_step", bytes}, {"cp_bytes_per_step", cp_bytes}});
    text += cat("tp rank ", r, ": ", psi, " params; model states ", st.total(), " B (parameters ",
                st.parameters, ", gradients ", st.gradients, ", optimizer ", st.optimizer,
                "); activations ", acts, " B; tp bytes per step ", bytes,
                "; gradient reduce bytes per step ", reduce,
                experts > 0 ? cat(" (experts ", experts, " params over ", dp * cp / ep,
                                  " edp rank(s): ",
                                  grad_reduce_bytes_per_step(experts, dp * cp / ep, stage,
                                                             f.accum, p),
                                  ")")
                            : "",
                cp > 1 ? cat("; cp bytes per step ", cp_bytes) : "", "\n");
  }
  // Dropless routing: every assignment crosses the ep group (cost/comm.h).
  const int64_t ep_bytes = f.accum * cost::ep_group_bytes_per_micro(m, ep, b * seq);
  if (g.moe.enabled())
    text += cat("MoE: ", g.moe.experts, " experts, top-", g.moe.top_k, ", every ", g.moe.every,
                " block(s), ep ", ep, ": all-to-all bytes per step per ep group (dropless; at "
                "most this with a capacity factor) ", ep_bytes, "\n");
  if (f.json)
    std::cout << nlohmann::json{{"tp", tp},     {"cp", cp},       {"dp", dp},
                                {"zero", stage}, {"ranks", ranks}, {"ep", ep},
                                {"ep_bytes_per_step_per_group", ep_bytes}}
                     .dump(2)
              << "\n";
  else
    std::cout << text;
}

void run(const Flags& f, const CLI::App& app) {
  if (f.local) return run_local(f, app);
  PlanRequest req;
  TrainSetup& s = req.setup;
  s.model = build_model(f, app);
  s.gpu = build_gpu(f, app, req.notes);
  s.gpus = app.count("--gpus") ? f.gpus : s.gpu.gpus_per_node;
  STRATA_CHECK(s.gpus >= 1 && s.gpus <= (int64_t(1) << 24), "--gpus must be in [1, 2^24] (got ",
               s.gpus, ")");
  STRATA_CHECK(f.precision == "bf16" || f.precision == "fp32", "--precision '", f.precision,
               "' is not known (bf16, fp32)");
  s.precision = f.precision == "bf16" ? Precision::bf16 : Precision::fp32;
  STRATA_CHECK(f.grad_precision.empty() || f.grad_precision == "bf16" || f.grad_precision == "fp32",
               "--grad-precision '", f.grad_precision, "' is not known (bf16, fp32)");
  STRATA_CHECK(!(s.precision == Precision::fp32 && f.grad_precision == "bf16"),
               "--grad-precision bf16 needs --precision bf16");
  s.fp32_grads = f.grad_precision == "fp32";
  STRATA_CHECK(f.optimizer == "adamw" || f.optimizer == "sgd", "--optimizer '", f.optimizer,
               "' is not known (adamw, sgd)");
  s.optimizer = f.optimizer == "adamw" ? Optimizer::adamw : Optimizer::sgd;
  s.seq_parallel = !f.no_sp;
  STRATA_CHECK(f.cp_mode == "ring" || f.cp_mode == "ulysses", "--cp-mode '", f.cp_mode,
               "' is not known (ring, ulysses)");
  s.cp_mode = f.cp_mode == "ring" ? CpMode::ring : CpMode::ulysses;
  STRATA_CHECK(f.headroom >= 0 && f.headroom < 1, "--headroom must be in [0, 1)");
  s.headroom = f.headroom;
  STRATA_CHECK(f.bucket_mb > 0, "--bucket-mb must be positive");
  s.bucket_mib = f.bucket_mb;
  STRATA_CHECK(f.overlap >= 0 && f.overlap <= 1, "--overlap must be in [0, 1] (got ", f.overlap,
               ")");
  s.overlap = f.overlap;
  s.schedule = parallel::pipeline::parse_schedule(f.schedule);
  s.virtual_stages = f.virtual_stages;
  if (app.count("--micro-batches")) {
    STRATA_CHECK(f.micro_batches >= 1 && f.micro_batches <= (int64_t(1) << 31),
                 "--micro-batches must be in [1, 2^31] (got ", f.micro_batches, ")");
    s.micro_batches = f.micro_batches;
  }
  if (app.count("--global-batch"))
    // Below 2^31: the schedule's micro-batch count is an int (2^31 read as -2147483648).
    STRATA_CHECK(f.global_batch > 0 && f.global_batch < (int64_t(1) << 31),
                 "--global-batch must be in [1, 2^31) sequences (got ", f.global_batch, ")");
  s.global_batch = app.count("--global-batch") ? f.global_batch : s.model.global_batch;
  STRATA_CHECK(f.rlhf || s.global_batch > 0,
               "--global-batch is needed (sequences per step; this model has no published one)");

  FixedLayout& fx = req.fixed;
  if (app.count("--tp")) fx.tp = f.tp;
  if (app.count("--pp")) fx.pp = f.pp;
  if (app.count("--dp")) fx.dp = f.dp;
  if (app.count("--cp")) fx.cp = f.cp;
  if (app.count("--ep")) fx.ep = f.ep;
  if (app.count("--zero")) fx.zero = f.zero;
  if (app.count("--micro-batch")) fx.micro_batch = f.micro_batch;
  if (app.count("--recompute")) fx.recompute = parse_recompute(f.recompute);

  req.train_tokens =
      app.count("--tokens") ? parse_count("--tokens", f.tokens) : s.model.train_tokens;
  STRATA_CHECK(f.top >= 1, "--top must be at least 1");
  req.top = f.top;
  // Reliability inputs: finite and within a century / a petabyte per second, so every
  // interval and percentage printed is a number.
  constexpr double kCenturyH = 100 * 365.25 * 24;
  auto in_range = [](double v, double lo, double hi) {
    return std::isfinite(v) && v >= lo && v <= hi;
  };
  STRATA_CHECK(in_range(f.gpu_mtbf_h, 1e-6, 1e9) && f.gpu_mtbf_h > 0,
               "--gpu-mtbf-hours must be in (0, 1e9] (got ", f.gpu_mtbf_h, ")");
  STRATA_CHECK(in_range(f.job_mtbf_h, 0, kCenturyH), "--job-mtbf-hours must be in [0, ", kCenturyH,
               "] (got ", f.job_mtbf_h, ")");
  STRATA_CHECK(in_range(f.storage_gbps, 1e-6, 1e6), "--storage-gbps must be in (0, 1e6] (got ",
               f.storage_gbps, ")");
  STRATA_CHECK(in_range(f.restart_min, 0, kCenturyH * 60), "--restart-min must be in [0, ",
               kCenturyH * 60, "] (got ", f.restart_min, ")");
  if (app.count("--ckpt-stall-s"))
    STRATA_CHECK(in_range(f.stall_s, 0, kCenturyH * 3600), "--ckpt-stall-s must be in [0, ",
                 kCenturyH * 3600, "] seconds (got ", f.stall_s, ")");
  STRATA_CHECK(in_range(f.bucket_mb, 1e-6, 1 << 20), "--bucket-mb must be in (0, 2^20] (got ",
               f.bucket_mb, ")");
  STRATA_CHECK(!app.count("--rollout-batch") ||
                   (f.rollout_batch >= 1 && f.rollout_batch <= (int64_t(1) << 31)),
               "--rollout-batch must be in [1, 2^31] (got ", f.rollout_batch, ")");
  STRATA_CHECK(req.train_tokens >= 0 && req.train_tokens <= 1e18,
               "--tokens must be at most 1e18 (got ", req.train_tokens, ")");
  req.gpu_mtbf_hours = f.gpu_mtbf_h;
  req.job_mtbf_hours = f.job_mtbf_h;
  req.storage_gbps = f.storage_gbps;
  req.restart_minutes = f.restart_min;
  req.ckpt_stall_s = f.stall_s;

  if (f.rlhf) {
    RlhfSetup r;
    r.actor = s.model;
    r.critic = f.critic.empty() ? s.model : model_preset(f.critic);
    if (!f.critic.empty() && app.count("--seq")) r.critic.seq = s.model.seq;
    r.gpu = s.gpu;
    r.gpus = s.gpus;
    r.tp = fx.tp.value_or(1);
    r.zero = fx.zero.value_or(3);
    r.precision = s.precision;
    r.fp32_grads = s.fp32_grads;
    r.optimizer = s.optimizer;
    r.micro_batch = fx.micro_batch.value_or(1);
    r.recompute = fx.recompute.value_or(Recompute::full);
    r.rollout_batch = f.rollout_batch;
    r.headroom = s.headroom;
    r.seq_parallel = s.seq_parallel;
    STRATA_CHECK(!fx.pp && !fx.cp && !fx.ep && !fx.dp,
                 "--rlhf plans tp and ZeRO over the data ranks only (no --pp, --cp, --ep, --dp)");
    req.rlhf = r;
  }

  PlanResult res = run_plan(req);
  if (f.json)
    std::cout << plan_to_json(req, res).dump(2) << "\n";
  else
    std::cout << plan_to_text(req, res);
  if (!res.fits()) throw ExitCode{3};
}

static Register reg(
    "plan", "Plan memory, layout, speed and checkpoints for a cluster", [](CLI::App& app) {
      auto f = std::make_shared<Flags>();
      app.add_option("--model", f->model,
                     "Model preset: gpt2, gpt3-175b, llama2-7b, llama2-70b, "
                     "llama3-405b, mixtral-8x7b");
      app.add_option("--arch", f->arch,
                     "Layer style for explicit shapes: gpt (GELU, LayerNorm, "
                     "biases, tied) or llama (SwiGLU, RMSNorm, untied)");
      app.add_option("--layers", f->layers, "Transformer layers");
      app.add_option("--hidden", f->hidden, "Hidden size");
      app.add_option("--heads", f->heads, "Attention heads");
      app.add_option("--kv-heads", f->kv_heads,
                     "KV heads (grouped-query attention; default: heads)");
      app.add_option("--ffn", f->ffn, "MLP width (default 4h for gpt, ~8h/3 for llama)");
      app.add_option("--seq", f->seq, "Sequence length");
      app.add_option("--vocab", f->vocab, "Vocabulary (padded to a multiple of 64)");
      app.add_option("--experts", f->experts, "MoE experts per layer (0: dense)");
      app.add_option("--top-k", f->top_k, "Experts per token (default 2)");
      app.add_option("--gpu", f->gpu,
                     "GPU preset (a100-40g, a100-80g, h100-80g, h200) or FILE.json");
      app.add_option("--gpus", f->gpus, "GPUs in the cluster (default: one node)");
      app.add_option("--gpus-per-node", f->gpus_per_node, "GPUs per node (default: the GPU's)");
      app.add_option("--intra-bench", f->intra_bench,
                     "Fit the intra-node link from `strata bench comm --json` output")
          ->check(plain_path(false));
      app.add_option("--inter-bench", f->inter_bench,
                     "Fit the inter-node link from `strata bench comm --json` output")
          ->check(plain_path(false));
      app.add_option("--global-batch", f->global_batch, "Sequences per optimizer step");
      app.add_option("--micro-batch", f->micro_batch, "Fix the micro-batch (sequences)");
      app.add_option("--precision", f->precision, "bf16 (fp32 master weights) or fp32");
      app.add_option("--grad-precision", f->grad_precision, "Gradients in bf16 (default) or fp32");
      app.add_option("--optimizer", f->optimizer, "adamw or sgd (momentum)");
      app.add_option("--tokens", f->tokens, "Training tokens for days-to-train (e.g. 2T, 300B)");
      app.add_option("--tp", f->tp, "Fix tensor parallelism");
      app.add_option("--pp", f->pp, "Fix pipeline parallelism");
      app.add_option("--dp", f->dp, "Fix data parallelism");
      app.add_option("--cp", f->cp, "Fix context parallelism");
      app.add_option("--ep", f->ep, "Fix expert parallelism");
      app.add_option("--zero", f->zero, "Fix the ZeRO stage (0-3)");
      app.add_option("--recompute", f->recompute, "Fix recomputation: none, selective, full");
      app.add_option("--schedule", f->schedule,
                     "Pipeline schedule: gpipe, 1f1b (default), interleaved, zb");
      app.add_option("--virtual-stages", f->virtual_stages,
                     "Model chunks per pipeline stage (--schedule interleaved)");
      app.add_option("--micro-batches", f->micro_batches,
                     "Fix the micro-batches per step (global batch / (dp x micro-batch))");
      app.add_flag("--no-sp", f->no_sp, "No sequence parallelism with tensor parallelism");
      app.add_option("--cp-mode", f->cp_mode, "Context parallelism: ring or ulysses");
      app.add_option("--headroom", f->headroom,
                     "Fraction of device memory kept free (default 0.10)");
      app.add_option("--efficiency", f->efficiency, "Sustained fraction of peak FLOP/s on matmuls");
      app.add_option("--overlap", f->overlap,
                     "Fraction of compute that data-parallel, ZeRO and "
                     "ring-attention traffic hides behind (default 1)");
      app.add_option("--bucket-mb", f->bucket_mb,
                     "ZeRO-1/2 reduce-scatter bucket, MiB (default 25)");
      app.add_option("--gpu-mtbf-hours", f->gpu_mtbf_h,
                     "Mean time between failures of one GPU "
                     "(default 50000 h)");
      app.add_option("--job-mtbf-hours", f->job_mtbf_h,
                     "Mean time between failures of the job "
                     "(overrides --gpu-mtbf-hours)");
      app.add_option("--storage-gbps", f->storage_gbps,
                     "Aggregate checkpoint write bandwidth, GB/s");
      app.add_option("--restart-min", f->restart_min, "Minutes to detect, restart and reload");
      app.add_option("--ckpt-stall-s", f->stall_s, "Stall per checkpoint if not the whole write");
      app.add_flag("--rlhf", f->rlhf,
                   "PPO memory per GPU: actor + critic trained, reference + "
                   "reward frozen, generation KV cache");
      app.add_option("--critic", f->critic,
                     "Critic/reward model preset for --rlhf (default: actor)");
      app.add_option("--rollout-batch", f->rollout_batch, "Sequences each GPU generates (--rlhf)");
      app.add_option("--top", f->top, "Layouts shown in the ranking (default 10)");
      app.add_flag("--json", f->json, "Print JSON instead of tables");
      app.add_flag("--local", f->local,
                   "Plan a strata run on this machine (--model tiny|small|gpt2, --tp, --dp, "
                   "--zero, --precision, --micro-batch, --seq, --accum, --no-sp): per-rank "
                   "memory and tensor-parallel bytes, as the run's summary.json reports them");
      app.add_option("--max-seq", f->max_seq, "Position table rows of the model (--local)");
      app.add_option("--accum", f->accum, "Accumulation steps per optimizer step (--local)");
      app.add_option("--moe-every", f->moe_every, "Every N-th block is an MoE block (--local)");
      add_plan_calibrate(app);
      RunConfigFlags& config = add_run_config(app, "plan");
      app.callback([f, &app, &config] {
        if (app.got_subcommand("calibrate")) return;
            if (config.print) {
          std::cout << resolved_config(app, "plan");
          return;
        }
        run(*f, app);
      });
    });

}  // namespace
}  // namespace strata::cli
