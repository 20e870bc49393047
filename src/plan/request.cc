#include "plan/request.h"

#include <cmath>
#include <cstdio>
#include <optional>
#include <utility>

#include "core/error.h"
#include "core/finite.h"
#include "model/model_part.h"
#include "model/presets.h"
#include "parallel/pipeline/schedule.h"

namespace strata::plan {

double parse_count(const std::string& flag, const std::string& s) {
  size_t used = 0;
  double x = 0;
  try {
    x = std::stod(s, &used);
  } catch (const std::exception&) {
    fail(flag, " '", s, "' is not a number (e.g. 300B, 2T, 1.5e12)");
  }
  const std::string problem = number_problem(s.substr(0, used), NumberRange::non_negative());
  STRATA_CHECK(problem.empty(), flag, " '", s, "': ", problem);
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

namespace {

ModelSpec build_model(const PlanArgs& a) {
  ModelSpec m;
  const bool preset = !a.model.empty();
  if (preset) {
    m = model_preset(a.model);
    if (a.arch) apply_arch(m, *a.arch);
  } else {
    const std::pair<const char*, bool> needed[] = {{"--layers", a.layers.has_value()},
                                                   {"--hidden", a.hidden.has_value()},
                                                   {"--heads", a.heads.has_value()},
                                                   {"--seq", a.seq.has_value()},
                                                   {"--vocab", a.vocab.has_value()}};
    for (const auto& [k, given] : needed)
      STRATA_CHECK(
          given, "give --model PRESET (",
          [] {
            return model::model_preset_list(/*published_first=*/true);
          }(),
          ") or --layers, --hidden, --heads, --seq and --vocab (missing ", k, ")");
    apply_arch(m, a.arch.value_or("gpt"));
    m.name = "custom";
  }
  auto set = [](const std::optional<int64_t>& v, int64_t& field) {
    if (v) field = *v;
  };
  set(a.layers, m.layers);
  set(a.hidden, m.hidden);
  set(a.heads, m.heads);
  set(a.seq, m.seq);
  set(a.vocab, m.vocab);
  set(a.experts, m.experts);
  set(a.top_k, m.top_k);
  if (!preset) {
    m.kv_heads = m.heads;
    m.ffn = cost::default_ffn(m.mlp == MlpKind::swiglu, m.hidden);
  } else {
    // A preset's sizing rules follow its overridden sizes, as `strata train` applies them:
    // the MLP width rule when the preset has no width of its own, multi-head attention when
    // its key/value heads are its heads.
    const model::ModelPreset& p = model::find_model_preset(a.model);
    if (a.hidden && p.ffn == 0) m.ffn = cost::default_ffn(m.mlp == MlpKind::swiglu, m.hidden);
    if (a.heads && (p.kv_heads == 0 || p.kv_heads == p.heads)) m.kv_heads = m.heads;
  }
  set(a.kv_heads, m.kv_heads);
  set(a.ffn, m.ffn);
  // Given, a width is a width: 0 (the dense MLP's) is what leaving the flag out means.
  STRATA_CHECK(!a.expert_ffn || *a.expert_ffn > 0, "--expert-ffn must be positive (got ",
               a.expert_ffn.value_or(0), ")");
  set(a.expert_ffn, m.expert_ffn);
  set(a.shared_experts, m.shared_experts);
  set(a.route_groups, m.route_groups);
  set(a.route_max_groups, m.route_max_groups);
  if (m.experts > 0 && m.top_k == 0) m.top_k = std::min<int64_t>(2, m.experts);
  if (preset && (a.layers || a.hidden || a.heads || a.ffn || a.experts || a.expert_ffn ||
                 a.shared_experts || a.route_groups || a.route_max_groups))
    m.name += " (modified)";
  m.validate();
  return m;
}

GpuSpec build_gpu(const PlanArgs& a, std::vector<std::string>& notes) {
  GpuSpec g = load_gpu(a.gpu);
  if (a.gpus_per_node) {
    STRATA_CHECK(*a.gpus_per_node >= 1 && *a.gpus_per_node <= (int64_t(1) << 24),
                 "--gpus-per-node must be in [1, 2^24] (got ", *a.gpus_per_node, ")");
    g.gpus_per_node = int(*a.gpus_per_node);
  }
  if (a.efficiency) {
    STRATA_CHECK(*a.efficiency > 0 && *a.efficiency <= 1, "--efficiency must be in (0, 1]");
    g.efficiency = *a.efficiency;
  }
  auto fit = [&](const std::string& path, Link& link, const char* where) {
    FittedLink fl = fit_link_from_bench(path);
    link = fl.link;
    char b[256];
    std::snprintf(b, sizeof b, "%s link from %s: %d %s rows on %d ranks -> %.1f GB/s, %.2f us/step",
                  where, path.c_str(), fl.rows, fl.op.c_str(), fl.ranks, link.gbps, link.alpha_us);
    notes.push_back(b);
  };
  if (!a.intra_bench.empty()) fit(a.intra_bench, g.intra, "intra-node");
  if (!a.inter_bench.empty()) fit(a.inter_bench, g.inter, "inter-node");
  g.validate("--gpu " + a.gpu);
  return g;
}

// The reliability inputs, finite and within a century / a petabyte per second so that every
// interval and percentage printed is a number, and the last ranges (in the CLI's order).
void set_reliability(const PlanArgs& a, PlanRequest& req) {
  constexpr double kCenturyH = 100 * 365.25 * 24;
  auto in_range = [](double v, double lo, double hi) { return std::isfinite(v) && v >= lo && v <= hi; };
  STRATA_CHECK(in_range(a.gpu_mtbf_h, 1e-6, 1e9) && a.gpu_mtbf_h > 0,
               "--gpu-mtbf-hours must be in (0, 1e9] (got ", a.gpu_mtbf_h, ")");
  STRATA_CHECK(in_range(a.job_mtbf_h, 0, kCenturyH), "--job-mtbf-hours must be in [0, ", kCenturyH,
               "] (got ", a.job_mtbf_h, ")");
  STRATA_CHECK(in_range(a.storage_gbps, 1e-6, 1e6), "--storage-gbps must be in (0, 1e6] (got ",
               a.storage_gbps, ")");
  STRATA_CHECK(in_range(a.restart_min, 0, kCenturyH * 60), "--restart-min must be in [0, ",
               kCenturyH * 60, "] (got ", a.restart_min, ")");
  if (a.stall_s)
    STRATA_CHECK(in_range(*a.stall_s, 0, kCenturyH * 3600), "--ckpt-stall-s must be in [0, ",
                 kCenturyH * 3600, "] seconds (got ", *a.stall_s, ")");
  STRATA_CHECK(in_range(a.bucket_mb, 1e-6, 1 << 20), "--bucket-mb must be in (0, 2^20] (got ",
               a.bucket_mb, ")");
  STRATA_CHECK(!a.rollout_batch || (*a.rollout_batch >= 1 && *a.rollout_batch <= (int64_t(1) << 31)),
               "--rollout-batch must be in [1, 2^31] (got ", a.rollout_batch.value_or(0), ")");
  STRATA_CHECK(req.train_tokens >= 0 && req.train_tokens <= 1e18,
               "--tokens must be at most 1e18 (got ", req.train_tokens, ")");
  req.gpu_mtbf_hours = a.gpu_mtbf_h;
  req.job_mtbf_hours = a.job_mtbf_h;
  req.storage_gbps = a.storage_gbps;
  req.restart_minutes = a.restart_min;
  req.ckpt_stall_s = a.stall_s.value_or(-1);
}

// The RL algorithm's models on the setup's GPUs: tp and ZeRO over the data ranks only.
RlhfSetup rlhf_setup(const PlanArgs& a, const TrainSetup& s, const FixedLayout& fx) {
  RlhfSetup r;
  r.algo = parse_rl_algo(a.algo.value_or("ppo"));
  STRATA_CHECK(a.critic.empty() || r.algo != RlAlgo::dpo,
               "--critic names the reward model (and PPO's critic); --algo dpo has neither");
  r.actor = s.model;
  r.critic = a.critic.empty() ? s.model : model_preset(a.critic);
  if (!a.critic.empty() && a.seq) r.critic.seq = s.model.seq;
  r.gpu = s.gpu;
  r.gpus = s.gpus;
  r.tp = fx.tp.value_or(1);
  r.zero = fx.zero.value_or(3);
  r.precision = s.precision;
  r.fp32_grads = s.fp32_grads;
  r.optimizer = s.optimizer;
  r.micro_batch = fx.micro_batch.value_or(1);
  r.recompute = fx.recompute.value_or(Recompute::full);
  r.rollout_batch = a.rollout_batch.value_or(8);
  // Prompt and response: as given, else 256 tokens each, halves of a shorter context.
  const int64_t seq = s.model.seq;
  r.prompt_len = a.prompt_len.value_or(std::max<int64_t>(1, std::min(r.prompt_len, seq / 2)));
  r.response_len =
      a.response_len.value_or(std::max<int64_t>(1, std::min(r.response_len, seq - r.prompt_len)));
  const bool within =  // each bounded first: the sum of two int64 may not overflow
      r.prompt_len <= seq && r.response_len <= seq && r.prompt_len + r.response_len <= seq;
  STRATA_CHECK(!(a.prompt_len || a.response_len) || within, "--prompt-len ", r.prompt_len,
               " + --response-len ", r.response_len, " is beyond the model's context of ", seq,
               " tokens");
  r.epochs = a.epochs.value_or(1);
  STRATA_CHECK(r.epochs >= 1 && r.epochs <= 1000000, "--epochs must be in [1, 1e6] (got ",
               r.epochs, ")");
  r.headroom = s.headroom;
  r.seq_parallel = s.seq_parallel;
  STRATA_CHECK(!fx.pp && !fx.cp && !fx.ep && !fx.dp,
               "--rlhf plans tp and ZeRO over the data ranks only (no --pp, --cp, --ep, --dp)");
  return r;
}

// The flags that shape an RLHF plan, refused without --rlhf.
void check_rlhf_only(const PlanArgs& a) {
  const std::pair<const char*, bool> given[] = {{"--algo", a.algo.has_value()},
                                                {"--prompt-len", a.prompt_len.has_value()},
                                                {"--response-len", a.response_len.has_value()},
                                                {"--epochs", a.epochs.has_value()}};
  for (const auto& [flag, set] : given)
    STRATA_CHECK(a.rlhf || !set, flag, " shapes an RLHF plan: add --rlhf");
}

}  // namespace

PlanRequest build_plan_request(const PlanArgs& a) {
  PlanRequest req;
  TrainSetup& s = req.setup;
  s.model = build_model(a);
  s.gpu = build_gpu(a, req.notes);
  s.gpus = a.gpus.value_or(s.gpu.gpus_per_node);
  STRATA_CHECK(s.gpus >= 1 && s.gpus <= (int64_t(1) << 24), "--gpus must be in [1, 2^24] (got ",
               s.gpus, ")");
  STRATA_CHECK(a.precision == "bf16" || a.precision == "fp32", "--precision '", a.precision,
               "' is not known (bf16, fp32)");
  s.precision = a.precision == "bf16" ? Precision::bf16 : Precision::fp32;
  STRATA_CHECK(a.grad_precision.empty() || a.grad_precision == "bf16" || a.grad_precision == "fp32",
               "--grad-precision '", a.grad_precision, "' is not known (bf16, fp32)");
  STRATA_CHECK(!(s.precision == Precision::fp32 && a.grad_precision == "bf16"),
               "--grad-precision bf16 needs --precision bf16");
  s.fp32_grads = a.grad_precision == "fp32";
  STRATA_CHECK(a.optimizer == "adamw" || a.optimizer == "sgd" || a.optimizer == "muon", "--optimizer '",
               a.optimizer, "' is not known (adamw, sgd, muon)");
  s.optimizer = a.optimizer == "adamw" ? Optimizer::adamw : a.optimizer == "sgd" ? Optimizer::sgd : Optimizer::muon;
  s.seq_parallel = !a.no_sp;
  const std::optional<CpMode> cp_mode = model::cp_mode_from_name(a.cp_mode);
  STRATA_CHECK(cp_mode, "--cp-mode '", a.cp_mode, "' is not known (ring, ulysses)");
  s.cp_mode = *cp_mode;
  STRATA_CHECK(a.headroom >= 0 && a.headroom < 1, "--headroom must be in [0, 1)");
  s.headroom = a.headroom;
  STRATA_CHECK(a.bucket_mb > 0, "--bucket-mb must be positive");
  s.bucket_mib = a.bucket_mb;
  STRATA_CHECK(a.overlap >= 0 && a.overlap <= 1, "--overlap must be in [0, 1] (got ", a.overlap, ")");
  s.overlap = a.overlap;
  s.schedule = parallel::pipeline::parse_schedule(a.schedule);
  s.virtual_stages = a.virtual_stages;
  if (a.micro_batches) {
    STRATA_CHECK(*a.micro_batches >= 1 && *a.micro_batches <= (int64_t(1) << 31),
                 "--micro-batches must be in [1, 2^31] (got ", *a.micro_batches, ")");
    s.micro_batches = *a.micro_batches;
  }
  if (a.global_batch)
    // Below 2^31: the schedule's micro-batch count is an int (2^31 read as -2147483648).
    STRATA_CHECK(*a.global_batch > 0 && *a.global_batch < (int64_t(1) << 31),
                 "--global-batch must be in [1, 2^31) sequences (got ", *a.global_batch, ")");
  s.global_batch = a.global_batch.value_or(s.model.global_batch);
  STRATA_CHECK(a.rlhf || s.global_batch > 0,
               "--global-batch is needed (sequences per step; this model has no published one)");

  FixedLayout& fx = req.fixed;
  fx.tp = a.tp, fx.pp = a.pp, fx.dp = a.dp, fx.cp = a.cp, fx.ep = a.ep, fx.zero = a.zero;
  fx.micro_batch = a.micro_batch;
  STRATA_CHECK(s.optimizer != Optimizer::muon || fx.tp.value_or(1) <= s.model.kv_heads, "--optimizer muon with --tp ",
               fx.tp.value_or(1), " and ", s.model.kv_heads, " key/value heads: ranks sharing a key/value head hold the "
               "same k and v rows, and Muon gathers each matrix from equal slices");
  if (a.recompute) fx.recompute = model::parse_recompute_mode(*a.recompute);

  req.train_tokens = a.tokens ? parse_count("--tokens", *a.tokens) : s.model.train_tokens;
  STRATA_CHECK(a.top >= 1, "--top must be at least 1");
  req.top = a.top;
  set_reliability(a, req);
  check_rlhf_only(a);
  if (a.rlhf) req.rlhf = rlhf_setup(a, s, fx);
  return req;
}

}  // namespace strata::plan
