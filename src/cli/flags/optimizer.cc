#include "cli/flags/optimizer.h"

#include "cli/command.h"
#include "core/error.h"

namespace strata::cli {

void OptimizerFlags::add_to(CLI::App& app, const Only& only) {
  FamilyScope family(app, "Optimizer", "optimizer", only);
  app.add_option("--lr", lr, "Peak learning rate")->capture_default_str();
  app.add_option("--min-lr", min_lr, "Final learning rate of the cosine (default: lr / 10)")
      ->check(finite(NumberRange::non_negative()));
  app.add_option("--warmup", warmup, "Linear warmup steps (default: 5% of --steps)");
  app.add_option("--weight-decay", optim.weight_decay, "AdamW decoupled weight decay")->capture_default_str();
  app.add_option("--grad-clip", optim.grad_clip, "Global gradient-norm clip (<= 0: off)")->capture_default_str();
  app.add_option("--beta1", optim.beta1, "AdamW beta1 (first-moment decay)")->capture_default_str();
  app.add_option("--beta2", optim.beta2, "AdamW beta2")->capture_default_str();
  app.add_option_function<std::string>(
         "--optimizer", [this](const std::string& v) { optim.kind = parallel::parse_optimizer(v); },
         "adamw, or muon: orthogonalised momentum for the blocks' matrices, AdamW for the rest "
         "(docs/muon.md)")
      ->check(CLI::IsMember({"adamw", "muon"}))
      ->type_name("adamw|muon")
      ->default_str("adamw");
  app.add_option("--muon-momentum", optim.muon.momentum, "Muon's (Nesterov) momentum, in [0, 1)")
      ->capture_default_str();
  app.add_option("--ns-steps", optim.muon.ns_steps, "Muon's Newton-Schulz iterations (quintic, Jordan's coefficients)")
      ->capture_default_str();
  app.add_option("--muon-lr-scale", optim.muon.lr_scale,
                 "RMS of Muon's update relative to --lr (0.2 matches AdamW's, as Moonshot does: the "
                 "orthogonalised update is scaled by this x sqrt(max(rows, cols)))")
      ->capture_default_str();
}

double OptimizerFlags::resolved_min_lr(const CLI::App& app) const {
  // A given --min-lr is a real one: its check, finite(>= 0), refuses the sentinel.
  return app.count("--min-lr") ? min_lr : lr / 10;
}

int64_t OptimizerFlags::resolved_warmup(const CLI::App& app, int64_t steps) const {
  if (!app.count("--warmup")) return steps / 20;
  STRATA_CHECK(warmup >= 0, "--warmup must be >= 0 steps (got ", warmup, ")");
  return warmup;
}

}  // namespace strata::cli
