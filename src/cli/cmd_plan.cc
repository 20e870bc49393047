// `strata plan`: will a model fit on a cluster, how to lay it out, how fast, how often to
// checkpoint. Flags build a plan::PlanRequest; the planner library does the rest.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <limits>

#include "cli/command.h"
#include "cli/flags/metrics.h"
#include "cli/flags/model.h"
#include "cli/flags/outer.h"
#include "cli/flags/parallel.h"
#include "cli/flags/training.h"
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
#include "plan/request.h"
#include "train/run_spec.h"

namespace strata::cli {

void add_plan_calibrate(CLI::App& plan);  // cmd_plan_calibrate.cc

namespace {

using namespace strata::plan;

// strata plan's flags: the families it shares with `strata train` (a flag not given stays
// unset: the preset, the GPU or the search supplies it), the planner's own arguments
// (plan/request.h), and what only the command line has, --json and --local's run on this
// machine.
struct Flags {
  ModelFlags model;
  TrainingFlags training;
  ParallelFlags parallel;
  MetricsFlags metrics;
  OuterFlags outer;
  double link_share = 0.1;
  PlanArgs args;  // filled from the families after parsing, and by the planner's own flags
  bool local = false;
  int accum = 1;
  // The spellings of an earlier release: --hidden (--dim), --global-batch (--batch), --arch gpt.
  int64_t hidden = 0, global_batch = 0;
  bool json() const { return metrics.json; }
};

// The model, batch and layout the family flags give, as the planner's arguments: set where
// a flag (or a config key) was given, unset otherwise.
void fill_args(const CLI::App& app, Flags& f) {
  PlanArgs& a = f.args;
  auto given = [&app](const char* flag) { return app.count(flag) > 0; };
  const ModelFlags& m = f.model;
  if (given("--model")) a.model = m.model;
  if (given("--arch")) a.arch = m.arch;
  if (given("--layers")) a.layers = m.layers;
  if (given("--dim")) a.hidden = m.dim;
  if (given("--hidden")) a.hidden = f.hidden;
  if (given("--heads")) a.heads = m.heads;
  if (given("--kv-heads")) a.kv_heads = m.kv_heads;
  if (given("--ffn")) a.ffn = m.ffn;
  if (given("--vocab")) a.vocab = m.vocab;
  if (given("--experts")) a.experts = m.moe.experts;
  if (given("--top-k")) a.top_k = m.moe.top_k;
  if (given("--expert-ffn")) a.expert_ffn = m.moe.expert_ffn;
  if (given("--shared-experts")) a.shared_experts = m.moe.shared_experts;
  if (given("--route-groups")) a.route_groups = m.moe.route_groups;
  if (given("--route-max-groups")) a.route_max_groups = m.moe.route_max_groups;
  const TrainingFlags& t = f.training;
  if (given("--seq")) a.seq = t.seq;
  if (given("--batch")) a.global_batch = t.batch;
  if (given("--global-batch")) a.global_batch = f.global_batch;
  if (given("--micro-batch")) a.micro_batch = t.micro_batch;
  if (given("--precision")) a.precision = t.precision;
  if (given("--recompute")) a.recompute = t.recompute;
  const ParallelFlags& p = f.parallel;
  const parallel::MeshDims& mesh = p.parallel.mesh;
  if (given("--tp")) a.tp = mesh.tp;
  if (given("--pp")) a.pp = mesh.pp;
  if (given("--dp")) a.dp = mesh.dp;
  if (given("--cp")) a.cp = mesh.cp;
  if (given("--ep")) a.ep = mesh.ep;
  if (given("--zero")) a.zero = parallel::parse_zero_stage(p.zero);
  if (given("--schedule")) a.schedule = p.schedule;
  if (given("--virtual-stages")) a.virtual_stages = p.parallel.pipeline.virt;
  if (given("--micro-batches")) a.micro_batches = p.parallel.pipeline.micro;
  if (given("--cp-mode")) a.cp_mode = p.cp_mode;
  if (given("--bucket-mb")) a.bucket_mb = p.parallel.dp.bucket_mb;
  a.no_sp = !p.parallel.sequence_parallel;
}

// The planner names the width --hidden and the batch --global-batch; a user who typed train's
// names reads them (and the old spellings, one release on, a note).
struct Spelling {
  const char* typed;
  const char* planner;
};
constexpr Spelling kNewNames[] = {{"--dim", "--hidden"}, {"--batch", "--global-batch"}};

std::string as_typed(const CLI::App& app, std::string message) {
  for (const Spelling& s : kNewNames) {
    if (!app.count(s.typed)) continue;
    const std::string from = s.planner, to = s.typed;
    for (size_t at = message.find(from); at != std::string::npos; at = message.find(from, at + to.size()))
      message.replace(at, from.size(), to);
  }
  return message;
}

void deprecation_notes(const CLI::App& app, const Flags& f) {
  if (app.count("--hidden")) std::cerr << "note: --hidden is now --dim, as strata train names it\n";
  if (app.count("--global-batch")) std::cerr << "note: --global-batch is now --batch, as strata train names it\n";
  if (app.count("--arch") && f.model.arch == "gpt") std::cerr << "note: --arch gpt is now --arch gpt2\n";
}

// The model of a --local plan, as `strata train` builds it from the same flags.
model::GPTConfig local_model(const Flags& f, const CLI::App& app) {
  const PlanArgs& a = f.args;
  model::GPTConfig g = model::GPTConfig::preset(a.model.empty() ? "tiny" : a.model);
  if (a.layers) g.layers = int(*a.layers);
  if (a.hidden) g.dim = int(*a.hidden);
  if (a.heads) g.heads = int(*a.heads);
  if (a.arch && model::parse_arch(*a.arch == "gpt" ? "gpt2" : *a.arch) == model::Arch::llama &&
      !g.llama()) {
    g.arch = model::Arch::llama;  // a GPT preset's sizes with Llama blocks, as train --arch
    g.tie_embeddings = false;
  }
  if (a.kv_heads) g.kv_heads = int(*a.kv_heads);
  if (a.ffn) g.ffn = int(*a.ffn);
  if (a.vocab) g.vocab = int(*a.vocab), g.padded_vocab = int(model::padded_vocab(*a.vocab));
  if (app.count("--max-seq")) g.seq = f.model.max_seq;
  if (a.experts) {  // docs/moe.md
    g.moe.experts = int(*a.experts);
    g.moe.top_k = a.top_k ? int(*a.top_k) : 2;
    g.moe.every = f.model.moe.every;
  }
  // Fine-grained and shared experts; without --experts MoEConfig::validate refuses them.
  STRATA_CHECK(!a.expert_ffn || *a.expert_ffn > 0, "--expert-ffn must be positive (got ",
               a.expert_ffn.value_or(0), ")");
  if (a.expert_ffn) g.moe.expert_ffn = int(*a.expert_ffn);
  if (a.shared_experts) g.moe.shared_experts = int(*a.shared_experts);
  // Node-limited routing; MoEConfig::validate checks the pair.
  if (a.route_groups) g.moe.route_groups = int(*a.route_groups);
  if (a.route_max_groups) g.moe.route_max_groups = int(*a.route_max_groups);
  // --recompute as `strata train --recompute` takes it (the search's default is full; a
  // local run's is none).
  g.recompute = {model::parse_recompute_mode(a.recompute.value_or("none")), f.training.recompute_layers,
                 model::parse_recompute_inputs(f.training.recompute_inputs)};
  STRATA_CHECK(!g.recompute.bf16_inputs || a.precision == "bf16",
               "--recompute-inputs bf16 needs --precision bf16 (under fp32 every activation is fp32)");
  g.validate();
  return g;
}

// The layout of a --local plan, checked as `strata train` checks it (train/run_spec.h).
struct LocalRun {
  parallel::ParallelLayout layout;
  int64_t seq = 0;
};

LocalRun local_run(const Flags& f, const model::GPTConfig& g) {
  const PlanArgs& a = f.args;
  const int tp = a.tp.value_or(1), dp = a.dp.value_or(1);
  const int ep = a.ep.value_or(1);
  const int stage = a.zero.value_or(0);
  const int64_t seq = a.seq.value_or(g.seq);
  const int64_t b = a.micro_batch.value_or(1);
  STRATA_CHECK(dp >= 1, "--dp must be at least 1 (got ", dp, ")");
  STRATA_CHECK(seq >= 1 && seq <= g.seq, "--seq ", seq, " outside [1, ", g.seq, "]");
  STRATA_CHECK(b >= 1 && f.accum >= 1, "--micro-batch and --accum must be at least 1");
  STRATA_CHECK(b <= std::numeric_limits<int>::max(), "--micro-batch ", b, " is past ",
               std::numeric_limits<int>::max(), " sequences");
  const int cp = a.cp.value_or(1);
  const model::CpMode cpm = model::parse_cp_mode(a.cp_mode);
  // The layout `strata train` would run, checked as train checks it (train/run_spec.h).
  parallel::ParallelLayout layout;
  layout.tp = tp, layout.cp = cp, layout.dp = dp, layout.ep = ep, layout.zero = stage;
  layout.micro_batch = int(b);
  layout.sequence_parallel = !a.no_sp;
  layout.cp_options = {cpm, model::CpChunks::zigzag};
  train::check_layout(g, int(seq), b * f.accum * dp, layout);
  return {layout, seq};
}

// An MoE model's whole and active parameters: a token uses every block's dense parts, the
// router and shared experts of each MoE block, and K of its E routed experts.
nlohmann::json moe_json(const model::GPTConfig& g) {
  const cost::GptShape m = model::gpt_shape(g);
  const int64_t total = model::local_num_params(g, {1, 0}, {1, 0});
  const int64_t routed = cost::expert_mlp_params(m, 1);
  return {{"experts", g.moe.experts},
          {"top_k", g.moe.top_k},
          {"every", g.moe.every},
          {"expert_ffn", g.moe.expert_width(g.hidden())},
          {"shared_experts", g.moe.shared_experts},
          {"route_groups", g.moe.route_groups},
          {"route_max_groups", g.moe.route_max_groups},
          {"params", total},
          {"active_params", total - g.moe.inactive_params(g.layers, routed)},
          {"routed_expert_params", m.moe_layers * g.moe.experts * routed},
          {"shared_expert_params", m.moe_layers * cost::shared_mlp_params(m, 1)}};
}

std::string moe_line(const model::GPTConfig& g) {
  const nlohmann::json j = moe_json(g);
  return cat(g.moe.experts, " experts of ffn ", j["expert_ffn"].get<int64_t>(), ", top-", g.moe.top_k,
             g.moe.shared_experts > 0
                 ? cat(", ", g.moe.shared_experts, " shared (ffn ", g.moe.shared_width(g.hidden()), ")")
                 : "",
             ", every ", g.moe.every, " block(s): ", j["params"].get<int64_t>(), " params (",
             j["active_params"].get<int64_t>(), " active per token; routed experts ",
             j["routed_expert_params"].get<int64_t>(), ", shared experts ",
             j["shared_expert_params"].get<int64_t>(), ")");
}

// `strata plan --local`: a strata run on this machine (`strata train --tp T --dp D --zero S
// --precision P --micro-batch b --seq s`): per tp rank, the model states, the model's
// activation buffers and the tensor-parallel bytes per step, from the cost models the
// training summary prints its prediction with (cost/). Returns the report (text or JSON).
// The expert-parallel all-to-all of `local_report`: at most one row per token and owner rank
// crosses the ep group, min(K, P, R) per token with R the ranks of its --route-max-groups
// groups (cost/comm.h). Appends the MoE line to `text`; returns the JSON keys: the rows and
// bytes of that bound, and the two terms a run's bytes are made of (the counts of each pass,
// the bytes of each row it counted: metrics.jsonl's ep_rows).
nlohmann::json ep_report(const Flags& f, const model::GPTConfig& g, int ep, int64_t tokens, std::string& text) {
  const cost::GptShape m = model::gpt_shape(g);
  const int64_t ep_bytes = f.accum * cost::ep_group_bytes_per_micro(m, ep, tokens);
  const int64_t ep_rows = f.accum * cost::ep_group_rows_per_micro(m, ep, tokens);
  const int64_t ep_row_cap = ep > 1 && g.moe.enabled() ? cost::ep_group_rows_per_token(m, ep) : 0;
  if (g.moe.enabled())
    text += cat("MoE: ", moe_line(g), "; ep ", ep, ": all-to-all bytes per step per ep group "
                "(at most; fewer when a token's experts share a rank, or with a capacity factor) ", ep_bytes,
                ep > 1 ? cat(", rows ", ep_rows, " (", ep_row_cap, " per token and block",
                             g.moe.limits_groups() ? cat(": top-", g.moe.top_k, " within ", g.moe.route_max_groups,
                                                         " of ", g.moe.route_groups, " expert groups")
                                                   : std::string(),
                             ")")
                       : std::string(),
                "\n");
  return {{"ep_bytes_per_step_per_group", ep_bytes},
          {"ep_rows_per_step_per_group", ep_rows},
          {"ep_rows_per_token", ep_row_cap},
          {"ep_count_bytes_per_step_per_group", cost::ep_group_bytes(m, ep, f.accum, 0)},
          {"ep_bytes_per_row", cost::ep_group_bytes(m, ep, 0, 1)}};
}

std::string local_report(const Flags& f, const CLI::App& app) {
  const PlanArgs& a = f.args;
  const model::GPTConfig g = local_model(f, app);
  const LocalRun run = local_run(f, g);
  const parallel::ParallelLayout& layout = run.layout;
  const int tp = layout.tp, dp = layout.dp, ep = layout.ep, stage = layout.zero, cp = layout.cp;
  const int64_t seq = run.seq, b = layout.micro_batch;
  const model::CpMode cpm = layout.cp_options.mode;
  const Precision p = a.precision == "fp32" ? Precision::fp32 : Precision::bf16;
  const cost::GptShape m = model::gpt_shape(g);
  nlohmann::json ranks = nlohmann::json::array();
  std::string text = cat("strata run: ", a.model.empty() ? "tiny" : a.model, ", tp ", tp,
                         cp > 1 ? cat(" x cp ", cp, " (", a.cp_mode, ")") : "", " x dp ",
                         dp, ", zero ", stage, ", ", a.precision, tp > 1 && !a.no_sp ? ", sp" : "",
                         ", micro-batch ", b, " x seq ", seq, " x accum ", f.accum, "\n");
  // Context parallelism: 1/cp of each sequence per rank, ZeRO over dp x cp, ring or Ulysses
  // bytes (cost/comm.h).
  const bool ring = cpm == model::CpMode::ring;
  const int64_t cp_bytes =
      f.accum * cost::cp_bytes_per_micro(ring, cp, g.layers, b, seq, g.dim / tp, m.recomputed_layers,
                                         cost::kv_columns(m, tp), g.head_dim());
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
        cp > 1 ? cost::cp_activation_bytes(m, tp, !a.no_sp, r, b, p == Precision::bf16, ring, cp, seq)
               : cost::tp_activation_bytes(m, tp, !a.no_sp, r, b, p == Precision::bf16);
    const int64_t bytes = f.accum * cost::tp_comm_bytes_per_micro(m, tp, !a.no_sp, b, seq / cp);
    ranks.push_back({{"tp_rank", r}, {"params", psi}, {"expert_params", experts},
                     {"grad_reduce_bytes_per_step", reduce}, {"parameters", st.parameters},
                     {"gradients", st.gradients}, {"optimizer", st.optimizer},
                     {"model_states", st.total()}, {"activations", acts},
                     {"tp_bytes_per_step", bytes}, {"cp_bytes_per_step", cp_bytes}});
    if (cp == 1)  // the model's buffers by kind, as summary.json's recompute section has them
      for (const auto& [name, n] :
           cost::activation_buffers(m, tp, !a.no_sp, r, b, p == Precision::bf16).named())
        ranks.back()["activation_buffers"][name] = n;
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
  const nlohmann::json ep_json = ep_report(f, g, ep, b * seq, text);
  if (!f.json()) return text;
  nlohmann::json j{{"tp", tp}, {"cp", cp}, {"dp", dp}, {"zero", stage}, {"ranks", ranks}, {"ep", ep}};
  j.update(ep_json);
  if (g.moe.enabled()) j["moe"] = moe_json(g);
  return j.dump(2) + "\n";
}

// --replica-groups and the streaming settings as the planner takes them (plan/outer.h).
OuterRequest outer_request(const Flags& f, const CLI::App& app) {
  const parallel::OuterOptions& o = f.outer.outer;
  OuterRequest q;
  q.asked = app.count("--replica-groups") > 0;
  STRATA_CHECK(!q.asked || o.groups >= 2, "--replica-groups must be at least 2 to plan groups (got ", o.groups, ")");
  if (!q.asked)
    for (const char* flag : {"--inner-steps", "--fragments", "--outer-overlap", "--outer-dtype", "--outer-error-feedback"})
      STRATA_CHECK(!app.count(flag), flag, " shapes the groups of --replica-groups R, which this plan has none of");
  q.groups = q.asked ? o.groups : 0;
  if (app.count("--inner-steps")) {
    STRATA_CHECK(o.inner_steps >= 1, "--inner-steps must be at least 1 (got ", o.inner_steps, ")");
    q.inner_steps = o.inner_steps;
  }
  o.check(4096, "a bound on the planner's search", q.inner_steps);
  q.fragments = o.fragments;
  q.overlap = o.overlap;
  q.dtype = o.dtype;
  q.error_feedback = o.error_feedback;
  q.link_share = f.link_share;
  return q;
}

void run(const Flags& f, const CLI::App& app) {
  if (f.local) {
    const std::string report = local_report(f, app);
    deprecation_notes(app, f);
    std::cout << report;
    return;
  }
  PlanRequest req = build_plan_request(f.args);
  req.outer = outer_request(f, app);
  PlanResult res = run_plan(req);
  deprecation_notes(app, f);
  if (f.json())
    std::cout << plan_to_json(req, res).dump(2) << "\n";
  else
    std::cout << plan_to_text(req, res);
  if (!res.fits()) throw ExitCode{3};
}

// The planner's own arguments (plan/request.h): the cluster, its hardware and links, the
// reliability inputs, RLHF, and the replica groups' link share.
void add_planner_flags(CLI::App& app, Flags& f) {
  app.add_option("--gpu", f.args.gpu,
                 "GPU preset (a100-40g, a100-80g, h100-80g, h200) or FILE.json");
  app.add_option("--gpus", f.args.gpus, "GPUs in the cluster (default: one node)");
  app.add_option("--gpus-per-node", f.args.gpus_per_node, "GPUs per node (default: the GPU's)");
  app.add_option("--intra-bench", f.args.intra_bench,
                 "Fit the intra-node link from `strata bench comm --json` output")
      ->check(plain_path(false));
  app.add_option("--inter-bench", f.args.inter_bench,
                 "Fit the inter-node link from `strata bench comm --json` output")
      ->check(plain_path(false));
  app.add_option("--grad-precision", f.args.grad_precision, "Gradients in bf16 (default) or fp32");
  app.add_option("--optimizer", f.args.optimizer,
                 "adamw, sgd (momentum) or muon (the blocks' matrices keep one momentum)");
  app.add_option("--tokens", f.args.tokens, "Training tokens for days-to-train (e.g. 2T, 300B)");
  app.add_option("--headroom", f.args.headroom,
                 "Fraction of device memory kept free (default 0.10)");
  app.add_option("--efficiency", f.args.efficiency, "Sustained fraction of peak FLOP/s on matmuls");
  app.add_option("--overlap", f.args.overlap,
                 "Fraction of compute that data-parallel, ZeRO and "
                 "ring-attention traffic hides behind (default 1)");
  app.add_option("--gpu-mtbf-hours", f.args.gpu_mtbf_h,
                 "Mean time between failures of one GPU "
                 "(default 50000 h)");
  app.add_option("--job-mtbf-hours", f.args.job_mtbf_h,
                 "Mean time between failures of the job "
                 "(overrides --gpu-mtbf-hours)");
  app.add_option("--storage-gbps", f.args.storage_gbps,
                 "Aggregate checkpoint write bandwidth, GB/s");
  app.add_option("--restart-min", f.args.restart_min, "Minutes to detect, restart and reload");
  app.add_option("--ckpt-stall-s", f.args.stall_s, "Stall per checkpoint if not the whole write");
  app.add_flag("--rlhf", f.args.rlhf,
               "RLHF memory per GPU (PPO: actor + critic trained, reference + reward frozen, "
               "generation KV cache) and the generate/score/train split of an iteration");
  app.add_option("--algo", f.args.algo,
                 "RL algorithm of --rlhf: " + rl_algo_choices() +
                     " (default ppo; grpo and rloo have no critic, dpo neither reward model nor "
                     "generation)");
  app.add_option("--critic", f.args.critic,
                 "Critic/reward model preset for --rlhf (default: actor)");
  app.add_option("--rollout-batch", f.args.rollout_batch,
                 "Sequences each GPU generates (--rlhf; grpo/rloo: prompts x group size; dpo: "
                 "preference pairs per GPU)");
  app.add_option("--prompt-len", f.args.prompt_len,
                 "Prompt tokens per sequence (--rlhf time split; default 256)");
  app.add_option("--response-len", f.args.response_len,
                 "Generated tokens per sequence (--rlhf time split; default 256)");
  app.add_option("--epochs", f.args.epochs,
                 "Passes of the trained models over each batch (--rlhf time split; default 1)");
  app.add_option("--top", f.args.top, "Layouts shown in the ranking (default 10)");
  app.add_option("--outer-link-share", f.link_share,
                 "Replica groups: the share of training time their exchange may take, for the smallest "
                 "--inner-steps (default 0.1)")
      ->check(number_in(0.0, 1.0, true));
}

static Register reg_plan(
    "plan", "Plan memory, layout, speed and checkpoints for a cluster", [](CLI::App& app) {
      auto f = std::make_shared<Flags>();
      f->model.add_to(app, {"--model", "--arch", "--layers", "--dim", "--heads", "--kv-heads", "--ffn", "--vocab",
                            "--experts", "--top-k", "--max-seq", "--moe-every", "--expert-ffn",
                            "--shared-experts", "--route-groups", "--route-max-groups"});
      f->training.add_to(app, {"--seq", "--batch", "--micro-batch", "--precision", "--recompute",
                               "--recompute-layers", "--recompute-inputs"});
      f->parallel.add_to(app, {"--tp", "--pp", "--dp", "--cp", "--ep", "--zero", "--schedule", "--virtual-stages",
                               "--micro-batches", "--sp", "--cp-mode", "--bucket-mb"});
      f->metrics.add_to(app, {"--json"});
      f->outer.add_to(app, {"--replica-groups", "--inner-steps", "--fragments", "--outer-overlap", "--outer-dtype",
                            "--outer-error-feedback"});
      // A flag not given is the preset's, the GPU's or the search's: no train default shows.
      for (CLI::Option* o : app.get_options())
        if (!section_of(*o, "").empty()) o->default_str("");
      app.add_option("--hidden", f->hidden, "Now --dim")->group(kOldSpellings);
      app.add_option("--global-batch", f->global_batch, "Now --batch")->group(kOldSpellings);
      add_planner_flags(app, *f);
      app.add_flag("--local", f->local,
                   "Plan a strata run on this machine (--model tiny|small|gpt2, --tp, --dp, "
                   "--zero, --precision, --micro-batch, --seq, --accum, --no-sp): per-rank "
                   "memory and tensor-parallel bytes, as the run's summary.json reports them");
      app.add_option("--accum", f->accum, "Accumulation steps per optimizer step (--local)");
      app.footer("Model, Training and Parallelism options are strata train's, with its names; one not "
                 "given is the preset's, the GPU's or the search's choice.");
      add_plan_calibrate(app);
      RunConfigFlags& config = add_run_config(app, "plan");
      app.callback([f, &app, &config] {
        if (app.got_subcommand("calibrate")) return;
        try {
          fill_args(app, *f);
          if (config.print) {
            // A printed config is one that plans: its model and request are checked first.
            if (f->local)
              local_report(*f, app);
            else
              build_plan_request(f->args);
            deprecation_notes(app, *f);
            std::cout << resolved_config(app, "plan");
            return;
          }
          run(*f, app);
        } catch (const Error& e) {
          throw Error(as_typed(app, train::in_flags(e)));
        }
      });
    });

}  // namespace
}  // namespace strata::cli
