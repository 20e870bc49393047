// `strata plan`: will a model fit on a cluster, how to lay it out, how fast, how often to
// checkpoint. Flags build a plan::PlanRequest; the planner library does the rest.
#include <algorithm>
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
#include "plan/request.h"
#include "train/run_spec.h"

namespace strata::cli {

void add_plan_calibrate(CLI::App& plan);  // cmd_plan_calibrate.cc

namespace {

using namespace strata::plan;

// strata plan's flags: the planner's arguments (plan/request.h: a flag not given stays
// unset) and what only the command line has, --json and --local's run on this machine.
struct Flags {
  PlanArgs args;
  bool json = false, local = false;
  int accum = 1, moe_every = 1, recompute_layers = 0;
  int64_t max_seq = 0;
  std::string recompute_inputs = "fp32";
};

// `strata plan --local`: a strata run on this machine (`strata train --tp T --dp D --zero S
// --precision P --micro-batch b --seq s`): per tp rank, the model states, the model's
// activation buffers and the tensor-parallel bytes per step, from the cost models the
// training summary prints its prediction with (cost/). Returns the report (text or JSON).
std::string local_report(const Flags& f, const CLI::App& app) {
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
  if (app.count("--max-seq")) g.seq = int(f.max_seq);
  if (a.experts) {  // docs/moe.md
    g.moe.experts = int(*a.experts);
    g.moe.top_k = a.top_k ? int(*a.top_k) : 2;
    g.moe.every = f.moe_every;
  }
  // --recompute as `strata train --recompute` takes it (the search's default is full; a
  // local run's is none).
  g.recompute = {model::parse_recompute_mode(a.recompute.value_or("none")), f.recompute_layers,
                 model::parse_recompute_inputs(f.recompute_inputs)};
  STRATA_CHECK(!g.recompute.bf16_inputs || a.precision == "bf16",
               "--recompute-inputs bf16 needs --precision bf16 (under fp32 every activation is fp32)");
  g.validate();
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
  // Dropless routing: every assignment crosses the ep group (cost/comm.h).
  const int64_t ep_bytes = f.accum * cost::ep_group_bytes_per_micro(m, ep, b * seq);
  if (g.moe.enabled())
    text += cat("MoE: ", g.moe.experts, " experts, top-", g.moe.top_k, ", every ", g.moe.every,
                " block(s), ep ", ep, ": all-to-all bytes per step per ep group (dropless; at "
                "most this with a capacity factor) ", ep_bytes, "\n");
  if (!f.json) return text;
  return nlohmann::json{{"tp", tp},     {"cp", cp},       {"dp", dp},
                        {"zero", stage}, {"ranks", ranks}, {"ep", ep},
                        {"ep_bytes_per_step_per_group", ep_bytes}}
             .dump(2) +
         "\n";
}

void run(const Flags& f, const CLI::App& app) {
  if (f.local) {
    std::cout << local_report(f, app);
    return;
  }
  const PlanRequest req = build_plan_request(f.args);
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
      app.add_option("--model", f->args.model,
                     "Model preset (the same table as strata train's): " +
                         model::model_preset_list(/*published_first=*/true));
      app.add_option("--arch", f->args.arch,
                     "Layer style for explicit shapes: gpt or gpt2 (GELU, LayerNorm, "
                     "biases, tied) or llama (SwiGLU, RMSNorm, untied)");
      app.add_option("--layers", f->args.layers, "Transformer layers");
      app.add_option("--hidden,--dim", f->args.hidden, "Hidden size (--dim: strata train's name)");
      app.add_option("--heads", f->args.heads, "Attention heads");
      app.add_option("--kv-heads", f->args.kv_heads,
                     "KV heads (grouped-query attention; default: heads)");
      app.add_option("--ffn", f->args.ffn, "MLP width (default 4h for gpt, ~8h/3 for llama)");
      app.add_option("--seq", f->args.seq, "Sequence length");
      app.add_option("--vocab", f->args.vocab, "Vocabulary (padded to a multiple of 64)");
      app.add_option("--experts", f->args.experts, "MoE experts per layer (0: dense)");
      app.add_option("--top-k", f->args.top_k, "Experts per token (default 2)");
      app.add_option("--gpu", f->args.gpu,
                     "GPU preset (a100-40g, a100-80g, h100-80g, h200) or FILE.json");
      app.add_option("--gpus", f->args.gpus, "GPUs in the cluster (default: one node)");
      app.add_option("--gpus-per-node", f->args.gpus_per_node, "GPUs per node (default: the GPU's)");
      app.add_option("--intra-bench", f->args.intra_bench,
                     "Fit the intra-node link from `strata bench comm --json` output")
          ->check(plain_path(false));
      app.add_option("--inter-bench", f->args.inter_bench,
                     "Fit the inter-node link from `strata bench comm --json` output")
          ->check(plain_path(false));
      app.add_option("--global-batch,--batch", f->args.global_batch,
                     "Sequences per optimizer step (--batch: strata train's name)");
      app.add_option("--micro-batch", f->args.micro_batch, "Fix the micro-batch (sequences)");
      app.add_option("--precision", f->args.precision, "bf16 (fp32 master weights) or fp32");
      app.add_option("--grad-precision", f->args.grad_precision, "Gradients in bf16 (default) or fp32");
      app.add_option("--optimizer", f->args.optimizer, "adamw or sgd (momentum)");
      app.add_option("--tokens", f->args.tokens, "Training tokens for days-to-train (e.g. 2T, 300B)");
      app.add_option("--tp", f->args.tp, "Fix tensor parallelism");
      app.add_option("--pp", f->args.pp, "Fix pipeline parallelism");
      app.add_option("--dp", f->args.dp, "Fix data parallelism");
      app.add_option("--cp", f->args.cp, "Fix context parallelism");
      app.add_option("--ep", f->args.ep, "Fix expert parallelism");
      app.add_option("--zero", f->args.zero, "Fix the ZeRO stage (0-3)");
      app.add_option("--recompute", f->args.recompute, "Fix recomputation: none, selective, full");
      app.add_option("--schedule", f->args.schedule,
                     "Pipeline schedule: gpipe, 1f1b (default), interleaved, zb");
      app.add_option("--virtual-stages", f->args.virtual_stages,
                     "Model chunks per pipeline stage (--schedule interleaved)");
      app.add_option("--micro-batches", f->args.micro_batches,
                     "Fix the micro-batches per step (global batch / (dp x micro-batch))");
      app.add_flag("--no-sp", f->args.no_sp, "No sequence parallelism with tensor parallelism");
      app.add_option("--cp-mode", f->args.cp_mode, "Context parallelism: ring or ulysses");
      app.add_option("--headroom", f->args.headroom,
                     "Fraction of device memory kept free (default 0.10)");
      app.add_option("--efficiency", f->args.efficiency, "Sustained fraction of peak FLOP/s on matmuls");
      app.add_option("--overlap", f->args.overlap,
                     "Fraction of compute that data-parallel, ZeRO and "
                     "ring-attention traffic hides behind (default 1)");
      app.add_option("--bucket-mb", f->args.bucket_mb,
                     "ZeRO-1/2 reduce-scatter bucket, MiB (default 25)");
      app.add_option("--gpu-mtbf-hours", f->args.gpu_mtbf_h,
                     "Mean time between failures of one GPU "
                     "(default 50000 h)");
      app.add_option("--job-mtbf-hours", f->args.job_mtbf_h,
                     "Mean time between failures of the job "
                     "(overrides --gpu-mtbf-hours)");
      app.add_option("--storage-gbps", f->args.storage_gbps,
                     "Aggregate checkpoint write bandwidth, GB/s");
      app.add_option("--restart-min", f->args.restart_min, "Minutes to detect, restart and reload");
      app.add_option("--ckpt-stall-s", f->args.stall_s, "Stall per checkpoint if not the whole write");
      app.add_flag("--rlhf", f->args.rlhf,
                   "PPO memory per GPU: actor + critic trained, reference + "
                   "reward frozen, generation KV cache");
      app.add_option("--critic", f->args.critic,
                     "Critic/reward model preset for --rlhf (default: actor)");
      app.add_option("--rollout-batch", f->args.rollout_batch, "Sequences each GPU generates (--rlhf)");
      app.add_option("--top", f->args.top, "Layouts shown in the ranking (default 10)");
      app.add_flag("--json", f->json, "Print JSON instead of tables");
      app.add_flag("--local", f->local,
                   "Plan a strata run on this machine (--model tiny|small|gpt2, --tp, --dp, "
                   "--zero, --precision, --micro-batch, --seq, --accum, --no-sp): per-rank "
                   "memory and tensor-parallel bytes, as the run's summary.json reports them");
      app.add_option("--max-seq", f->max_seq, "Position table rows of the model (--local)");
      app.add_option("--accum", f->accum, "Accumulation steps per optimizer step (--local)");
      app.add_option("--moe-every", f->moe_every, "Every N-th block is an MoE block (--local)");
      app.add_option("--recompute-layers", f->recompute_layers,
                     "With --recompute full: blocks recomputed, from the first (--local; 0: all)");
      app.add_option("--recompute-inputs", f->recompute_inputs,
                     "With --recompute full and --precision bf16: the kept block inputs in fp32 or "
                     "bf16 (--local)");
      add_plan_calibrate(app);
      RunConfigFlags& config = add_run_config(app, "plan");
      app.callback([f, &app, &config] {
        if (app.got_subcommand("calibrate")) return;
        if (config.print) {
          // A printed config is one that plans: its model and request are checked first.
          if (f->local)
            local_report(*f, app);
          else
            build_plan_request(f->args);
          std::cout << resolved_config(app, "plan");
          return;
        }
        run(*f, app);
      });
    });

}  // namespace
}  // namespace strata::cli
