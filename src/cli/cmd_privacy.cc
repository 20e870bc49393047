// `strata privacy`: epsilon of DP-SGD / DP-FedAvg from the Renyi-DP accountant, or the noise
// multiplier needed for a target epsilon.
//
//   strata privacy --samples 60000 --batch 256 --noise-multiplier 1.1 --epochs 60 --delta 1e-5
//   strata privacy --samples 60000 --batch 256 --target-epsilon 3 --epochs 60 --delta 1e-5
//
// For client-level DP-FedAvg, samples = clients, batch = clients per round, steps = rounds.
#include <cstdio>

#include "cli/command.h"
#include "core/error.h"
#include "fed/accountant.h"
#include "nlohmann/json.hpp"

namespace strata::cli::cmd_privacy {
namespace {

struct PrivacyArgs {
  int64_t samples = 0, batch = 0, steps = -1;
  double sigma = 0, epochs = -1, delta = 1e-5, target = 0;
  std::string conversion = "improved";
  bool json = false;
};

void run_privacy(CLI::App& app, const PrivacyArgs& a) {
  STRATA_CHECK(a.samples > 0, "--samples must be positive (got ", a.samples, ")");
  STRATA_CHECK(a.batch > 0 && a.batch <= a.samples, "--batch must be in [1, --samples = ",
               a.samples, "] (got ", a.batch, ")");
  const bool by_epochs = app.count("--epochs") > 0, by_steps = app.count("--steps") > 0;
  STRATA_CHECK(by_epochs != by_steps, "give exactly one of --epochs and --steps");
  const bool inverse = app.count("--target-epsilon") > 0;
  STRATA_CHECK(inverse != (app.count("--noise-multiplier") > 0),
               "give exactly one of --noise-multiplier and --target-epsilon");
  fed::SgmQuery q;
  q.q = double(a.batch) / double(a.samples);
  q.steps = by_steps ? a.steps : fed::steps_for_epochs(a.epochs, a.samples, a.batch);
  STRATA_CHECK(q.steps >= 0, "--steps must be >= 0 (got ", q.steps, ")");
  q.delta = a.delta;
  q.conversion = fed::parse_conversion(a.conversion);
  if (!inverse) {
    STRATA_CHECK(a.sigma > 0, "--noise-multiplier must be > 0 (got ", a.sigma, ")");
    STRATA_CHECK(a.sigma <= 1e6, "--noise-multiplier must be at most 1e6 (got ", a.sigma, ")");
    q.sigma = a.sigma;
  } else {
    q.sigma = fed::sigma_for_epsilon(q, a.target);
  }
  const fed::PrivacySpent p = fed::epsilon(q);
  if (a.json) {
    nlohmann::json j = {{"q", q.q},           {"steps", q.steps},          {"noise_multiplier", q.sigma},
                        {"delta", q.delta},   {"epsilon", p.epsilon},      {"order", p.order},
                        {"conversion", a.conversion}};
    std::printf("%s\n", j.dump().c_str());
    return;
  }
  if (inverse)
    std::printf("noise multiplier %.4f reaches epsilon %.2f (target %.2f) at delta %g: "
                "q = %.6g, %lld steps, order %g, %s conversion\n",
                q.sigma, p.epsilon, a.target, q.delta, q.q, (long long)q.steps, p.order,
                a.conversion.c_str());
  else
    std::printf("epsilon %.2f at delta %g: q = %.6g, noise multiplier %g, %lld steps, order %g, "
                "%s conversion\n",
                p.epsilon, q.delta, q.q, q.sigma, (long long)q.steps, p.order, a.conversion.c_str());
}

void setup(CLI::App& app) {
  auto a = std::make_shared<PrivacyArgs>();
  app.add_option("--samples", a->samples, "Records in the data set (clients for DP-FedAvg)")
      ->check(number_in(1, 1e15))
      ->required();
  app.add_option("--batch", a->batch, "Records per step (clients per round)")->check(number_in(1, 1e15))->required();
  app.add_option("--noise-multiplier", a->sigma, "Noise standard deviation / clipping norm")
      ->check(number_in(-1e30, 1e30));
  app.add_option("--target-epsilon", a->target, "Print the noise multiplier that reaches it")
      ->check(number_in(0, 1e6, true));
  app.add_option("--epochs", a->epochs, "Passes over the data: steps = ceil(epochs N / B)")
      ->check(number_in(0, 1e6));
  app.add_option("--steps", a->steps, "Steps (rounds) instead of --epochs")->check(number_in(0, 1e12));
  app.add_option("--delta", a->delta, "delta of (epsilon, delta)-DP")->check(number_in(0, 1, true))->capture_default_str();
  app.add_option("--conversion", a->conversion,
                 "RDP to (eps, delta): improved (Balle et al. 2020; Opacus, TF-Privacy today) or "
                 "classic (Mironov 2017; TF-Privacy until 2022)")
      ->capture_default_str();
  app.add_flag("--json", a->json, "One JSON object instead of the line");
  app.callback([&app, a] { run_privacy(app, *a); });
}

Register reg_privacy("privacy", "Epsilon of DP-SGD / DP-FedAvg (Renyi-DP accountant), or sigma for a target",
             setup);

}  // namespace
}  // namespace strata::cli::cmd_privacy
