// `strata train`: GPT training on one process or N data-parallel ranks (ZeRO stages 0-3).
//
//   strata train --model tiny --data synthetic --steps 300 --run-dir runs/demo
//   strata train --layers 2 --dim 64 --heads 4 --seq 32 --data input.txt --json
//   strata train --nproc 4 --zero 3 --precision bf16 --trace --run-dir runs/z3
//   strata train --nproc 4 --tp 2 --dp 2 --zero 1 --run-dir runs/tp2   (docs/tensor_parallel.md)
//   strata train --nproc 2 --cp 2 --cp-mode ring --seq 1024 ...        (docs/context_parallel.md)
//   strata train --init-from hf/TinyLlama --seq 512 --data DIR ...      (docs/checkpoints.md)
//
// The model is a preset (--model) with optional overrides of its architecture; --seq is the
// training sequence length and may not exceed the model's position table (--max-seq).
#include <cmath>
#include <iostream>
#include <string>

#include "ckpt/fsutil.h"
#include "ckpt/hf.h"
#include "ckpt/interval.h"
#include "cli/command.h"
#include "cli/fault_flags.h"
#include "cli/host_flags.h"
#include "cli/run_config.h"
#include "comm/bootstrap.h"
#include "comm/runtime.h"
#include "comm/types.h"
#include "core/error.h"
#include "model/context/layout.h"
#include "model/gpt.h"
#include "parallel/options.h"
#include "train/distributed.h"
#include "train/init_from.h"
#include "train/kernel_paths.h"
#include "train/run_spec.h"
#include "train/trainer.h"

namespace strata::cli {
namespace {

struct TrainArgs {
  train::TrainConfig cfg;
  std::string model = "tiny";
  int layers = 0, dim = 0, heads = 0, max_seq = 0, vocab = 0;  // 0 = the preset's
  std::string arch;  // --arch; empty: the preset's
  int kv_heads = 0, ffn = 0;
  float norm_eps = 0, rope_theta = 0;
  std::string rope_scaling;  // --rope-scaling
  bool tie = false, untie = false;
  int64_t warmup = -1;                                          // -1 = 5% of the steps
  double min_lr = -1;                                           // -1 = lr / 10
  train::ParallelConfig parallel;
  std::string zero = "0", precision = "fp32", backend = "shm";
  std::string reduce_dtype;  // --reduce-dtype; empty = the precision's
  std::string cp_mode = "ring", cp_chunks = "zigzag";
  cli::FaultFlags faults;
  cli::HostFlags host_flags;
  std::string mtbf;  // --mtbf, e.g. "4h"
  model::expert::MoEConfig moe;  // --experts ... (docs/moe.md)
  std::string pp_schedule = "1f1b", pp_split;
  std::string spike_action = "skip";  // --spike-action
  std::string recompute = "none";     // --recompute
  int recompute_layers = 0;           // --recompute-layers
  std::string recompute_inputs = "fp32";  // --recompute-inputs
  int mem_replicas = 0;               // --mem-ckpt-replicas
  std::string recovery = "restart";   // --recovery
};

// --experts E --top-k K [--moe-every N] [--capacity-factor F | --dropless] ...
void add_moe_flags(CLI::App& app, TrainArgs& a) {
  model::expert::MoEConfig& m = a.moe;
  app.add_option("--experts", m.experts, "Mixture of Experts: E expert MLPs per MoE block (0: dense)")
      ->capture_default_str();
  app.add_option("--top-k", m.top_k, "Experts per token (gates renormalised over the k)")
      ->capture_default_str();
  app.add_option("--moe-every", m.every, "Every N-th block is an MoE block")->capture_default_str();
  auto* cf = app.add_option("--capacity-factor", m.capacity_factor,
                            "Slots per expert = ceil(F x tokens x K / E) per micro-batch")
                 ->capture_default_str()
                 ->check(finite(NumberRange::positive()));
  app.add_flag("--dropless", m.dropless, "No capacity limit: every token reaches its experts")
      ->excludes(cf);
  app.add_option("--aux-loss-coef", m.aux_coef, "Load-balancing loss coefficient")
      ->capture_default_str();
  app.add_option("--z-loss-coef", m.z_coef, "Router z-loss coefficient")->capture_default_str();
  app.add_option("--router-jitter", m.jitter, "Router input noise U(1-j, 1+j) in training")
      ->capture_default_str();
  app.add_option("--ep", a.parallel.mesh.ep, "Expert-parallel ranks, carved out of dp")
      ->capture_default_str();
  app.add_option("--collapse-pct", a.cfg.moe_collapse_pct,
                 "Warn when one expert takes over X% of a block's assignments ...")
      ->capture_default_str();
  app.add_option("--collapse-steps", a.cfg.moe_collapse_steps, "... for K steps in a row")
      ->capture_default_str();
}

constexpr int kMaxVocab = 1 << 24;

// An architecture override, when the flag was given: positive, else one line naming it.
void override_size(CLI::App& app, const char* flag, int value, int& field) {
  if (app.count(flag) == 0) return;
  STRATA_CHECK(value > 0, flag, " must be positive (got ", value, ")");
  field = value;
}

// --arch llama [--kv-heads N --ffn F --norm-eps E --rope-theta T --tie-embeddings]: Llama blocks
// (model/model_part.h Arch) from any preset's sizes; a Llama preset has them already.
void add_arch_flags(CLI::App& app, TrainArgs& a) {
  app.add_option("--arch", a.arch, "Block architecture: gpt2 or llama (default: the preset's)");
  app.add_option("--kv-heads", a.kv_heads,
                 "Llama: key/value heads (grouped-query attention; 1: multi-query; must divide "
                 "--heads)");
  app.add_option("--ffn", a.ffn, "Llama: MLP width (default 8 x dim / 3 rounded up to 256)");
  app.add_option("--norm-eps", a.norm_eps, "Llama: RMSNorm epsilon (default 1e-5)")
      ->check(finite(NumberRange::positive()));
  app.add_option("--rope-theta", a.rope_theta, "Llama: rotary embedding base (default 10000)")
      ->check(finite(NumberRange::positive()));
  app.add_option("--rope-scaling", a.rope_scaling,
                 "Llama: Llama 3.1's rope_scaling (llama3): none, FACTOR or "
                 "FACTOR,LOW,HIGH,ORIGINAL (e.g. 32,1,4,8192); default: the preset's");
  auto* tie = app.add_flag("--tie-embeddings", a.tie, "Llama: the output layer is the embedding");
  app.add_flag("--no-tie-embeddings", a.untie, "Llama: an output layer of its own (lm_head)")
      ->excludes(tie);
}

void apply_arch_flags(CLI::App& app, const TrainArgs& a, model::GPTConfig& m) {
  if (app.count("--arch")) {
    const model::Arch arch = model::parse_arch(a.arch);
    // Llama blocks are built from any preset's sizes, but a Llama preset's grouped heads, MLP
    // width and untied output have no GPT-2 form: say so by the flags typed, not by a field.
    STRATA_CHECK(arch == model::Arch::llama || !m.llama(), "--arch ", a.arch, " conflicts with --model ", a.model,
                 ", a llama model (grouped key/value heads, its own MLP width and output layer); use a gpt2 "
                 "preset (tiny, small, gpt2) or drop --arch");
    if (arch == model::Arch::llama && !m.llama()) m.tie_embeddings = false;  // Llama's default
    m.arch = arch;
  }
  const bool llama = m.llama();
  for (const char* flag : {"--kv-heads", "--ffn", "--norm-eps", "--rope-theta", "--rope-scaling",
                           "--tie-embeddings", "--no-tie-embeddings"})
    STRATA_CHECK(llama || app.count(flag) == 0, flag, " needs Llama blocks (--arch llama or a "
                 "llama preset)");
  override_size(app, "--kv-heads", a.kv_heads, m.kv_heads);
  override_size(app, "--ffn", a.ffn, m.ffn);
  if (app.count("--norm-eps")) m.norm_eps = a.norm_eps;
  if (app.count("--rope-theta")) m.rope_theta = a.rope_theta;
  if (app.count("--rope-scaling")) model::parse_rope_scaling(a.rope_scaling, m);
  if (a.tie) m.tie_embeddings = true;
  if (a.untie) m.tie_embeddings = false;
  // A preset's heads changed without --kv-heads: multi-head unless the preset's grouping fits.
  if (llama && app.count("--heads") && !app.count("--kv-heads") && m.heads % m.kv() != 0)
    m.kv_heads = 0;
}

// --init-from DIR: the model is the one DIR/config.json describes (train/init_from.h). A shape
// flag may repeat a value of it, never contradict it; --max-seq may shorten a Llama's context
// (RoPE has no table to match), not GPT-2's (wpe's rows are in the file).
model::GPTConfig model_from_hf(CLI::App& app, const TrainArgs& a, const std::string& dir) {
  const ckpt::HfModel hf = ckpt::read_hf_config(dir, "--init-from");
  model::GPTConfig m = train::hf_model_config(hf);
  const std::string src = dir + "/config.json";
  const bool llama = m.llama();
  STRATA_CHECK(!app.count("--model"), "--model ", a.model,
               ": with --init-from the model is the one ", src, " describes; drop --model");
  auto same = [&](const char* flag, double given, double theirs, const char* llama_key,
                  const char* gpt2_key) {
    if (!app.count(flag)) return;
    STRATA_CHECK(float(given) == float(theirs), flag, " ", given, " contradicts ", src, "'s ",
                 llama ? llama_key : gpt2_key, " ", theirs);
  };
  if (app.count("--arch"))
    STRATA_CHECK(model::parse_arch(a.arch) == m.arch, "--arch ", a.arch, " contradicts ", src,
                 "'s model_type ", hf.arch);
  same("--layers", a.layers, m.layers, "num_hidden_layers", "n_layer");
  same("--dim", a.dim, m.dim, "hidden_size", "n_embd");
  same("--heads", a.heads, m.heads, "num_attention_heads", "n_head");
  same("--vocab", a.vocab, m.vocab, "vocab_size", "vocab_size");
  for (const char* flag : {"--kv-heads", "--ffn", "--norm-eps", "--rope-theta", "--rope-scaling",
                           "--tie-embeddings", "--no-tie-embeddings"})
    STRATA_CHECK(llama || app.count(flag) == 0, flag, " needs Llama blocks; ", src, " is a GPT-2");
  same("--kv-heads", a.kv_heads, m.kv(), "num_key_value_heads", nullptr);
  same("--ffn", a.ffn, m.hidden(), "intermediate_size", nullptr);
  same("--norm-eps", a.norm_eps, m.norm_eps, "rms_norm_eps", nullptr);
  same("--rope-theta", a.rope_theta, m.rope_theta, "rope_theta", nullptr);
  if (app.count("--rope-scaling")) {
    model::GPTConfig given = m;
    model::parse_rope_scaling(a.rope_scaling, given);
    STRATA_CHECK(given.arch_json()["rope_scaling"] == m.arch_json()["rope_scaling"],
                 "--rope-scaling ", a.rope_scaling, " contradicts ", src, "'s rope_scaling ",
                 m.arch_json()["rope_scaling"].dump());
  }
  if (a.tie || a.untie)
    STRATA_CHECK(a.tie == m.tie_embeddings, a.tie ? "--tie-embeddings" : "--no-tie-embeddings",
                 " contradicts ", src, "'s tie_word_embeddings ",
                 m.tie_embeddings ? "true" : "false");
  if (app.count("--max-seq")) {
    if (!llama) same("--max-seq", a.max_seq, m.seq, nullptr, "n_positions");
    STRATA_CHECK(a.max_seq > 0 && a.max_seq <= m.seq, "--max-seq ", a.max_seq, " must be in [1, ",
                 m.seq, "], ", src, "'s max_position_embeddings");
    m.seq = a.max_seq;
  }
  return m;
}

train::TrainConfig resolve(CLI::App& app, TrainArgs& a) {
  train::TrainConfig cfg = a.cfg;
  cfg.model_name = a.model;
  if (app.count("--init-from")) {
    cfg.model = model_from_hf(app, a, cfg.init_from);
    cfg.model_name = cat(cfg.model.llama() ? "llama" : "gpt2", " from ", cfg.init_from);
  } else {
    cfg.model = model::GPTConfig::preset(a.model);
    override_size(app, "--layers", a.layers, cfg.model.layers);
    override_size(app, "--dim", a.dim, cfg.model.dim);
    override_size(app, "--heads", a.heads, cfg.model.heads);
    override_size(app, "--max-seq", a.max_seq, cfg.model.seq);
    apply_arch_flags(app, a, cfg.model);
  }
  if (app.count("--vocab") && !app.count("--init-from")) {
    override_size(app, "--vocab", a.vocab, cfg.model.vocab);
    // Padding to 64 would overflow an int near 2^31; real vocabularies stay below 2^18.
    STRATA_CHECK(a.vocab <= kMaxVocab, "--vocab must be in [1, ", kMaxVocab, "] (got ", a.vocab,
                 ")");
    cfg.model.padded_vocab = int(model::padded_vocab(cfg.model.vocab));
  }
  // A preset's experts (Mixtral) unless the flags say otherwise.
  if (!app.count("--experts")) a.moe.experts = cfg.model.moe.experts;
  if (!app.count("--top-k") && cfg.model.moe.enabled()) a.moe.top_k = cfg.model.moe.top_k;
  cfg.model.moe = a.moe;
  cfg.model.recompute = {model::parse_recompute_mode(a.recompute), a.recompute_layers,
                         model::parse_recompute_inputs(a.recompute_inputs)};
  if (app.count("--seq")) STRATA_CHECK(cfg.seq > 0, "--seq must be positive (got ", cfg.seq, ")");
  // CLI11 clamps a number past int64 to its maximum; no run has 2^40 steps, and below that
  // every token count (steps x batch x seq) stays exact.
  STRATA_CHECK(cfg.schedule.steps > 0 && cfg.schedule.steps <= (int64_t(1) << 40),
               "--steps must be in [1, 2^40] (got ", cfg.schedule.steps, ")");
  // Flags whose "unset" is a sentinel: a given value must be a real one, never the sentinel
  // (--min-lr's is refused by its check, finite(>= 0)).
  if (app.count("--warmup"))
    STRATA_CHECK(a.warmup >= 0, "--warmup must be >= 0 steps (got ", a.warmup, ")");
  if (app.count("--threads"))
    STRATA_CHECK(cfg.threads >= 1, "--threads must be at least 1 (got ", cfg.threads, ")");
  if (app.count("--resume"))
    STRATA_CHECK(!cfg.ckpt.resume.empty(), "--resume needs a value: auto, or a run directory, its "
                 "ckpt/ directory or a step-* directory");
  cfg.schedule.min_lr = app.count("--min-lr") ? a.min_lr : cfg.schedule.lr / 10;
  STRATA_CHECK(a.spike_action == "skip" || a.spike_action == "rollback", "--spike-action ",
               a.spike_action, " is not skip or rollback");
  const int64_t mem_every = cfg.ckpt.mem_every;
  STRATA_CHECK(mem_every >= 0, "--mem-ckpt-every must be >= 0 (got ", mem_every, ")");
  STRATA_CHECK(a.mem_replicas >= 0, "--mem-ckpt-replicas must be >= 0 (got ", a.mem_replicas, ")");
  // R replicas need R hosts besides the rank's own; one replica (the next host's peer) is
  // what is built.
  const int hosts = int(a.parallel.hosts.size());
  STRATA_CHECK(a.mem_replicas == 0 || hosts > a.mem_replicas, "--mem-ckpt-replicas ", a.mem_replicas,
               " needs ", a.mem_replicas == 1 ? "a second host" : cat(a.mem_replicas + 1, " hosts"),
               " to copy to, and ",
               hosts == 0 ? std::string("this job names none (no --hosts, --hostfile or --slurm)")
                          : cat(a.parallel.hosts_source, " names ", hosts),
               "; use --mem-ckpt-replicas 0 (disk checkpoints stay the copy that survives a host)");
  STRATA_CHECK(a.mem_replicas <= 1, "--mem-ckpt-replicas ", a.mem_replicas,
               ": one replica per copy (on the next host) is supported, not more; use "
               "--mem-ckpt-replicas 1");
  STRATA_CHECK(a.mem_replicas == 0 || mem_every > 0, "--mem-ckpt-replicas ", a.mem_replicas,
               " needs --mem-ckpt-every (it replicates the in-memory copies)");
  cfg.ckpt.mem_replicas = a.mem_replicas;
  const double mbps = cfg.ckpt.mem_replica_mbps;
  STRATA_CHECK(std::isfinite(mbps) && mbps >= 0, "--mem-ckpt-replica-mbps must be a number of MB/s >= 0 "
               "(0: unpaced), got ", mbps);
  STRATA_CHECK(!app.count("--mem-ckpt-replica-mbps") || a.mem_replicas > 0, "--mem-ckpt-replica-mbps ", mbps,
               " paces the replicas of --mem-ckpt-replicas 1, which this run does not make");
  STRATA_CHECK(mem_every == 0 || !cfg.run_dir.empty(),
               "--mem-ckpt-every needs --run-dir (the in-memory copies are named after it)");
  cfg.guard.rollback = a.spike_action == "rollback";
  STRATA_CHECK(!cfg.guard.rollback || mem_every > 0,
               "--spike-action rollback needs in-memory checkpoints to roll back to: add "
               "--mem-ckpt-every K (1: the step before the spike)");
  // A rollback retrains the steps after the copy: none of them may already be on disk
  // (a committed step is never overwritten), which holds when disk saves fall on copies.
  STRATA_CHECK(!cfg.guard.rollback || cfg.ckpt.every % mem_every == 0, "--spike-action rollback "
               "with --mem-ckpt-every ", mem_every, " needs --ckpt-every a multiple of it (got ",
               cfg.ckpt.every, "): a rollback must not train again a step saved to disk");
  cfg.schedule.warmup = app.count("--warmup") ? a.warmup : cfg.schedule.steps / 20;
  if (app.count("--micro-batch"))
    STRATA_CHECK(cfg.micro_batch > 0, "--micro-batch must be positive (got ", cfg.micro_batch,
                 ")");
  // Steps count from 1, as the progress lines print them: --inject-step S fires in step S.
  cfg.fault = a.faults.resolve(a.parallel.world(), cfg.schedule.steps + 1);
  STRATA_CHECK(!cfg.fault.active() || cfg.fault.step >= 1,
               "--inject-step counts steps from 1 (got ", cfg.fault.step, ")");
  if (!a.mtbf.empty()) cfg.ckpt.mtbf_s = ckpt::parse_duration(a.mtbf);
  return cfg;
}

// --micro-batches M (pipeline): the micro-batch that makes the accumulation count M.
void apply_micro_batches(CLI::App& app, const train::ParallelConfig& pc, train::TrainConfig& cfg) {
  const int M = pc.pipeline.micro;
  if (!app.count("--micro-batches")) return;
  STRATA_CHECK(M >= 1, "--micro-batches must be at least 1 (got ", M, ")");
  const int dp = pc.mesh_dims().dp;
  STRATA_CHECK(cfg.batch % (int64_t(dp) * M) == 0, "--batch ", cfg.batch,
               " does not split into --micro-batches ", M, " x ", dp, " data-parallel rank(s)");
  const int64_t micro = cfg.batch / (int64_t(dp) * M);
  // Both given: they must say the same thing.
  STRATA_CHECK(!app.count("--micro-batch") || cfg.micro_batch == micro, "--micro-batch ",
               cfg.micro_batch, " and --micro-batches ", M, " disagree: --batch ", cfg.batch, " over ", dp,
               " data-parallel rank(s) in ", M, " micro-batches is --micro-batch ", micro,
               "; give one of them");
  cfg.micro_batch = int(micro);
}

train::ParallelConfig resolve_parallel(CLI::App& app, TrainArgs& a, train::TrainConfig& cfg) {
  train::ParallelConfig pc = a.parallel;
  pc.dp.stage = parallel::parse_zero_stage(a.zero);
  pc.dp.precision = parallel::parse_precision(a.precision);
  STRATA_CHECK(!cfg.model.recompute.bf16_inputs || pc.dp.precision == parallel::Precision::bf16,
               "--recompute-inputs bf16 needs --precision bf16 (under fp32 every activation is fp32)");
  if (app.count("--reduce-dtype")) {
    STRATA_CHECK(a.reduce_dtype == "fp32" || a.reduce_dtype == "bf16", "--reduce-dtype ",
                 a.reduce_dtype.empty() ? "''" : a.reduce_dtype, ": expected fp32 or bf16");
    pc.dp.reduce_precision = parallel::parse_precision(a.reduce_dtype);
  }
  pc.backend = comm::parse_backend(a.backend);
  pc.recovery = train::parse_recovery(a.recovery);
  if (!pc.hosts.empty()) {
    STRATA_CHECK(!app.count("--backend") || pc.backend != comm::Backend::shm,
                 "--backend ", a.backend, " runs on one host; several hosts need --backend mpi or tcp");
    if (!app.count("--backend")) pc.backend = comm::Backend::mpi;
  }
  STRATA_CHECK(!pc.preflight || pc.world() > 1, "--preflight measures links between ranks; it needs 2 or more");
  pc.cp = {model::parse_cp_mode(a.cp_mode), model::parse_cp_chunks(a.cp_chunks)};
  pc.pipeline.schedule = parallel::pipeline::parse_schedule(a.pp_schedule);
  if (!a.pp_split.empty()) pc.pipeline.split = parallel::pipeline::parse_split(a.pp_split);
  pc.data_parallel = app.count("--zero") || app.count("--precision") ||
                     app.count("--reduce-dtype") || pc.world() > 1;
  pc.timeout_s = a.faults.timeout_s;
  if (pc.timeout_s == 0) comm::detail::default_timeout_s();  // a bad STRATA_TIMEOUT: one line now
  apply_micro_batches(app, pc, cfg);
  return pc;
}

void setup(CLI::App& app) {
  auto a = std::make_shared<TrainArgs>();
  train::TrainConfig& c = a->cfg;
  c.schedule.steps = 200;
  c.eval_every = 100;
  // A repeated flag takes its last value, so scripts can append overrides.
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app.add_option("--model", a->model, "Preset: " + model::model_preset_list() +
                                          " (one that does not fit this machine is refused)")
      ->capture_default_str();
  app.add_option("--layers", a->layers, "Transformer blocks (overrides the preset)");
  app.add_option("--dim", a->dim, "Model width (overrides the preset)");
  app.add_option("--heads", a->heads, "Attention heads; must divide --dim");
  app.add_option("--max-seq", a->max_seq, "Maximum sequence length (position table rows)");
  add_arch_flags(app, *a);
  app.add_option("--init-from", c.init_from,
                 "Start from a Hugging Face model directory (GPT2LMHeadModel or LlamaForCausalLM: "
                 "config.json and model.safetensors or its shards); the model's shape comes from "
                 "its config.json")
      ->check(dir_path());
  app.add_option("--seq", c.seq, "Training sequence length (default: the model's maximum)");
  app.add_option("--vocab", a->vocab, "Vocabulary size (padded to a multiple of 64)");
  app.add_option("--data", c.data, "synthetic | FILE.txt | FILE.bin | DIR (llm.c shards)")
      ->check(plain_path(true))
      ->capture_default_str();
  app.add_option("--tail", c.tail, "Incomplete last global batch of an epoch: drop, pad or uneven")
      ->capture_default_str();
  app.add_flag("--doc-mask", c.doc_mask,
               "Documents packed into a sequence: attention does not cross them and positions restart "
               "at each (the document token comes from a prepared --data DIR, or --doc-token)");
  app.add_option("--doc-token", c.doc_token,
                 "With --doc-mask: the token id every document begins with (default: the prepared "
                 "data's document token)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--steps", c.schedule.steps, "Optimizer steps (at most 2^40)")
      ->capture_default_str();
  app.add_option("--seed", c.seed, "Seed of initialisation, data order and sampling")
      ->capture_default_str()
      ->check(non_negative_integer());
  app.add_option("--batch", c.batch, "Global batch in sequences")->capture_default_str();
  app.add_option("--micro-batch", c.micro_batch,
                 "Sequences per rank per micro-step (default: --batch / ranks); "
                 "accumulation = batch / (micro-batch x ranks)");
  app.add_option("--lr", c.schedule.lr, "Peak learning rate")->capture_default_str();
  app.add_option("--min-lr", a->min_lr, "Final learning rate of the cosine (default: lr / 10)")
      ->check(finite(NumberRange::non_negative()));
  app.add_option("--warmup", a->warmup, "Linear warmup steps (default: 5% of --steps)");
  app.add_option("--weight-decay", c.optim.weight_decay, "AdamW decoupled weight decay")
      ->capture_default_str();
  app.add_option("--grad-clip", c.optim.grad_clip, "Global gradient-norm clip (<= 0: off)")
      ->capture_default_str();
  app.add_option("--beta2", c.optim.beta2, "AdamW beta2")->capture_default_str();
  app.add_flag("--skip-nonfinite", c.guard.skip_nonfinite,
               "Skip (no update) a step whose loss or gradient norm is NaN or infinite, instead of "
               "stopping the run");
  app.add_option("--spike-zscore", c.guard.zscore,
                 "Skip a step whose loss or gradient norm is Z standard deviations above the "
                 "last --spike-window steps' mean (0: off)")
      ->capture_default_str();
  app.add_option("--spike-window", c.guard.window, "Accepted steps the spike check compares with")
      ->capture_default_str();
  app.add_option("--spike-action", a->spike_action,
                 "What a refused step does: skip, or rollback (restore the newest in-memory "
                 "checkpoint, skip the batch, continue from the copy's step; needs "
                 "--mem-ckpt-every)")
      ->capture_default_str();
  app.add_option("--max-skipped-steps", c.guard.max_skipped,
                 "Stop the run when more steps than this were skipped")
      ->capture_default_str();
  app.add_option("--eval-every", c.eval_every, "Held-out eval every K steps (0: only at the end)")
      ->capture_default_str();
  app.add_option("--eval-batches", c.eval_batches,
                 "Held-out sequences per eval, in global batches of --batch sequences (the "
                 "same sequences for any layout or micro-batch split)")
      ->capture_default_str();
  app.add_option("--sample-every", c.sample_every, "Generate text every K steps (0: at the end)")
      ->capture_default_str();
  app.add_option("--sample-tokens", c.sample_tokens,
                 "Tokens per sample (0: no sampling; at most 4096)")
      ->capture_default_str();
  app.add_option("--log-every", c.log_every, "Progress line every K steps")->capture_default_str();
  app.add_option("--run-dir", c.run_dir, "Write metrics.jsonl and summary.json here")->check(dir_path());
  app.add_flag("--json", c.json, "Print JSON records on stdout instead of progress lines");
  app.add_option("--threads", c.threads, "OpenMP and BLAS threads (default: OMP_NUM_THREADS)");
  app.add_option("--peak-gflops", c.peak_gflops,
                 "Peak GFLOP/s for MFU (default: measured by an sgemm probe, cached)")
      ->check(finite(NumberRange::positive()));
  train::ParallelConfig& p = a->parallel;
  app.add_option("--nproc", p.nproc, "Ranks to start on this host (tp x dp)")
      ->capture_default_str();
  app.add_option("--tp", p.mesh.tp,
                 "Tensor-parallel ranks (Megatron-style; must divide the heads); ranks = tp x dp")
      ->capture_default_str();
  app.add_option("--dp", p.mesh.dp, "Data-parallel ranks (default: nproc / (tp x cp x pp))");
  app.add_option("--cp", p.mesh.cp,
                 "Context-parallel ranks: each holds seq/cp tokens of every sequence; ranks = "
                 "tp x cp x dp")
      ->capture_default_str();
  app.add_option("--cp-mode", a->cp_mode,
                 "Context-parallel attention: ring (K/V blocks around the cp ring) or ulysses "
                 "(all-to-all over heads)")
      ->capture_default_str();
  app.add_option("--max-activation-mb", c.max_activation_mb,
                 "Refuse a run whose activations per rank (model buffers and context-parallel "
                 "buffers) exceed this many MiB, before training")
      ->check(finite(NumberRange::positive()));
  app.add_option("--cp-chunks", a->cp_chunks,
                 "Ring chunking: zigzag (rank r holds chunks r and 2cp-1-r: balanced causal work) "
                 "or contiguous")
      ->capture_default_str();
  app.add_option("--pp", p.mesh.pp, "Pipeline stages (contiguous layers; ranks = tp x dp x pp)")
      ->capture_default_str();
  app.add_option("--schedule", a->pp_schedule, "Pipeline schedule: gpipe, 1f1b, interleaved, zb")
      ->capture_default_str();
  app.add_option("--micro-batches", p.pipeline.micro,
                 "Pipeline micro-batches per step (default: the accumulation count)");
  app.add_option("--virtual-stages", p.pipeline.virt, "Model chunks per stage (interleaved)")
      ->capture_default_str();
  app.add_option("--pp-split", a->pp_split, "Layers per (virtual) stage, e.g. 3,5 (default: balanced by cost)");
  app.add_flag("--sp,!--no-sp", p.sequence_parallel,
               "Sequence parallelism with --tp > 1 (default on): norms and residuals hold seq/tp "
               "tokens per rank");
  app.add_option("--backend", a->backend, "Communication backend: shm (this host), mpi (mpirun) or tcp (strata's sockets; one host or --hosts, through the remote shell)")
      ->capture_default_str();
  app.add_option("--zero", a->zero, "ZeRO stage: 0 (DDP), 1 (optimizer), 2 (+gradients), 3 (+parameters)")
      ->capture_default_str();
  app.add_option("--precision", a->precision,
                 "fp32, or bf16 (bf16 matmuls with fp32 accumulation, bf16 params/grads, fp32 "
                 "master and moments)")
      ->capture_default_str();
  app.add_option("--reduce-dtype", a->reduce_dtype,
                 "Gradient all-reduce / reduce-scatter dtype, fp32 or bf16 (FSDP's reduce_dtype; "
                 "default: the --precision)");
  app.add_option("--recompute", a->recompute,
                 "Activation recomputation: none, selective (norm and GELU outputs) or full (each "
                 "block's forward again before its backward); docs/recompute.md")
      ->capture_default_str();
  app.add_option("--recompute-layers", a->recompute_layers,
                 "With --recompute full: recompute only the first N blocks of every chunk (0: all)")
      ->capture_default_str();
  app.add_option("--recompute-inputs", a->recompute_inputs,
                 "With --recompute full and --precision bf16: keep the block inputs recomputation "
                 "starts from in fp32 or bf16 (half their bytes; the forward goes on from the "
                 "rounded value)")
      ->capture_default_str();
  app.add_option("--bucket-mb", p.dp.bucket_mb, "Gradient bucket cap in MiB")->capture_default_str();
  app.add_option("--prefetch", p.dp.prefetch, "ZeRO-3: layers gathered ahead of their use")
      ->capture_default_str();
  app.add_flag("--no-reshard-after-forward", [p = &p](int64_t) { p->dp.reshard_after_forward = false; },
               "ZeRO-3: keep parameters gathered between forward and backward");
  app.add_flag("--trace", p.trace, "Write a Chrome trace per rank (<run-dir>/trace-rank<R>.json)");
  app.add_option("--max-restarts", p.max_restarts,
                 "Restart the job from the latest checkpoint after a failure, up to R times")
      ->capture_default_str();
  app.add_option("--ckpt-every", c.ckpt.every, "Checkpoint every N steps into <run-dir>/ckpt (0: off)")
      ->capture_default_str();
  app.add_option("--mem-ckpt-every", c.ckpt.mem_every,
                 "Copy every rank's state into shared memory on its host every K steps, for a "
                 "restart that loses at most K steps and for --spike-action rollback (0: off)")
      ->capture_default_str();
  app.add_option("--mem-ckpt-replicas", a->mem_replicas,
                 "Peers on other hosts that also hold each in-memory copy, so a lost host's ranks "
                 "resume from memory under --elastic (0 or 1; 1 needs a second host)")
      ->capture_default_str();
  app.add_option("--mem-ckpt-replica-mbps", c.ckpt.mem_replica_mbps,
                 "Pace of each rank's replica sends in MB/s, so training's collectives keep the link "
                 "(0: unpaced); replicas are then as fresh as this pace allows")
      ->capture_default_str()
      ->check(finite(NumberRange::non_negative()));
  app.add_option("--ckpt-keep", c.ckpt.keep, "Keep the newest K checkpoints (0: all)")
      ->capture_default_str();
  app.add_option("--ckpt-max-failures", c.ckpt.max_failures,
                 "Stop the run when this many checkpoint saves in a row fail (0: never)")
      ->capture_default_str();
  app.add_option("--ckpt-keep-every", c.ckpt.keep_every, "Also keep every checkpoint whose step is a multiple of M");
  app.add_option("--resume", c.ckpt.resume,
                 "auto (latest good checkpoint in <run-dir>/ckpt; none: start fresh) or PATH "
                 "(a run dir, its ckpt/ dir or a step-* dir)")
      ->check(dir_path({"auto", "none"}));
  app.add_option("--mtbf", a->mtbf, "Mean time between failures (e.g. 4h): prints the optimal "
                 "checkpoint interval (Young, Daly) from the measured save stall");
  app.add_option("--straggler-every", c.straggler.every_steps,
                 "Compare the ranks' compute time every K steps (0: never)")
      ->capture_default_str();
  app.add_option("--straggler-pct", c.straggler.threshold_pct,
                 "Name ranks computing more than X% over the median")
      ->capture_default_str();
  a->faults.add_to(app);
  a->host_flags.add_to(app);
  app.add_option("--recovery", a->recovery,
                 "When a rank dies: restart the whole job (restart, with --max-restarts); continue on "
                 "the surviving data-parallel ranks from the in-memory copies (shrink); or continue "
                 "on them while a replacement starts and joins at a step boundary (live). shrink "
                 "and live: one host, --nproc, --mem-ckpt-every, dp and ZeRO 0-2 only")
      ->capture_default_str();
  app.add_flag("--elastic", p.elastic,
               "With --max-restarts across hosts: restart on the remaining hosts when one fails, resharding "
               "the checkpoint and the data position onto the smaller world");
  app.add_flag("--preflight", p.preflight,
               "Before step 1, run the bandwidth doctor (strata doctor net) over the job's ranks and hosts");
  add_moe_flags(app, *a);
  RunConfigFlags& config = add_run_config(app, "training");
  app.callback([&app, a, &config] {
    // Several hosts: their slots give the rank count unless --nproc says otherwise.
    const HostFlags::Resolved h = a->host_flags.resolve();
    train::ParallelConfig& pcfg = a->parallel;
    pcfg.hosts = h.hosts, pcfg.hosts_source = h.source, pcfg.rsh_agent = h.rsh_agent, pcfg.ifaces = h.ifaces;
    // A rank (started by the launcher) takes its world from the launcher, not the hosts,
    // which an --elastic restart may have left out.
    if (!h.hosts.empty() && !app.count("--nproc") && !comm::launched_as_rank())
      pcfg.nproc = launcher::total_slots(h.hosts);
    // One run specification, checked once before any rank starts (train/run_spec.h).
    train::RunSpec spec;
    spec.train = resolve(app, *a);
    spec.parallel = resolve_parallel(app, *a, spec.train);
    spec.given = {app.count("--dp") > 0, app.count("--schedule") > 0, app.count("--cp-mode") > 0,
                  app.count("--cp-chunks") > 0, app.count("--micro-batches") > 0};
    spec.validate();
    // A printed config is one that runs: it is checked as the run would be, then printed.
    if (config.print) {
      std::cout << resolved_config(app, "training");
      return;
    }
    const train::TrainConfig& cfg = spec.train;
    const train::ParallelConfig& pc = spec.parallel;
    // Flags that act only in another layout: accepted, and said once (not per rank).
    if (!comm::launched_as_rank()) {
      if (app.count("--no-sp") && pc.mesh_dims().tp == 1)
        std::cerr << "note: --no-sp does nothing without --tp (sequence parallelism splits the "
                     "tensor-parallel ranks' activations)\n";
      if (app.count("--prefetch") && pc.dp.stage < 3)
        std::cerr << "note: --prefetch does nothing below --zero 3 (it gathers ZeRO-3's sharded "
                     "layers ahead of their use)\n";
    }
    // The run dir keeps the resolved config: --config RUN/config.toml runs it again.
    if (!cfg.run_dir.empty() && !comm::launched_as_rank()) {
      ckpt::make_dirs(cfg.run_dir);
      ckpt::atomic_write_file(cfg.run_dir + "/config.toml", resolved_config(app, "training"));
    }
    // The kernel paths (STRATA_ISA, STRATA_KERNELS) are settled before any rank starts on
    // this host: a bad value, or a forced path that the CPU lacks or that fails its
    // self-check, is one line here. Ranks on other hosts choose (and refuse) on their own.
    if (!comm::launched_as_rank() && pc.hosts.empty())
      train::chosen_kernel_paths(pc.dp.precision == parallel::Precision::bf16);
    if (std::optional<int> code = train::launch_ranks_if_needed(cfg, pc)) {
      if (*code != 0) throw ExitCode{*code};
      return;
    }
    train::train_as_rank(cfg, pc);
  });
}

static Register reg("train", "Train a GPT model on one process or N data-parallel ranks", setup);

}  // namespace
}  // namespace strata::cli
