// `strata rlhf reward`: a reward model (GPT trunk + value head) trained on preference pairs.
// `strata rlhf ppo`: PPO with actor, reference, reward model and critic (rlhf/ppo.h).
// `strata rlhf generate`: KV-cache generation against the uncached path, tokens/s.
//
//   strata train --layers 2 --dim 64 --heads 2 --max-seq 64 --steps 300 --ckpt-every 300 --run-dir sft
//   strata rlhf reward --init sft --pairs synthetic -o rm.safetensors
//   strata rlhf ppo --actor sft --reward rm.safetensors --run-dir ppo --iterations 30
#include <cstdio>
#include <iostream>
#include <cstdlib>
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
#include "rlhf/kv_cache.h"
#include "rlhf/model_io.h"
#include "rlhf/ppo.h"
#include "rlhf/reward.h"
#include "train/distributed.h"

namespace strata::cli {
namespace {

using nlohmann::json;

struct RewardArgs {
  std::string init, pairs = "synthetic", out, save_pairs;
  int64_t num_pairs = 512;
  int prompt_len = 8, response_len = 16, gen_batch = 32;
  double eval_fraction = 0.2;
  uint64_t gold_seed = 1;
  float temperature = 1.0f;
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
  STRATA_CHECK(a.eval_fraction >= 0 && a.eval_fraction < 1, "--eval-fraction must be in [0, 1) (got ",
               a.eval_fraction, ")");
  STRATA_CHECK(a.cfg.batch >= 1 && a.cfg.steps >= 1, "--batch and --steps must be >= 1");
  rlhf::ModelFile init = rlhf::load_model(a.init, "--init");
  rlhf::PairSet pairs;
  if (a.pairs == "synthetic") {
    STRATA_CHECK(a.num_pairs >= 2, "--num-pairs must be >= 2 (got ", a.num_pairs, ")");
    STRATA_CHECK(a.prompt_len + a.response_len <= init.cfg.seq, "--response-len ", a.response_len,
                 " + --prompt-len ", a.prompt_len, " is beyond the context of --init ", a.init, " (",
                 init.cfg.seq, ")");
    rlhf::KvDecoder dec(init.cfg, std::max(2, a.gen_batch));
    dec.bind(init.params.data());
    pairs = rlhf::synthetic_pairs(dec, init.cfg, rlhf::GoldRule(a.gold_seed, init.cfg.vocab), a.num_pairs,
                                  a.prompt_len, a.response_len, {a.temperature, 0}, a.cfg.seed);
  } else {
    pairs = rlhf::read_pairs(a.pairs, init.cfg.vocab);
    STRATA_CHECK(pairs.P + pairs.R <= init.cfg.seq, "--pairs ", a.pairs, ": ", pairs.P, " + ", pairs.R,
                 " tokens per sequence, beyond the context of --init ", a.init, " (", init.cfg.seq, ")");
  }
  if (!a.save_pairs.empty()) rlhf::write_pairs(a.save_pairs, pairs);
  const int64_t n_eval = int64_t(double(pairs.size()) * a.eval_fraction);
  STRATA_CHECK(pairs.size() - n_eval >= 1, "--pairs: ", pairs.size(), " pairs leave none for training");
  const rlhf::PairSet train = pairs.slice(0, pairs.size() - n_eval);
  const rlhf::PairSet eval = pairs.slice(pairs.size() - n_eval, pairs.size());
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
                   {{"role", "reward"}, {"gold_seed", std::to_string(a.gold_seed)},
                    {"eval_accuracy", std::to_string(res.eval_accuracy)}});
  const json summary = {{"pairs", pairs.size()},        {"train_pairs", train.size()},
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
  app.add_option("--pairs", a->pairs, "Preference pairs: FILE (PROMPT | CHOSEN | REJECTED per line) or synthetic")
      ->check(plain_path(false, "synthetic"))->capture_default_str();
  app.add_option("-o,--out", a->out, "Reward model to write (safetensors)")->check(plain_path(false))->required();
  app.add_option("--num-pairs", a->num_pairs, "Synthetic pairs to sample")
      ->check(number_in(2, 1e6))->capture_default_str();
  app.add_option("--prompt-len", a->prompt_len, "Synthetic prompt tokens")->check(number_in(1, 1 << 20))->capture_default_str();
  app.add_option("--response-len", a->response_len, "Synthetic response tokens")
      ->check(number_in(1, 1 << 20))->capture_default_str();
  app.add_option("--temperature", a->temperature, "Sampling temperature of synthetic responses")
      ->check(number_in(0, 1e6, true))->capture_default_str();
  app.add_option("--gold-seed", a->gold_seed, "Seed of the gold rule (docs/rlhf.md)")
      ->check(non_negative_integer())->capture_default_str();
  app.add_option("--save-pairs", a->save_pairs, "Also write the pairs used to FILE")->check(plain_path(false));
  app.add_option("--eval-fraction", a->eval_fraction, "Pairs held out for accuracy")->check(number_in(0, 1))->capture_default_str();
  app.callback([a] {
    a->resolve();
    run_reward(*a);
  });
}

struct PpoArgs {
  rlhf::PpoConfig cfg;
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
bool launch_ranks(const PpoArgs& a) {
  if (a.nproc <= 1 || comm::launched_as_rank()) return false;
  STRATA_CHECK(a.cfg.rollout_batch % a.nproc == 0 && a.cfg.minibatch % a.nproc == 0, "--rollout-batch ",
               a.cfg.rollout_batch, " and --minibatch ", a.cfg.minibatch, " must divide over --nproc ", a.nproc);
  launcher::LaunchOptions o;
  o.nproc = a.nproc;
  o.prefix_output = false;  // rank 0 alone reports
  o.command = train::own_command_line();
  o.rank_exec = launcher::self_executable();
  if (!std::getenv("OMP_NUM_THREADS")) {  // ranks split the host's cores
    const int cores = int(std::max(1u, std::thread::hardware_concurrency()));
    o.extra_env.emplace_back("OMP_NUM_THREADS", std::to_string(std::max(1, cores / a.nproc)));
  }
  const launcher::LaunchResult r = launcher::launch(o);
  if (r.exit_code != 0) {
    std::fprintf(stderr, "strata rlhf ppo: %s\n", r.message.c_str());
    throw ExitCode{r.exit_code};
  }
  return true;
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
  STRATA_CHECK(a.cfg.optim.grad_clip >= 0, "--grad-clip must be >= 0 (got ", a.cfg.optim.grad_clip, ")");
  STRATA_CHECK(a.cfg.optim.weight_decay >= 0, "--weight-decay must be >= 0 (got ", a.cfg.optim.weight_decay, ")");
  if (!printout.empty()) {  // the flags are checked; the models are files a config only names
    std::cout << printout;
    return;
  }
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
      std::printf("iter %4d  reward %+.4f  gold %+.4f  kl %.4f  beta %.4f  clip %.3f  approx-kl %.5f  "
                  "entropy %.3f  vloss %.4f  ev %+.3f  gen/score/train %.0f/%.0f/%.0f%%\n",
                  r["iteration"].get<int>(), r["reward"].get<double>(), r["gold"].get<double>(),
                  r["kl"].get<double>(), r["beta"].get<double>(), r["clip_frac"].get<double>(),
                  r["approx_kl"].get<double>(), r["entropy"].get<double>(), r["value_loss"].get<double>(),
                  r["explained_variance"].get<double>(), 100 * r["share"]["generate"].get<double>(),
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
  std::printf("model states per rank and model at ZeRO %d (parameters / gradients / optimizer bytes; "
              "strata plan --rlhf %s):\n",
              mem["zero"].get<int>(), mem["model_states_match_plan"].get<bool>() ? "predicts the same" : "DIFFERS");
  const json& plan = mem["plan"];
  for (const char* role : {"actor", "critic", "reference", "reward"})
    std::printf("  %-9s %lld / %lld / %lld (plan %lld / %lld / %lld), activations %lld\n", role,
                (long long)mem[role]["parameters"].get<int64_t>(), (long long)mem[role]["gradients"].get<int64_t>(),
                (long long)mem[role]["optimizer"].get<int64_t>(), (long long)plan[role]["parameters"].get<int64_t>(),
                (long long)plan[role]["gradients"].get<int64_t>(), (long long)plan[role]["optimizer"].get<int64_t>(),
                (long long)mem[role]["activations"].get<int64_t>());
  std::printf("  KV cache  %lld bytes\n", (long long)mem["actor"]["kv_cache"].get<int64_t>());
  const json& share = res.summary["share"];
  if (!share.is_null())
    std::printf("time: generate %.0f%%, score %.0f%%, train %.0f%%\n", 100 * share["generate"].get<double>(),
                100 * share["score"].get<double>(), 100 * share["train"].get<double>());
}

void setup_ppo(CLI::App& app) {
  auto a = std::make_shared<PpoArgs>();
  rlhf::PpoConfig& c = a->cfg;
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
  app.add_option("--critic", a->critic, "Critic with a value head (default: the reward model)")
      ->check(plain_path(true));
  app.add_option("--iterations", c.iterations, "Rollout + update iterations")->check(number_in(1, 1e9))->capture_default_str();
  app.add_option("--rollout-batch", c.rollout_batch, "Prompts per iteration")->check(number_in(1, 1 << 20))->capture_default_str();
  app.add_option("--minibatch", c.minibatch, "Sequences per update")->check(number_in(1, 1 << 20))->capture_default_str();
  app.add_option("--epochs", c.epochs, "PPO epochs per rollout")->check(number_in(1, 1e6))->capture_default_str();
  app.add_option("--prompt-len", c.prompt_len, "Prompt tokens")->check(number_in(1, 1 << 20))->capture_default_str();
  app.add_option("--response-len", c.response_len, "Response tokens")->check(number_in(1, 1 << 20))->capture_default_str();
  app.add_option("--temperature", c.sample.temperature, "Policy temperature")->check(number_in(0, 1e6, true))->capture_default_str();
  app.add_option("--top-k", c.sample.top_k, "Sample from the k most likely tokens (0: all)")
      ->check(number_in(0, 1 << 30))->capture_default_str();
  app.add_flag("--kv-cache,!--no-kv-cache", c.kv_cache, "Generate through the KV cache (default) or not");
  app.add_option("--kl-coef", c.kl_coef, "KL penalty coefficient beta (initial, when adaptive)")
      ->check(number_in(0, 1e6))->capture_default_str();
  app.add_option("--kl-target", c.kl_target, "Adaptive KL controller target per response (0: fixed beta)")
      ->check(number_in(0, 1e6))
      ->capture_default_str();
  app.add_option("--kl-horizon", c.kl_horizon, "Adaptive KL controller horizon")->check(number_in(1, 1e12))->capture_default_str();
  app.add_option("--gamma", c.gamma, "Discount")->check(number_in(0, 1))->capture_default_str();
  app.add_option("--lambda", c.lambda, "GAE lambda")->check(number_in(0, 1))->capture_default_str();
  app.add_option("--clip", c.clip, "Policy ratio clip")->check(number_in(0, 1e6, true))->capture_default_str();
  app.add_option("--value-clip", c.value_clip, "Value clip")->check(number_in(0, 1e6, true))->capture_default_str();
  app.add_option("--ent-coef", c.ent_coef, "Entropy bonus")->check(number_in(0, 1e6))->capture_default_str();
  app.add_option("--actor-lr", c.actor_lr, "Actor learning rate")->check(number_in(0, 1e6))->capture_default_str();
  app.add_option("--critic-lr", c.critic_lr, "Critic learning rate")->check(number_in(0, 1e6))->capture_default_str();
  app.add_option("--seed", c.seed, "Seed of prompts, sampling, minibatches")
      ->check(non_negative_integer())->capture_default_str();
  app.add_option("--gold-seed", c.gold_seed, "Seed of the gold rule used for evaluation")
      ->check(non_negative_integer())->capture_default_str();
  app.add_option("--ckpt-every", c.ckpt_every, "Save the run state every N iterations")->check(number_in(0, 1e9))->capture_default_str();
  app.add_flag("--resume", c.resume, "Continue from <run-dir>/ppo-state.safetensors");
  RunConfigFlags& config = add_run_config(app, "ppo");
  app.callback([a, &app, &config] {
    run_ppo(*a, config.print ? resolved_config(app, "ppo") : "");
  });
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
Register ppo_reg("rlhf ppo", "PPO with actor, reference, reward model and critic", setup_ppo);
Register gen_reg("rlhf generate", "KV-cache generation vs the uncached path: tokens/s, equality", setup_generate);

}  // namespace
}  // namespace strata::cli
