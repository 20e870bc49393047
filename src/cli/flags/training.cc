#include "cli/flags/training.h"

#include "cli/command.h"
#include "core/error.h"

namespace strata::cli {

void TrainingFlags::add_to(CLI::App& app, const Only& only) {
  FamilyScope family(app, "Training", "training", only);
  app.add_option("--seq", seq, "Training sequence length (default: the model's maximum)");
  app.add_option("--steps", steps, "Optimizer steps (at most 2^40)")->capture_default_str();
  app.add_option("--seed", seed, "Seed of initialisation, data order and sampling")
      ->capture_default_str()
      ->check(non_negative_integer());
  app.add_option("--batch", batch, "Global batch in sequences")->capture_default_str();
  app.add_option("--micro-batch", micro_batch,
                 "Sequences per rank per micro-step (default: --batch / ranks); "
                 "accumulation = batch / (micro-batch x ranks)");
  app.add_flag("--skip-nonfinite", guard.skip_nonfinite,
               "Skip (no update) a step whose loss or gradient norm is NaN or infinite, instead of "
               "stopping the run");
  app.add_option("--spike-zscore", guard.zscore,
                 "Skip a step whose loss or gradient norm is Z standard deviations above the "
                 "last --spike-window steps' mean (0: off)")
      ->capture_default_str();
  app.add_option("--spike-window", guard.window, "Accepted steps the spike check compares with")
      ->capture_default_str();
  app.add_option("--spike-action", spike_action,
                 "What a refused step does: skip, or rollback (restore the newest in-memory "
                 "checkpoint, skip the batch, continue from the copy's step; needs "
                 "--mem-ckpt-every)")
      ->capture_default_str();
  app.add_option("--max-skipped-steps", guard.max_skipped, "Stop the run when more steps than this were skipped")
      ->capture_default_str();
  app.add_option("--eval-every", eval_every, "Held-out eval every K steps (0: only at the end)")
      ->capture_default_str();
  app.add_option("--eval-batches", eval_batches,
                 "Held-out sequences per eval, in global batches of --batch sequences (the "
                 "same sequences for any layout or micro-batch split)")
      ->capture_default_str();
  app.add_option("--sample-every", sample_every, "Generate text every K steps (0: at the end)")
      ->capture_default_str();
  app.add_option("--sample-tokens", sample_tokens, "Tokens per sample (0: no sampling; at most 4096)")
      ->capture_default_str();
  app.add_option("--precision", precision,
                 "fp32, or bf16 (bf16 matmuls with fp32 accumulation, bf16 params/grads, fp32 "
                 "master and moments)")
      ->capture_default_str();
  app.add_option("--reduce-dtype", reduce_dtype,
                 "Gradient all-reduce / reduce-scatter dtype, fp32 or bf16 (FSDP's reduce_dtype; "
                 "default: the --precision)");
  app.add_option("--recompute", recompute,
                 "Activation recomputation: none, selective (norm and GELU outputs) or full (each "
                 "block's forward again before its backward); docs/recompute.md")
      ->capture_default_str();
  app.add_option("--recompute-layers", recompute_layers,
                 "With --recompute full: recompute only the first N blocks of every chunk (0: all)")
      ->capture_default_str();
  app.add_option("--recompute-inputs", recompute_inputs,
                 "With --recompute full and --precision bf16: keep the block inputs recomputation "
                 "starts from in fp32 or bf16 (half their bytes; the forward goes on from the "
                 "rounded value)")
      ->capture_default_str();
}

model::RecomputePolicy TrainingFlags::recompute_policy() const {
  return {model::parse_recompute_mode(recompute), recompute_layers, model::parse_recompute_inputs(recompute_inputs)};
}

void TrainingFlags::apply_precision(const CLI::App& app, parallel::DataParallelOptions& dp) const {
  dp.precision = parallel::parse_precision(precision);
  STRATA_CHECK(!model::parse_recompute_inputs(recompute_inputs) || dp.precision == parallel::Precision::bf16,
               "--recompute-inputs bf16 needs --precision bf16 (under fp32 every activation is fp32)");
  if (!app.count("--reduce-dtype")) return;
  STRATA_CHECK(reduce_dtype == "fp32" || reduce_dtype == "bf16", "--reduce-dtype ",
               reduce_dtype.empty() ? "''" : reduce_dtype, ": expected fp32 or bf16");
  dp.reduce_precision = parallel::parse_precision(reduce_dtype);
}

train::GuardConfig TrainingFlags::resolved_guard() const {
  STRATA_CHECK(spike_action == "skip" || spike_action == "rollback", "--spike-action ", spike_action,
               " is not skip or rollback");
  train::GuardConfig g = guard;
  g.rollback = spike_action == "rollback";
  return g;
}

}  // namespace strata::cli
