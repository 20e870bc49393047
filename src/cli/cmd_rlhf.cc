// `strata rlhf reward`: a reward model (GPT trunk + value head) trained on preference pairs.
// `strata rlhf ppo`: PPO with actor, reference, reward model and critic (rlhf/ppo.h).
// `strata rlhf grpo`, `strata rlhf rloo`: the critic-free policy gradients (rlhf/ppo.h).
// `strata rlhf dpo`: direct preference optimisation on pairs, no generation (rlhf/dpo.h).
// `strata rlhf generate`: KV-cache generation against the uncached path, tokens/s.
//
//   strata train --layers 2 --dim 64 --heads 2 --max-seq 64 --steps 300 --ckpt-every 300 --run-dir sft
//   strata rlhf reward --init sft --pairs synthetic -o rm.safetensors
//   strata rlhf ppo --actor sft --reward rm.safetensors --run-dir ppo --iterations 30
#include <cstdio>
#include <iostream>
#include <cstdlib>
#include <limits>
#include <memory>

#include <thread>

#include "cli/command.h"
#include "cli/flags/metrics.h"
#include "cli/flags/optimizer.h"
#include "cli/flags/parallel.h"
#include "cli/flags/training.h"
#include "cli/run_config.h"
#include "comm/bootstrap.h"
#include "comm/process_group.h"
#include "core/error.h"
#include "launcher/launcher.h"
#include "launcher/rank_status.h"
#include "rlhf/dpo.h"
#include "rlhf/kv_cache.h"
#include "rlhf/model_io.h"
#include "rlhf/ppo.h"
#include "rlhf/reward.h"
#include "train/distributed.h"

namespace strata::cli {
namespace {

using nlohmann::json;

// The preference pairs of `rlhf reward` and `rlhf dpo`: a file, or sampled from the starting
// model and ranked by the seeded gold rule; a share held out.
struct PairFlags {
  std::string pairs = "synthetic", save_pairs;
  int64_t num_pairs = 512;
  int prompt_len = 8, response_len = 16, gen_batch = 32;
  double eval_fraction = 0.2;
  uint64_t gold_seed = 1;
  float temperature = 1.0f;

  void add_to(CLI::App& app) {
    app.add_option("--pairs", pairs, "Preference pairs: FILE (PROMPT | CHOSEN | REJECTED per line) or synthetic")
        ->check(plain_path(false, "synthetic"))->capture_default_str();
    app.add_option("--num-pairs", num_pairs, "Synthetic pairs to sample")->check(number_in(2, 1e6))->capture_default_str();
    app.add_option("--prompt-len", prompt_len, "Synthetic prompt tokens")->check(number_in(1, 1 << 20))->capture_default_str();
    app.add_option("--response-len", response_len, "Synthetic response tokens")
        ->check(number_in(1, 1 << 20))->capture_default_str();
    app.add_option("--temperature", temperature, "Sampling temperature of synthetic responses")
        ->check(number_in(0, 1e6, true))->capture_default_str();
    app.add_option("--gold-seed", gold_seed, "Seed of the gold rule (docs/rlhf.md)")
        ->check(non_negative_integer())->capture_default_str();
    app.add_option("--save-pairs", save_pairs, "Also write the pairs used to FILE")->check(plain_path(false));
    app.add_option("--eval-fraction", eval_fraction, "Pairs held out for evaluation")
        ->check(number_in(0, 1))->capture_default_str();
  }

  // The pairs, split into training and held-out ones; synthetic pairs are sampled from
  // `init` (named by `init_flag`) with `seed`.
  std::pair<rlhf::PairSet, rlhf::PairSet> load(const rlhf::ModelFile& init, const std::string& init_path,
                                               const char* init_flag, uint64_t seed) const {
    STRATA_CHECK(eval_fraction >= 0 && eval_fraction < 1, "--eval-fraction must be in [0, 1) (got ", eval_fraction, ")");
    rlhf::PairSet all;
    if (pairs == "synthetic") {
      STRATA_CHECK(num_pairs >= 2, "--num-pairs must be >= 2 (got ", num_pairs, ")");
      STRATA_CHECK(prompt_len + response_len <= init.cfg.seq, "--response-len ", response_len, " + --prompt-len ",
                   prompt_len, " is beyond the context of ", init_flag, " ", init_path, " (", init.cfg.seq, ")");
      rlhf::KvDecoder dec(init.cfg, std::max(2, gen_batch));
      dec.bind(init.params.data());
      all = rlhf::synthetic_pairs(dec, init.cfg, rlhf::GoldRule(gold_seed, init.cfg.vocab), num_pairs, prompt_len,
                                  response_len, {temperature, 0}, seed);
    } else {
      all = rlhf::read_pairs(pairs, init.cfg.vocab);
      STRATA_CHECK(all.P + all.R <= init.cfg.seq, "--pairs ", pairs, ": ", all.P, " + ", all.R,
                   " tokens per sequence, beyond the context of ", init_flag, " ", init_path, " (", init.cfg.seq, ")");
    }
    if (!save_pairs.empty()) rlhf::write_pairs(save_pairs, all);
    const int64_t n_eval = int64_t(double(all.size()) * eval_fraction);
    STRATA_CHECK(all.size() - n_eval >= 1, "--pairs: ", all.size(), " pairs leave none for training");
    return {all.slice(0, all.size() - n_eval), all.slice(all.size() - n_eval, all.size())};
  }
};

struct RewardArgs {
  std::string init, out;
  PairFlags pairs;
  rlhf::RewardConfig cfg;
  int log_every = 20;
  bool json = false;
  // The families shared with `strata train`: steps, batch, seed, lr, weight decay, logging.
  TrainingFlags training;
  OptimizerFlags optimizer;
  MetricsFlags metrics;

  // After parsing: the family settings into the run's config.
  void resolve() {
    cfg.steps = int(training.steps);
    cfg.batch = training.batch;
    cfg.seed = training.seed;
    cfg.lr = float(optimizer.lr);
    cfg.optim.weight_decay = optimizer.optim.weight_decay;
    log_every = metrics.log_every;
    json = metrics.json;
  }
};

void run_reward(const RewardArgs& a) {
  STRATA_CHECK(!a.out.empty(), "-o/--out: where to write the reward model is required");
  STRATA_CHECK(a.cfg.batch >= 1 && a.cfg.steps >= 1, "--batch and --steps must be >= 1");
  rlhf::ModelFile init = rlhf::load_model(a.init, "--init");
  const auto [train, eval] = a.pairs.load(init, a.init, "--init", a.cfg.seed);
  // The trunk's parameters and gradients belong to the engine train_reward builds.
  rlhf::ValueModel rm(init.cfg, 2 * a.cfg.batch, /*trainable=*/true, /*allocate_state=*/false);
  if (!init.head.empty()) rm.head() = init.head;
  auto log = [&](const json& r) {
    if (a.json) std::printf("%s\n", r.dump().c_str());
    else if (r["step"].get<int>() % a.log_every == 0)
      std::printf("step %5d  loss %.4f  grad norm %.3f\n", r["step"].get<int>(), r["loss"].get<double>(),
                  r["grad_norm"].get<double>());
    std::fflush(stdout);
  };
  const rlhf::RewardResult res = rlhf::train_reward(rm, init.params, train, eval, a.cfg, log);
  const double before = res.eval_accuracy_before;
  rlhf::save_model(a.out, init.cfg, res.params.data(), rm.head(),
                   {{"role", "reward"}, {"gold_seed", std::to_string(a.pairs.gold_seed)},
                    {"eval_accuracy", std::to_string(res.eval_accuracy)}});
  const json summary = {{"pairs", train.size() + eval.size()},        {"train_pairs", train.size()},
                        {"eval_pairs", eval.size()},    {"eval_accuracy_before", before},
                        {"train_accuracy", res.train_accuracy}, {"eval_accuracy", res.eval_accuracy},
                        {"final_loss", res.losses.back()}, {"out", a.out}};
  if (a.json) {
    std::printf("%s\n", json{{"summary", summary}}.dump().c_str());
  } else {
    std::printf("reward model: held-out pair accuracy %.3f (%lld pairs; %.3f before training, ties counted wrong), "
                "train %.3f (%lld pairs) -> %s\n",
                res.eval_accuracy, (long long)eval.size(), before, res.train_accuracy,
                (long long)train.size(), a.out.c_str());
  }
}

void setup_reward(CLI::App& app) {
  auto a = std::make_shared<RewardArgs>();
  // The families shared with `strata train`, with this command's defaults and ranges (--batch
  // counts preference pairs).
  TrainingFlags& t = a->training;
  t.steps = a->cfg.steps, t.batch = a->cfg.batch, t.seed = a->cfg.seed;
  t.add_to(app, {"--steps", "--batch", "--seed"});
  narrow(app, "--steps", number_in(1, 1e9));
  narrow(app, "--batch", number_in(1, 1 << 20));
  a->optimizer.lr = a->cfg.lr;
  a->optimizer.optim = a->cfg.optim;
  a->optimizer.add_to(app, {"--lr", "--weight-decay"});
  narrow(app, "--lr", number_in(0, 1e6));
  narrow(app, "--weight-decay", number_in(0, 1e6));
  a->metrics.log_every = a->log_every;
  a->metrics.add_to(app, {"--log-every", "--json"});
  narrow(app, "--log-every", number_in(1, 1e9));
  app.add_option("--init", a->init, "Trunk: a strata train run directory or a safetensors file")
      ->check(plain_path(true))->required();
  a->pairs.add_to(app);
  app.add_option("-o,--out", a->out, "Reward model to write (safetensors)")->check(plain_path(false))->required();
  app.callback([a] {
    a->resolve();
    run_reward(*a);
  });
}

// `strata rlhf ppo|grpo|rloo`: one loop (rlhf/ppo.h), one set of flags; the critic's belong
// to PPO, the group's to GRPO and RLOO.
struct PpoArgs {
  rlhf::PpoConfig cfg;
  std::string command;  // "ppo", "grpo", "rloo": also the TOML section of the own flags
  std::string actor, reference, reward, critic;
  int nproc = 1;
  bool json = false;
  // The families shared with `strata train`: recomputation, the optimizer's clip and decay,
  // ranks and ZeRO, the run dir, trace and --json.
  TrainingFlags training;
  OptimizerFlags optimizer;
  ParallelFlags parallel;
  MetricsFlags metrics;

  // After parsing: the family settings into the run's config.
  void resolve() {
    cfg.recompute.mode = model::parse_recompute_mode(training.recompute);
    cfg.recompute.layers = training.recompute_layers;
    cfg.optim.grad_clip = optimizer.optim.grad_clip;
    cfg.optim.weight_decay = optimizer.optim.weight_decay;
    cfg.zero = parallel::parse_zero_stage(parallel.zero);
    nproc = parallel.parallel.nproc;
    cfg.run_dir = metrics.run_dir;
    cfg.trace = metrics.trace;
    json = metrics.json;
  }
};

// --nproc N > 1 from the command line: starts N ranks of this same command (shm) and waits.
void launch_ranks(int nproc, const std::string& command) {
  launcher::LaunchOptions o;
  o.nproc = nproc;
  o.prefix_output = false;  // rank 0 alone reports
  o.command = train::own_command_line();
  o.rank_exec = launcher::self_executable();
  if (!std::getenv("OMP_NUM_THREADS")) {  // ranks split the host's cores
    const int cores = int(std::max(1u, std::thread::hardware_concurrency()));
    o.extra_env.emplace_back("OMP_NUM_THREADS", std::to_string(std::max(1, cores / nproc)));
  }
  const launcher::LaunchResult r = launcher::launch(o);
  if (r.exit_code != 0) {
    std::fprintf(stderr, "strata rlhf %s: %s\n", command.c_str(), r.message.c_str());
    throw ExitCode{r.exit_code};
  }
}

bool launch_ranks(const PpoArgs& a) {
  if (a.nproc <= 1 || comm::launched_as_rank()) return false;
  const int trainers = rlhf::trainer_ranks(a.cfg, a.nproc);
  if (a.cfg.rollout_ranks == 0)
    STRATA_CHECK(a.cfg.rollout_batch % a.nproc == 0 && a.cfg.minibatch % a.nproc == 0, "--rollout-batch ",
                 a.cfg.rollout_batch, " and --minibatch ", a.cfg.minibatch, " must divide over --nproc ", a.nproc);
  else
    STRATA_CHECK(a.cfg.rollout_batch % a.cfg.rollout_ranks == 0 && rlhf::rollout_sequences(a.cfg) % trainers == 0 &&
                     a.cfg.minibatch % trainers == 0,
                 "--rollout-batch ", a.cfg.rollout_batch, " must divide over --rollout-ranks ", a.cfg.rollout_ranks,
                 ", and the responses per iteration and --minibatch ", a.cfg.minibatch, " over the ", trainers,
                 " trainer ranks");
  launch_ranks(a.nproc, a.command);
  return true;
}

// The measured model states per rank beside the plan's, and the split of the time.
void print_memory(const json& mem, const std::string& algo) {
  std::printf("model states per rank and model at ZeRO %d (parameters / gradients / optimizer bytes; "
              "strata plan --rlhf --algo %s %s): %lld in all\n",
              mem["zero"].get<int>(), algo.c_str(),
              mem["model_states_match_plan"].get<bool>() ? "predicts the same" : "DIFFERS",
              (long long)mem["model_states"].get<int64_t>());
  const json& plan = mem["plan"];
  for (const char* role : {"actor", "critic", "reference", "reward"})
    if (mem.contains(role))
      std::printf("  %-9s %lld / %lld / %lld (plan %lld / %lld / %lld), activations %lld\n", role,
                (long long)mem[role]["parameters"].get<int64_t>(), (long long)mem[role]["gradients"].get<int64_t>(),
                (long long)mem[role]["optimizer"].get<int64_t>(), (long long)plan[role]["parameters"].get<int64_t>(),
                (long long)plan[role]["gradients"].get<int64_t>(), (long long)plan[role]["optimizer"].get<int64_t>(),
                (long long)mem[role]["activations"].get<int64_t>());
}

void print_share(const json& share) {
  if (!share.is_null())
    std::printf("time: generate %.0f%%, score %.0f%%, train %.0f%%\n", 100 * share["generate"].get<double>(),
                100 * share["score"].get<double>(), 100 * share["train"].get<double>());
}

// `printout` (--print-config): printed instead of running, once the flags are checked as the
// run checks them.
void run_ppo(PpoArgs& a, const std::string& printout) {
  a.resolve();
  STRATA_CHECK(a.cfg.recompute.layers >= 0, "--recompute-layers must not be negative (got ",
               a.cfg.recompute.layers, ")");
  STRATA_CHECK(a.cfg.recompute.layers == 0 || a.cfg.recompute.mode == model::Recompute::full,
               "--recompute-layers ", a.cfg.recompute.layers, " needs --recompute full");
  a.cfg.validate();  // flags first: nothing is loaded for a bad flag
  STRATA_CHECK(a.nproc >= 1 && a.nproc <= 1024, "--nproc must be in [1, 1024] (got ", a.nproc, ")");
  STRATA_CHECK(rlhf::trainer_ranks(a.cfg, a.nproc) >= 1, "--rollout-ranks ", a.cfg.rollout_ranks,
               " leaves no trainer of --nproc ", a.nproc);
  STRATA_CHECK(a.cfg.optim.grad_clip >= 0, "--grad-clip must be >= 0 (got ", a.cfg.optim.grad_clip, ")");
  STRATA_CHECK(a.cfg.optim.weight_decay >= 0, "--weight-decay must be >= 0 (got ", a.cfg.optim.weight_decay, ")");
  if (!printout.empty()) {  // the flags are checked; the models are files a config only names
    std::cout << printout;
    return;
  }
  // Flags checked before any model is loaded.
  rlhf::PpoModels m;
  m.actor_path = a.actor;
  m.reference_path = a.reference.empty() ? a.actor : a.reference;
  m.reward_path = a.reward;
  m.critic_path = a.critic;
  m.actor = rlhf::load_model(a.actor, "--actor");
  m.reference = a.reference.empty() ? m.actor : rlhf::load_model(a.reference, "--reference");
  m.reward = rlhf::load_model(a.reward, "--reward");
  if (!a.critic.empty()) m.critic = rlhf::load_model(a.critic, "--critic");
  rlhf::check_models(m, a.cfg);  // bad models: one line here, before any rank starts
  // Flight-recorder dumps of a timed-out run go beside its metrics, as for `strata train`.
  if (!a.cfg.run_dir.empty() && !std::getenv("STRATA_DUMP_DIR")) setenv("STRATA_DUMP_DIR", a.cfg.run_dir.c_str(), 0);
  if (launch_ranks(a)) return;
  comm::GroupPtr world = comm::launched_as_rank() ? comm::init_from_env() : nullptr;
  const bool report = !world || world->rank() == 0;
  const bool js = a.json;
  auto log = [js](const json& r) {
    if (js) {
      std::printf("%s\n", r.dump().c_str());
    } else {
      std::printf("iter %4d  reward %+.4f  gold %+.4f  kl %.4f  beta %.4f  clip %.3f  approx-kl %.5f  entropy %.3f  ",
                  r["iteration"].get<int>(), r["reward"].get<double>(), r["gold"].get<double>(),
                  r["kl"].get<double>(), r["beta"].get<double>(), r["clip_frac"].get<double>(),
                  r["approx_kl"].get<double>(), r["entropy"].get<double>());
      if (r.contains("value_loss"))
        std::printf("vloss %.4f  ev %+.3f  ", r["value_loss"].get<double>(), r["explained_variance"].get<double>());
      std::printf("gen/score/train %.0f/%.0f/%.0f%%\n", 100 * r["share"]["generate"].get<double>(),
                  100 * r["share"]["score"].get<double>(), 100 * r["share"]["train"].get<double>());
    }
    std::fflush(stdout);
  };
  const rlhf::PpoResult res = rlhf::run_ppo(a.cfg, std::move(m), log, world.get());
  if (!report) return;
  if (js) {
    std::printf("%s\n", json{{"summary", res.summary}}.dump().c_str());
    return;
  }
  const json& mem = res.summary["memory"];
  print_memory(mem, a.command);
  if (mem.contains("kv_cache") || mem["actor"].contains("kv_cache"))
    std::printf("  KV cache  %lld bytes\n", (long long)mem["actor"]["kv_cache"].get<int64_t>());
  print_share(res.summary["share"]);
}

void setup_policy(CLI::App& app, plan::RlAlgo algo) {
  auto a = std::make_shared<PpoArgs>();
  a->command = plan::rl_algo_name(algo);
  rlhf::PpoConfig& c = a->cfg;
  c.algo = algo;
  const bool ppo = algo == plan::RlAlgo::ppo, grpo = algo == plan::RlAlgo::grpo;
  if (!ppo) c.group_size = 4;
  if (grpo) c.kl_in = rlhf::KlIn::loss;
  a->training.recompute_layers = c.recompute.layers;
  a->training.add_to(app, {"--recompute", "--recompute-layers"});
  a->optimizer.optim = c.optim;
  a->optimizer.add_to(app, {"--grad-clip", "--weight-decay"});
  a->parallel.add_to(app, {"--nproc", "--zero"});
  a->metrics.add_to(app, {"--run-dir", "--trace", "--json"});
  app.add_option("--actor", a->actor, "Policy: a strata train run directory or a safetensors file")
      ->check(plain_path(true))->required();
  app.add_option("--reference", a->reference, "Frozen reference (default: the initial --actor)")->check(plain_path(true));
  app.add_option("--reward", a->reward, "Reward model (strata rlhf reward)")->check(plain_path(true))->required();
  if (ppo)
    app.add_option("--critic", a->critic, "Critic with a value head (default: the reward model)")
        ->check(plain_path(true));
  app.add_option("--iterations", c.iterations, "Rollout + update iterations")->check(number_in(1, 1e9))->capture_default_str();
  app.add_option("--rollout-batch", c.rollout_batch, "Prompts per iteration")->check(number_in(1, 1 << 20))->capture_default_str();
  if (!ppo)
    app.add_option("--group-size", c.group_size,
                   grpo ? "Responses per prompt: the group whose rewards normalise each other (>= 2)"
                        : "Responses per prompt, k: each one's baseline is the mean of the other k - 1 (>= 2)")
        ->capture_default_str();
  app.add_option("--minibatch", c.minibatch, "Sequences per update")->check(number_in(1, 1 << 20))->capture_default_str();
  app.add_option("--epochs", c.epochs, "Passes over a rollout")->check(number_in(1, 1e6))->capture_default_str();
  app.add_option("--prompt-len", c.prompt_len, "Prompt tokens")->check(number_in(1, 1 << 20))->capture_default_str();
  app.add_option("--response-len", c.response_len, "Response tokens")->check(number_in(1, 1 << 20))->capture_default_str();
  app.add_option("--temperature", c.sample.temperature, "Policy temperature")->check(number_in(0, 1e6, true))->capture_default_str();
  app.add_option("--top-k", c.sample.top_k, "Sample from the k most likely tokens (0: all)")
      ->check(number_in(0, 1 << 30))->capture_default_str();
  app.add_flag("--kv-cache,!--no-kv-cache", c.kv_cache, "Generate through the KV cache (default) or not");
  app.add_flag("--off-policy", c.off_policy,
               "Sample each rollout with the weights before the last update (as --rollout-ranks does), the ratio "
               "against that behaviour policy");
  app.add_option("--rollout-ranks", c.rollout_ranks,
                 "Of --nproc, ranks that only sample rollouts (one update behind) while the others train; 0: "
                 "colocated")
      ->capture_default_str();
  app.add_option("--kl-coef", c.kl_coef, "KL penalty coefficient beta (initial, when adaptive)")
      ->check(number_in(0, 1e6))->capture_default_str();
  if (grpo) {
    app.add_option_function<std::string>(
           "--kl-in", [&c](const std::string& v) { c.kl_in = rlhf::parse_kl_in(v); },
           "Where the KL to the reference goes: loss (beta * k3 per token, the paper's) or reward "
           "(-beta * sum k1 before the group's advantages)")
        ->check(CLI::IsMember({"loss", "reward"}))
        ->type_name("loss|reward")
        ->default_str("loss");
    app.add_flag("--dr-grpo", c.dr_grpo,
                 "Dr. GRPO: advantages not divided by the group's std, token losses over a constant");
  }
  app.add_option("--kl-target", c.kl_target, "Adaptive KL controller target per response (0: fixed beta)")
      ->check(number_in(0, 1e6))
      ->capture_default_str();
  app.add_option("--kl-horizon", c.kl_horizon, "Adaptive KL controller horizon")->check(number_in(1, 1e12))->capture_default_str();
  if (ppo) {
    app.add_option("--gamma", c.gamma, "Discount")->check(number_in(0, 1))->capture_default_str();
    app.add_option("--lambda", c.lambda, "GAE lambda")->check(number_in(0, 1))->capture_default_str();
  }
  app.add_option("--clip", c.clip, "Policy ratio clip")->check(number_in(0, 1e6, true))->capture_default_str();
  if (ppo) app.add_option("--value-clip", c.value_clip, "Value clip")->check(number_in(0, 1e6, true))->capture_default_str();
  app.add_option("--ent-coef", c.ent_coef, "Entropy bonus")->check(number_in(0, 1e6))->capture_default_str();
  app.add_option("--actor-lr", c.actor_lr, "Actor learning rate")->check(number_in(0, 1e6))->capture_default_str();
  if (ppo) app.add_option("--critic-lr", c.critic_lr, "Critic learning rate")->check(number_in(0, 1e6))->capture_default_str();
  app.add_option("--seed", c.seed, "Seed of prompts, sampling, minibatches")
      ->check(non_negative_integer())->capture_default_str();
  app.add_option("--gold-seed", c.gold_seed, "Seed of the gold rule used for evaluation")
      ->check(non_negative_integer())->capture_default_str();
  app.add_option("--ckpt-every", c.ckpt_every, "Save the run state every N iterations")->check(number_in(0, 1e9))->capture_default_str();
  app.add_flag("--resume", c.resume, cat("Continue from <run-dir>/", a->command, "-state.safetensors"));
  RunConfigFlags& config = add_run_config(app, a->command);
  app.callback([a, &app, &config] {
    run_ppo(*a, config.print ? resolved_config(app, a->command) : "");
  });
}

struct DpoArgs {
  rlhf::DpoConfig cfg;
  std::string policy, reference;
  PairFlags pairs;
  bool json = false;
  int nproc = 1;
  // The families shared with `strata train`: steps, batch, seed, lr, the optimizer's clip and
  // decay, recomputation, ranks and ZeRO, the run dir, trace and --json.
  TrainingFlags training;
  OptimizerFlags optimizer;
  ParallelFlags parallel;
  MetricsFlags metrics;

  void resolve() {
    cfg.steps = int(training.steps);
    cfg.batch = training.batch;
    cfg.seed = training.seed;
    cfg.recompute.mode = model::parse_recompute_mode(training.recompute);
    cfg.recompute.layers = training.recompute_layers;
    cfg.lr = float(optimizer.lr);
    cfg.optim.grad_clip = optimizer.optim.grad_clip;
    cfg.optim.weight_decay = optimizer.optim.weight_decay;
    cfg.zero = parallel::parse_zero_stage(parallel.zero);
    nproc = parallel.parallel.nproc;
    cfg.run_dir = metrics.run_dir;
    cfg.eval_every = training.eval_every;
    json = metrics.json;
    cfg.gold_seed = pairs.gold_seed;
  }
};

void run_dpo(DpoArgs& a, const std::string& printout) {
  a.resolve();
  a.cfg.validate();  // flags first: nothing is loaded for a bad flag
  STRATA_CHECK(a.cfg.batch % a.nproc == 0, "--batch ", a.cfg.batch, " must divide over --nproc ", a.nproc);
  if (!printout.empty()) {
    std::cout << printout;
    return;
  }
  // A pairs file's form before any model is loaded (its token ids against the policy's
  // vocabulary once it is).
  if (a.pairs.pairs != "synthetic") rlhf::read_pairs(a.pairs.pairs, std::numeric_limits<int32_t>::max());
  const rlhf::ModelFile policy = rlhf::load_model(a.policy, "--policy");
  const rlhf::ModelFile reference = a.reference.empty() ? policy : rlhf::load_model(a.reference, "--reference");
  // Every rank reads or samples the same pairs (seeded), before any rank starts: a bad file
  // is one line here.
  const auto [train, eval] = a.pairs.load(policy, a.policy, "--policy", a.cfg.seed);
  if (!a.cfg.run_dir.empty() && !std::getenv("STRATA_DUMP_DIR")) setenv("STRATA_DUMP_DIR", a.cfg.run_dir.c_str(), 0);
  if (a.nproc > 1 && !comm::launched_as_rank()) {
    launch_ranks(a.nproc, "dpo");
    return;
  }
  comm::GroupPtr world = comm::launched_as_rank() ? comm::init_from_env() : nullptr;
  const bool js = a.json;
  auto log = [js](const json& r) {
    if (js) {
      std::printf("%s\n", r.dump().c_str());
    } else if (r.contains("eval")) {
      std::printf("step %5lld  held-out: loss %.4f  accuracy %.3f  margin %+.4f  gold %+.4f  kl %.4f  entropy %.3f\n",
                  (long long)r["step"].get<int64_t>(), r.value("eval_loss", 0.0), r.value("eval_accuracy", 0.0),
                  r.value("eval_margin", 0.0), r["gold"].get<double>(), r["kl"].get<double>(),
                  r["entropy"].get<double>());
    } else {
      std::printf("step %5lld  loss %.4f  accuracy %.3f  margin %+.4f  grad norm %.3f\n",
                  (long long)r["step"].get<int64_t>(), r["loss"].get<double>(), r["accuracy"].get<double>(),
                  r["margin"].get<double>(), r["grad_norm"].get<double>());
    }
    std::fflush(stdout);
  };
  const rlhf::DpoResult res = rlhf::run_dpo(a.cfg, policy, reference, train, eval, log, world.get());
  if (world && world->rank() != 0) return;
  if (js) {
    std::printf("%s\n", json{{"summary", res.summary}}.dump().c_str());
    return;
  }
  print_memory(res.summary["memory"], "dpo");
  print_share(res.summary["share"]);
  const json &f = res.summary["first_eval"], &l = res.summary["last_eval"];
  std::printf("%s: gold %+.4f -> %+.4f; held-out preference accuracy %.3f -> %.3f (%lld pairs)\n",
              a.cfg.ipo ? "IPO" : "DPO", f["gold"].get<double>(), l["gold"].get<double>(),
              f.value("eval_accuracy", 0.0), l.value("eval_accuracy", 0.0), (long long)eval.size());
}

void setup_dpo(CLI::App& app) {
  auto a = std::make_shared<DpoArgs>();
  rlhf::DpoConfig& c = a->cfg;
  TrainingFlags& t = a->training;
  t.steps = c.steps, t.batch = c.batch, t.seed = c.seed, t.recompute_layers = c.recompute.layers;
  t.eval_every = c.eval_every;
  t.add_to(app, {"--steps", "--batch", "--seed", "--recompute", "--recompute-layers", "--eval-every"});
  narrow(app, "--steps", number_in(1, 1e9));
  narrow(app, "--batch", number_in(1, 1 << 20));
  a->optimizer.lr = c.lr;
  a->optimizer.optim = c.optim;
  a->optimizer.add_to(app, {"--lr", "--grad-clip", "--weight-decay"});
  a->parallel.add_to(app, {"--nproc", "--zero"});
  a->metrics.add_to(app, {"--run-dir", "--json"});
  a->pairs.add_to(app);
  app.add_option("--policy", a->policy, "The policy to train (an SFT model): a strata train run directory or a safetensors file")
      ->check(plain_path(true))->required();
  app.add_option("--reference", a->reference, "Frozen reference (default: the initial --policy)")->check(plain_path(true));
  app.add_option("--beta", c.beta, "Strength of the pull toward the reference (DPO's beta; IPO's tau)")->capture_default_str();
  app.add_flag("--ipo", c.ipo, "IPO: the squared loss (h - 1/(2 beta))^2 on mean token log-probs");
  app.add_option("--eval-prompts", c.eval_prompts, "Held-out prompts whose sampled responses the gold rule scores")
      ->capture_default_str();
  app.add_option("--ckpt-every", c.ckpt_every, "Save the run state every N steps")->check(number_in(0, 1e9))->capture_default_str();
  app.add_flag("--resume", c.resume, "Continue from <run-dir>/dpo-state.safetensors");
  RunConfigFlags& config = add_run_config(app, "dpo");
  app.callback([a, &app, &config] { run_dpo(*a, config.print ? resolved_config(app, "dpo") : ""); });
}

void setup_generate(CLI::App& app) {
  struct Args {
    std::string actor;
    int batch = 8, prompt_len = 8, response_len = 56, repeats = 3;
    rlhf::SampleConfig s;
    uint64_t seed = 1;
    bool json = false;
  };
  auto a = std::make_shared<Args>();
  app.add_option("--actor", a->actor, "Model: a strata train run directory or a safetensors file")
      ->check(plain_path(true))->required();
  app.add_option("--batch", a->batch, "Sequences generated together")->check(number_in(1, 1 << 16))->capture_default_str();
  app.add_option("--prompt-len", a->prompt_len, "Prompt tokens")->check(number_in(1, 1 << 20))->capture_default_str();
  app.add_option("--response-len", a->response_len, "New tokens per sequence")->check(number_in(1, 1 << 20))->capture_default_str();
  app.add_option("--temperature", a->s.temperature, "0: greedy")->check(number_in(0, 1e6))->capture_default_str();
  app.add_option("--top-k", a->s.top_k, "Sample from the k most likely tokens (0: all)")
      ->check(number_in(0, 1 << 30))->capture_default_str();
  app.add_option("--repeats", a->repeats, "Interleaved timing rounds (median)")->check(number_in(1, 1000))->capture_default_str();
  app.add_option("--seed", a->seed, "Seed")->check(non_negative_integer())->capture_default_str();
  app.add_flag("--json", a->json, "One JSON record on stdout");
  app.callback([a] {
    const rlhf::ModelFile m = rlhf::load_model(a->actor, "--actor");
    const rlhf::GenerationTiming t = rlhf::time_generation(m.cfg, m.params.data(), a->batch, a->prompt_len,
                                                           a->response_len, a->s, a->seed, a->repeats);
    const json j = {{"batch", a->batch},
                    {"prompt_len", a->prompt_len},
                    {"response_len", a->response_len},
                    {"cached_tokens_per_s", t.cached_tokens_per_s},
                    {"uncached_tokens_per_s", t.uncached_tokens_per_s},
                    {"speedup", t.cached_tokens_per_s / t.uncached_tokens_per_s},
                    {"cached_cpu_tokens_per_s", t.cached_cpu_tokens_per_s},
                    {"uncached_cpu_tokens_per_s", t.uncached_cpu_tokens_per_s},
                    {"same_tokens", t.same_tokens},
                    {"kv_cache_bytes", t.kv_cache_bytes}};
    if (a->json)
      std::printf("%s\n", j.dump().c_str());
    else
      std::printf("generation, batch %d, %d + %d tokens: KV cache %.0f tokens/s, without %.0f tokens/s "
                  "(%.2fx; per CPU second %.0f vs %.0f); same tokens: %s; cache %lld bytes\n",
                  a->batch, a->prompt_len, a->response_len, t.cached_tokens_per_s, t.uncached_tokens_per_s,
                  t.cached_tokens_per_s / t.uncached_tokens_per_s, t.cached_cpu_tokens_per_s,
                  t.uncached_cpu_tokens_per_s, t.same_tokens ? "yes" : "NO", (long long)t.kv_cache_bytes);
    if (!t.same_tokens) throw ExitCode{2};
  });
}

Register reward_reg("rlhf reward", "Train a reward model (GPT + value head) on preference pairs", setup_reward);
Register ppo_reg("rlhf ppo", "PPO with actor, reference, reward model and critic",
                  [](CLI::App& app) { setup_policy(app, plan::RlAlgo::ppo); });
Register grpo_reg("rlhf grpo", "GRPO: group-normalised advantages, no critic",
                   [](CLI::App& app) { setup_policy(app, plan::RlAlgo::grpo); });
Register rloo_reg("rlhf rloo", "RLOO: leave-one-out baselines, no critic",
                   [](CLI::App& app) { setup_policy(app, plan::RlAlgo::rloo); });
Register dpo_reg("rlhf dpo", "DPO (or IPO) on preference pairs: policy and frozen reference, no generation",
                  setup_dpo);
Register gen_reg("rlhf generate", "KV-cache generation vs the uncached path: tokens/s, equality", setup_generate);

}  // namespace
}  // namespace strata::cli
