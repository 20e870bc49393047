#include "train/config.h"

#include <algorithm>
#include <cmath>

#include "comm/bootstrap.h"
#include "core/error.h"
#include "data/dataset.h"
#include "data/sampler.h"

namespace strata::train {

using nlohmann::json;

int TrainConfig::accum(int world) const {
  int b = micro_batch > 0 ? micro_batch : batch / std::max(world, 1);
  STRATA_CHECK(b > 0 && world > 0 && batch % (int64_t(b) * world) == 0, "--batch ", batch,
               " is not divisible by --micro-batch ", b, " x ", world,
               " data-parallel rank(s): accumulation steps must be a whole number");
  return batch / (b * world);
}

void TrainConfig::validate(int world) const {
  model.validate();
  STRATA_CHECK(seq >= 0, "--seq must be positive (got ", seq, ")");
  STRATA_CHECK(train_seq() <= model.seq, "--seq ", train_seq(),
               " exceeds the model's maximum sequence length ", model.seq,
               " (rows of its position table; raise it with --max-seq)");
  STRATA_CHECK(batch > 0, "--batch must be positive (got ", batch, ")");
  STRATA_CHECK(micro_batch >= 0, "--micro-batch must be positive (got ", micro_batch, ")");
  STRATA_CHECK(micro_batch > 0 || batch % world == 0, "--batch ", batch,
               " is not divisible by the ", world, " data-parallel ranks");
  accum(world);
  schedule.validate();
  STRATA_CHECK(optim.weight_decay >= 0, "--weight-decay must be >= 0 (got ", optim.weight_decay,
               ")");
  STRATA_CHECK(optim.beta1 >= 0 && optim.beta1 < 1 && optim.beta2 >= 0 && optim.beta2 < 1,
               "AdamW betas must be in [0, 1) (got ", optim.beta1, ", ", optim.beta2, ")");
  STRATA_CHECK(std::isfinite(optim.grad_clip), "--grad-clip must be a number");
  STRATA_CHECK(optim.muon.momentum >= 0 && optim.muon.momentum < 1,
               "--muon-momentum must be in [0, 1) (got ", optim.muon.momentum, ")");
  STRATA_CHECK(optim.muon.ns_steps >= 1 && optim.muon.ns_steps <= 100,
               "--ns-steps must be in [1, 100] Newton-Schulz iterations (got ", optim.muon.ns_steps, ")");
  STRATA_CHECK(std::isfinite(optim.muon.lr_scale) && optim.muon.lr_scale > 0,
               "--muon-lr-scale must be a positive number (got ", optim.muon.lr_scale, ")");
  STRATA_CHECK(eval_every >= 0, "--eval-every must be >= 0 (got ", eval_every, ")");
  STRATA_CHECK(eval_batches > 0, "--eval-batches must be positive (got ", eval_batches, ")");
  // An eval is one plan of eval_batches x batch samples (data/sampler.h): bounded here, so a
  // huge count is refused before training rather than at the first eval.
  STRATA_CHECK(int64_t(eval_batches) * batch <= data::kMaxPlanSlots, "--eval-batches ",
               eval_batches, " x --batch ", batch, " = ", int64_t(eval_batches) * batch,
               " held-out sequences per eval, past the limit of ", data::kMaxPlanSlots);
  STRATA_CHECK(sample_every >= 0, "--sample-every must be >= 0 (got ", sample_every, ")");
  // Each sampled token runs the model over the window (no KV cache): bounded, so a typo does
  // not cost half an hour at the end of a run.
  STRATA_CHECK(sample_tokens >= 0 && sample_tokens <= kMaxSampleTokens,
               "--sample-tokens must be in [0, ", kMaxSampleTokens, "] (got ", sample_tokens, ")");
  STRATA_CHECK(log_every > 0, "--log-every must be positive (got ", log_every, ")");
  STRATA_CHECK(threads >= 0, "--threads must be positive (got ", threads, ")");
  STRATA_CHECK(peak_gflops >= 0, "--peak-gflops must be positive (got ", peak_gflops, ")");
  STRATA_CHECK(val_fraction > 0 && val_fraction < 1, "validation fraction must be in (0, 1) (got ",
               val_fraction, ")");
  data::parse_tail_policy(tail);  // throws naming a policy that does not exist
  STRATA_CHECK(doc_token < 0 || doc_mask, "--doc-token ", doc_token, " needs --doc-mask");
  STRATA_CHECK(doc_token < model.vocab, "--doc-token ", doc_token, " is outside the vocabulary [0, ",
               model.vocab, ")");
  STRATA_CHECK(straggler.every_steps >= 0, "--straggler-every must be >= 0 (got ",
               straggler.every_steps, ")");
  STRATA_CHECK(straggler.threshold_pct >= 0, "--straggler-pct must be >= 0 (got ",
               straggler.threshold_pct, ")");
  STRATA_CHECK(prefetch >= 0, "prefetch must be >= 0 (got ", prefetch, ")");
  guard.validate();
}

json TrainConfig::to_json() const {
  nlohmann::json j = to_json_dense();
  j.update(model.arch_json());  // a Llama run's architecture keys (model/model_part.h)
  if (doc_mask) j["doc_mask"] = {{"doc_token", doc_token}};  // -1: the data's
  if (!init_from.empty()) j["init_from"] = init_from;
  j["optimizer"] = parallel::optimizer_name(optim.kind);
  if (optim.kind == parallel::OptimizerKind::muon)  // docs/muon.md
    j["muon"] = {{"momentum", optim.muon.momentum},
                 {"ns_steps", optim.muon.ns_steps},
                 {"lr_scale", optim.muon.lr_scale},
                 {"nesterov", optim.muon.nesterov}};
  if (model.moe.enabled())  // docs/moe.md
    j["moe"] = {{"experts", model.moe.experts},
                {"top_k", model.moe.top_k},
                {"every", model.moe.every},
                {"capacity_factor", model.moe.dropless ? nlohmann::json()
                                                       : nlohmann::json(model.moe.capacity_factor)},
                {"dropless", model.moe.dropless},
                {"aux_loss_coef", model.moe.aux_coef},
                {"z_loss_coef", model.moe.z_coef},
                {"router_jitter", model.moe.jitter}};
  if (model.moe.enabled()) {  // DeepSeek-style settings, when set (older runs' keys unchanged)
    const auto& x = model.moe;
    nlohmann::json& moe = j["moe"];
    if (x.bias_rate > 0) moe["router_bias_update_rate"] = x.bias_rate;
    if (x.expert_ffn > 0) moe["expert_ffn"] = x.expert_ffn;
    if (x.shared_experts > 0) moe["shared_experts"] = x.shared_experts;
    if (x.score == model::expert::RouterScore::sigmoid) moe["router_score"] = "sigmoid";
    if (x.aux_scope == model::expert::AuxScope::sequence) moe["aux_loss_scope"] = "sequence";
    if (x.route_max_groups > 0) moe["route_groups"] = {x.route_groups, x.route_max_groups};
  }
  return j;
}

json TrainConfig::to_json_dense() const {
  return {{"model", model_name},
          {"layers", model.layers},
          {"dim", model.dim},
          {"heads", model.heads},
          {"max_seq", model.seq},
          {"vocab", model.vocab},
          {"padded_vocab", model.padded_vocab},
          {"seq", train_seq()},
          {"data", data},
          {"tail", tail},
          {"seed", seed},
          {"batch", batch},
          {"micro_batch", micro_batch},
          {"steps", schedule.steps},
          {"lr", schedule.lr},
          {"min_lr", schedule.min_lr},
          {"warmup", schedule.warmup},
          {"weight_decay", optim.weight_decay},
          {"grad_clip", optim.grad_clip},
          {"beta1", optim.beta1},
          {"beta2", optim.beta2},
          {"eps", optim.eps},
          {"eval_every", eval_every},
          {"eval_batches", eval_batches},
          {"sample_every", sample_every},
          {"sample_tokens", sample_tokens},
          {"threads", threads}};
}

Recovery parse_recovery(const std::string& name) {
  for (Recovery r : {Recovery::restart, Recovery::shrink, Recovery::live})
    if (name == recovery_name(r)) return r;
  fail("--recovery ", name.empty() ? "''" : name, ": expected restart (the whole job restarts, "
       "with --max-restarts), shrink (the surviving data-parallel ranks continue) or live (they "
       "continue, and a replacement joins them)");
}

const char* recovery_name(Recovery r) {
  switch (r) {
    case Recovery::restart: return "restart";
    case Recovery::shrink: return "shrink";
    case Recovery::live: return "live";
  }
  return "?";
}

int ParallelConfig::world() const {
  return comm::launched_as_rank() ? comm::detect_rank_env().world_size : nproc;
}

}  // namespace strata::train
