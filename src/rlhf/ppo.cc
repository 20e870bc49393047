// The PPO loop (ppo.h): rollout, scoring, advantages, clipped updates, metrics, checkpoints.
#include "rlhf/ppo.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>

#include "comm/process_group.h"
#include "ckpt/fsutil.h"
#include "core/error.h"
#include "core/files.h"
#include "core/rng.h"
#include "core/trace.h"
#include "kernels/crossentropy.h"
#include "rlhf/frozen_shards.h"
#include "rlhf/gold.h"
#include "rlhf/kv_cache.h"
#include "rlhf/optim.h"
#include "rlhf/plan_check.h"
#include "rlhf/ppo_math.h"
#include "rlhf/trained_state.h"
#include "rlhf/value_model.h"

namespace strata::rlhf {

namespace fs = std::filesystem;
using nlohmann::json;

KlIn parse_kl_in(const std::string& s) {
  if (s == "reward") return KlIn::reward;
  if (s == "loss") return KlIn::loss;
  throw Error(cat("--kl-in '", s, "': expected reward or loss"));
}

const char* kl_in_name(KlIn k) { return k == KlIn::loss ? "loss" : "reward"; }

void PpoConfig::validate() const {
  const bool grpo = algo == plan::RlAlgo::grpo, rloo = algo == plan::RlAlgo::rloo;
  STRATA_CHECK(algo == plan::RlAlgo::ppo || grpo || rloo, "the policy-gradient loop runs ppo, grpo or rloo, not ",
               plan::rl_algo_name(algo));
  STRATA_CHECK(iterations >= 1, "--iterations must be >= 1 (got ", iterations, ")");
  STRATA_CHECK(rollout_batch >= 1, "--rollout-batch must be >= 1 (got ", rollout_batch, ")");
  if (grpo || rloo)
    STRATA_CHECK(group_size >= 2, "--group-size must be >= 2 for ", grpo ? "GRPO" : "RLOO", " (got ", group_size,
                 "): the advantages compare the responses to one prompt");
  else
    STRATA_CHECK(group_size == 1, "--group-size ", group_size, ": PPO answers each prompt once");
  STRATA_CHECK(kl_in == KlIn::reward || grpo, "--kl-in loss is GRPO's; ", plan::rl_algo_name(algo),
               " puts the KL in the reward");
  STRATA_CHECK(!dr_grpo || grpo, "--dr-grpo is a variant of GRPO");
  const int sequences = rollout_sequences(*this);
  STRATA_CHECK(minibatch >= 1 && sequences % minibatch == 0, "--minibatch ", minibatch,
               " must be >= 1 and divide the ", group_size > 1 ? "responses per iteration " : "--rollout-batch ",
               sequences, group_size > 1 ? cat(" (--rollout-batch ", rollout_batch, " x --group-size ", group_size, ")")
                                         : std::string());
  STRATA_CHECK(epochs >= 1, "--epochs must be >= 1 (got ", epochs, ")");
  STRATA_CHECK(prompt_len >= 1, "--prompt-len must be >= 1 (got ", prompt_len, ")");
  STRATA_CHECK(response_len >= 1, "--response-len must be >= 1 (got ", response_len, ")");
  STRATA_CHECK(sample.temperature > 0, "--temperature must be > 0 for PPO (got ",
               sample.temperature, "): the policy is softmax(logits / temperature)");
  STRATA_CHECK(sample.top_k >= 0, "--top-k must be >= 0 (got ", sample.top_k, ")");
  STRATA_CHECK(kl_coef >= 0, "--kl-coef must be >= 0 (got ", kl_coef, ")");
  STRATA_CHECK(kl_horizon > 0, "--kl-horizon must be > 0 (got ", kl_horizon, ")");
  STRATA_CHECK(gamma > 0 && gamma <= 1 && lambda >= 0 && lambda <= 1, "--gamma ", gamma,
               " must be in (0, 1] and --lambda ", lambda, " in [0, 1]");
  STRATA_CHECK(clip > 0 && value_clip > 0, "--clip and --value-clip must be > 0");
  STRATA_CHECK(actor_lr > 0 && critic_lr > 0, "--actor-lr and --critic-lr must be > 0");
  STRATA_CHECK(!resume || !run_dir.empty(), "--resume needs --run-dir");
  STRATA_CHECK(rollout_ranks >= 0, "--rollout-ranks must be >= 0 (got ", rollout_ranks, ")");
  if (off_policy || rollout_ranks > 0) {
    const char* what = rollout_ranks > 0 ? "--rollout-ranks" : "--off-policy";
    STRATA_CHECK(kv_cache, what, " samples through the KV cache: drop --no-kv-cache");
  }
  STRATA_CHECK(ckpt_every == 0 || !run_dir.empty(), "--ckpt-every needs --run-dir");
  STRATA_CHECK(!trace || !run_dir.empty(), "--trace needs --run-dir");
  STRATA_CHECK(zero >= 0 && zero <= 3, "--zero ", zero, ": ZeRO stage must be 0, 1, 2 or 3");
}

json PpoConfig::to_json() const {
  json j = {{"algo", plan::rl_algo_name(algo)},
          {"iterations", iterations},   {"rollout_batch", rollout_batch},
          {"minibatch", minibatch},     {"epochs", epochs},
          {"prompt_len", prompt_len},   {"response_len", response_len},
          {"temperature", sample.temperature}, {"top_k", sample.top_k},
          {"kv_cache", kv_cache},
          {"kl_coef", kl_coef},         {"kl_target", kl_target},
          {"kl_horizon", kl_horizon},   {"gamma", gamma},
          {"lambda", lambda},           {"clip", clip},
          {"value_clip", value_clip},   {"ent_coef", ent_coef},
          {"actor_lr", actor_lr},       {"critic_lr", critic_lr},
          {"seed", seed},               {"gold_seed", gold_seed},
          {"zero", zero}};
  if (algo != plan::RlAlgo::ppo) {
    j["group_size"] = group_size;
    j["kl_in"] = kl_in_name(kl_in);
    for (const char* k : {"gamma", "lambda", "value_clip", "critic_lr"}) j.erase(k);
  }
  if (algo == plan::RlAlgo::grpo) j["dr_grpo"] = dr_grpo;
  if (off_policy || rollout_ranks > 0) j["off_policy"] = true;
  if (rollout_ranks > 0) j["rollout_ranks"] = rollout_ranks;
  return j;
}

void check_models(const PpoModels& m, const PpoConfig& cfg) {
  STRATA_CHECK(same_shape(m.actor.cfg, m.reference.cfg), "--reference ", m.reference_path, " (",
               describe(m.reference.cfg), ") does not match --actor ", m.actor_path, " (",
               describe(m.actor.cfg), ")");
  STRATA_CHECK(!m.reward.head.empty(), "--reward ", m.reward_path,
               ": no value head (v_head.weight); train one with strata rlhf reward");
  STRATA_CHECK(m.reward.cfg.vocab == m.actor.cfg.vocab, "--reward ", m.reward_path, " has vocab ",
               m.reward.cfg.vocab, ", --actor ", m.actor_path, " has ", m.actor.cfg.vocab);
  STRATA_CHECK(m.critic.params.empty() || has_critic(cfg), "--critic: ", plan::rl_algo_name(cfg.algo),
               " trains no critic");
  if (!m.critic.params.empty()) {
    STRATA_CHECK(!m.critic.head.empty(), "--critic ", m.critic_path, ": no value head (v_head.weight)");
    STRATA_CHECK(m.critic.cfg.vocab == m.actor.cfg.vocab, "--critic ", m.critic_path,
                 " has vocab ", m.critic.cfg.vocab, ", --actor has ", m.actor.cfg.vocab);
  }
  const int T = cfg.prompt_len + cfg.response_len;
  for (const auto& [flag, f] : {std::pair<const char*, const ModelFile*>{"--actor", &m.actor},
                                {"--reward", &m.reward},
                                {"--critic", m.critic.params.empty() ? &m.reward : &m.critic}})
    if (f != &m.critic || has_critic(cfg))
    STRATA_CHECK(T <= f->cfg.seq, "--response-len ", cfg.response_len, " + --prompt-len ",
                 cfg.prompt_len, " = ", T, " positions, beyond the context of ", flag, " (",
                 f->cfg.seq, ")");
}

namespace {

double cpu_seconds() {  // of the whole process, every thread
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// One rollout of G sequences: tokens (G, T = P + R); per response token (G, R) arrays.
struct Rollout {
  int G = 0, P = 0, R = 0, T = 0;
  std::vector<int32_t> tokens;
  std::vector<double> old_logp, ref_logp, values, rewards, adv, ret;
  std::vector<double> score, gold;
};

// Sums for the iteration's record.
struct UpdateStats {
  double policy_loss = 0, value_loss = 0, entropy = 0, approx_kl = 0, clipped = 0, vclipped = 0;
  double kl_loss = 0;  // GRPO's β·k3 in the loss
  double actor_norm = 0, critic_norm = 0;
  int64_t tokens = 0, updates = 0;
};

// The iteration's metrics: the rollout's proxy reward, gold score and KL of the rollout
// policy from the reference (per response), the update's means, times and shares.
void record(json& rec, const Rollout& ro, const UpdateStats& st, bool critic, double gen_s, double score_s,
            double train_s) {
  const int G = ro.G, R = ro.R;
  double kl1 = 0, kl3 = 0, proxy = 0, gold = 0;
  for (int i = 0; i < G; ++i) {
    for (int t = 0; t < R; ++t) {
      const size_t k = size_t(i) * R + t;
      kl1 += kl_k1(ro.old_logp[k], ro.ref_logp[k]);
      kl3 += kl_k3(ro.old_logp[k], ro.ref_logp[k]);
    }
    proxy += ro.score[size_t(i)];
    gold += ro.gold[size_t(i)];
  }
  const double n = double(std::max<int64_t>(st.tokens, 1)), u = double(std::max<int64_t>(st.updates, 1));
  const double total = gen_s + score_s + train_s;
  rec.update({{"reward", proxy / G},
              {"gold", gold / G},
              {"kl", kl1 / G},
              {"kl_k3", kl3 / G},
              {"clip_frac", st.clipped / n},
              {"approx_kl", st.approx_kl / n},
              {"entropy", st.entropy / n},
              {"policy_loss", st.policy_loss / n},
              {"actor_grad_norm", st.actor_norm / u},
              {"time", {{"generate_s", gen_s}, {"score_s", score_s}, {"train_s", train_s}}},
              {"share", {{"generate", gen_s / total}, {"score", score_s / total}, {"train", train_s / total}}},
              {"gen_tokens_per_s", double(G) * R / gen_s}});
  if (critic)
    rec.update({{"value_loss", st.value_loss / n},
                {"value_clip_frac", st.vclipped / n},
                {"explained_variance", explained_variance(ro.values, ro.ret)},
                {"critic_grad_norm", st.critic_norm / u}});
  else
    rec["kl_loss"] = st.kl_loss / n;  // β·k3 per token (GRPO --kl-in loss; else 0)
}

// The rollout ranks of a run with --rollout-ranks, as the trainers and the rollout ranks
// see them: world ranks [first, first + n) sample, [0, first) train. Messages in the world
// group, in order per peer: tokens (tag 1) and behaviour log-probabilities (tag 2) of each
// rollout from every rollout rank to every trainer; weights (tag 3) from trainer 0 to every
// rollout rank after each update whose weights a later rollout samples with; first, the
// iteration the run starts at (tag 4, and on a resume the weights it needs, tag 3).
struct RolloutLink {
  comm::ProcessGroup* world = nullptr;
  int first = 0, n = 0;
};
constexpr int kTokensTag = 1, kLogpTag = 2, kWeightsTag = 3, kStartTag = 4;

// Rollout k samples with the weights after update k - 2 (the initial ones for k < 2): those
// trainers send after their iteration k - 2 when rollout k exists.
bool weights_wanted(int iter_done, int iterations) { return iter_done + 2 < iterations; }

// The responses [first, first + G) of iteration `iter` (global sequence numbers: k responses
// per prompt), their prompts, and their sampling streams.
void rollout_prompts(const PpoConfig& cfg, int vocab, int iter, int64_t first, int G, std::vector<int32_t>& prompts,
                     std::vector<uint64_t>& streams) {
  const int P = cfg.prompt_len;
  prompts.resize(size_t(G) * P);
  streams.resize(static_cast<size_t>(G));
  for (int i = 0; i < G; ++i) {
    const int64_t global = int64_t(iter) * rollout_sequences(cfg) + first + i;
    synthetic_prompt(cfg.seed, global / cfg.group_size, P, vocab, &prompts[size_t(i) * P]);
    streams[size_t(i)] = uint64_t(global);
  }
}

class PpoRun {
 public:
  PpoRun(const PpoConfig& cfg, PpoModels& m, comm::ProcessGroup* group, RolloutLink link = {})
      : cfg_(cfg),
        link_(link),
        solo_(group && group->size() > 1 ? nullptr : comm::make_thread_world(1)[0]),
        group_(group && group->size() > 1 ? group : nullptr),
        dp_(group_ ? *group_ : *solo_),
        rank_(group_ ? group_->rank() : 0),
        world_(group_ ? group_->size() : 1),
        acfg_(m.actor.cfg),
        mb_(cfg.minibatch),
        actor_(recomputing(acfg_, cfg.recompute), mb_, /*allocate_state=*/false),
        reference_(acfg_, mb_, false),
        ref_params_(MemCategory::parameters, cfg.zero == 3 ? 0 : sizeof(float) * acfg_.num_params()),
        reward_(m.reward.cfg, mb_, false, /*allocate_state=*/cfg.zero != 3),
        decoder_(acfg_, link.n > 0 ? 1 : rollout_sequences(cfg) / world_),
        gold_(cfg.gold_seed, acfg_.vocab),
        kl_(cfg.kl_coef, cfg.kl_target, cfg.kl_horizon),
        head_opt_(cfg.optim) {
    actor_eng_ = make_trained_engine(actor_, dp_, cfg.zero, cfg.optim, m.actor.params);
    if (cfg.zero == 3) {  // frozen models sharded too, gathered per unit on use
      ref_shards_ = std::make_unique<FrozenShards>(reference_, dp_, m.reference.params);
      reward_shards_ = std::make_unique<FrozenShards>(reward_.gpt(), dp_, m.reward.params);
    } else {
      std::memcpy(ref_params_.data(), m.reference.params.data(), sizeof(float) * m.reference.params.size());
      bind_frozen(reference_, ref_params_.as<float>());
      std::memcpy(reward_.params(), m.reward.params.data(), sizeof(float) * m.reward.params.size());
    }
    reward_.head() = m.reward.head;
    if (has_critic(cfg)) {
      const ModelFile& c = m.critic.params.empty() ? m.reward : m.critic;
      critic_ = std::make_unique<ValueModel>(recomputing(c.cfg, cfg.recompute), mb_, true, /*allocate_state=*/false);
      critic_eng_ = make_trained_engine(critic_->gpt(), dp_, cfg.zero, cfg.optim, c.params);
      critic_->head() = c.head;
      // The value head (C + 1 parameters) stays replicated, outside the engine: its gradient
      // is summed over the ranks by hand and clipped together with the trunk's.
      head_opt_.add("head", critic_->head().data(), critic_->head_grad(), critic_->config().dim + 1, {});
    }
    dlogits_.resize(size_t(mb_) * (cfg.prompt_len + cfg.response_len) * acfg_.padded_vocab);
  }

  PpoResult run(const std::function<void(const json&)>& log);

 private:
  void generate(int iter, Rollout& ro, json& rec);
  void receive(Rollout& ro);
  void send_weights(int iter_done);
  void send_to_rollout_ranks(const void* data, size_t n, DType dtype, int tag);
  void start_rollout_ranks(int start);
  void score(Rollout& ro);
  void gather(Rollout& ro);
  void advantages(Rollout& ro);
  void all_reduce(float* x, int64_t n) {
    if (group_) group_->all_reduce(x, size_t(n));
  }
  void bind_decoder();
  UpdateStats update(int iter, const Rollout& ro);
  void update_critic(const Rollout& ro, const std::vector<int32_t>& tokens, const int* idx, int mbl,
                     UpdateStats& st);
  void policy_logps(model::GPT& m, const Rollout& ro, std::vector<double>& out);
  struct State;
  std::string state_file() const;
  void save_state(int iter);
  int load_state();
  json memory_report() const;
  std::string path(const char* name) const { return (fs::path(cfg_.run_dir) / name).string(); }

  const PpoConfig& cfg_;
  RolloutLink link_;           // n > 0: the rollouts come from rollout ranks
  comm::GroupPtr solo_;        // a one-rank group for the engines of a one-process run
  comm::ProcessGroup* group_;  // data-parallel ranks (null: one process)
  comm::ProcessGroup& dp_;     // the engines' group: group_ or solo_
  int rank_, world_;
  model::GPTConfig acfg_;
  int mb_;
  model::GPT actor_, reference_;
  Buffer ref_params_;
  ValueModel reward_;
  std::unique_ptr<ValueModel> critic_;  // PPO only
  KvDecoder decoder_;
  GoldRule gold_;
  KlController kl_;
  std::unique_ptr<parallel::DataParallelEngine> actor_eng_, critic_eng_;
  std::unique_ptr<FrozenShards> ref_shards_, reward_shards_;  // ZeRO-3 only
  AdamWGroup head_opt_;            // the critic's value head (PPO)
  std::vector<float> gen_params_;  // ZeRO-3: the actor gathered whole for generation
  // Off-policy (--off-policy, --rollout-ranks): the weights the next rollout samples with
  // (those at the start of the last iteration), whole; in the checkpoint.
  std::vector<float> behaviour_;
  struct {
    std::vector<int32_t> tokens;
    std::vector<double> old_logp;
  } received_;  // --rollout-ranks: the whole rollout, which gather() takes
  bool off_policy() const { return cfg_.off_policy || link_.n > 0; }
  std::vector<float> full_weights() {  // a collective at ZeRO-3
    const float* w = actor_eng_->full_params();
    return w ? std::vector<float>(w, w + actor_.num_params()) : actor_eng_->gather_full_params();
  }
  std::vector<float> dlogits_;
  std::vector<float> values_, dvalues_;  // the critic's minibatch (PPO)
};

void PpoRun::generate(int iter, Rollout& ro, json& rec) {
  // This rank's share of the rollout: the k = group_size responses to each of prompts
  // [rank·B/N, (rank+1)·B/N) of the iteration, sequences [rank·G, (rank+1)·G) of it.
  if (link_.n > 0) return receive(ro);
  const int G = rollout_sequences(cfg_) / world_, P = cfg_.prompt_len, R = cfg_.response_len, T = P + R;
  ro.G = G, ro.P = P, ro.R = R, ro.T = T;
  std::vector<int32_t> prompts, resp(size_t(G) * R);
  std::vector<uint64_t> streams;
  rollout_prompts(cfg_, acfg_.vocab, iter, int64_t(rank_) * G, G, prompts, streams);
  if (cfg_.off_policy) {  // sampled with the weights before the last update, which it records
    std::vector<float> now = full_weights();
    if (behaviour_.empty()) behaviour_ = now;
    decoder_.bind(behaviour_.data());
    std::vector<float> logp(size_t(G) * R);
    generate_cached(decoder_, acfg_, prompts.data(), G, P, R, cfg_.sample, cfg_.seed ^ 0x9E0117, streams.data(),
                    resp.data(), logp.data());
    ro.old_logp.assign(logp.begin(), logp.end());
    behaviour_.swap(now);
  } else if (cfg_.kv_cache) {
    bind_decoder();
    generate_cached(decoder_, acfg_, prompts.data(), G, P, R, cfg_.sample, cfg_.seed ^ 0x9E0117,
                    streams.data(), resp.data());
  } else {  // in chunks of the actor's batch; the same tokens up to fp32 rounding
    for (int at = 0; at < G; at += mb_)
      generate_uncached(actor_, &prompts[size_t(at) * P], std::min(mb_, G - at), P, R, cfg_.sample,
                        cfg_.seed ^ 0x9E0117, &streams[size_t(at)], &resp[size_t(at) * R]);
  }
  ro.tokens.resize(size_t(G) * T);
  for (int i = 0; i < G; ++i) {
    std::copy(&prompts[size_t(i) * P], &prompts[size_t(i + 1) * P], &ro.tokens[size_t(i) * T]);
    std::copy(&resp[size_t(i) * R], &resp[size_t(i + 1) * R], &ro.tokens[size_t(i) * T + P]);
  }
  rec["kv_cache_bytes"] = decoder_.cache_bytes();
  rec["gen_gather_bytes"] = int64_t(sizeof(float) * gen_params_.size());
  std::vector<float>().swap(gen_params_);
}

// A trainer's share of the next rollout from the rollout ranks: every rollout rank sends every
// trainer its part, so each trainer holds the whole rollout (gather() then has no tokens or
// behaviour log-probabilities to exchange) and scores sequences [rank·G, (rank+1)·G).
void PpoRun::receive(Rollout& ro) {
  const int S = rollout_sequences(cfg_), per = S / link_.n, G = S / world_, P = cfg_.prompt_len,
            R = cfg_.response_len, T = P + R;
  std::vector<int32_t>& tokens = received_.tokens;
  std::vector<float> logp(size_t(S) * R);
  tokens.resize(size_t(S) * T);
  for (int j = 0; j < link_.n; ++j) {
    link_.world->recv(&tokens[size_t(j) * per * T], size_t(per) * T, comm::dtype_of<int32_t>(), link_.first + j,
                      kTokensTag);
    link_.world->recv(&logp[size_t(j) * per * R], size_t(per) * R, comm::dtype_of<float>(), link_.first + j, kLogpTag);
  }
  if (cfg_.ckpt_every > 0) behaviour_ = full_weights();  // what the next rollout samples with
  received_.old_logp.assign(logp.begin(), logp.end());
  ro.G = G, ro.P = P, ro.R = R, ro.T = T;
  ro.tokens.assign(tokens.begin() + int64_t(rank_) * G * T, tokens.begin() + int64_t(rank_ + 1) * G * T);
  ro.old_logp.assign(logp.begin() + int64_t(rank_) * G * R, logp.begin() + int64_t(rank_ + 1) * G * R);
}

// After update `iter_done`: the new weights to every rollout rank when a later rollout samples
// with them (a collective of the trainers at ZeRO-3, which gather them).
void PpoRun::send_weights(int iter_done) {
  if (link_.n == 0 || !weights_wanted(iter_done, cfg_.iterations)) return;
  const std::vector<float> w = full_weights();
  send_to_rollout_ranks(w.data(), w.size(), DType::f32, kWeightsTag);
}

void PpoRun::send_to_rollout_ranks(const void* data, size_t n, DType dtype, int tag) {
  if (rank_ != 0) return;
  for (int j = 0; j < link_.n; ++j) link_.world->send(data, n, dtype, link_.first + j, tag);
}

// At the start: the first iteration to the rollout ranks, and on a resume at s the weights
// rollouts s and s + 1 sample with, when they are not the initial ones: w_(s-1) (the
// checkpoint's behaviour weights) and w_s (the weights now).
void PpoRun::start_rollout_ranks(int start) {
  if (link_.n == 0) return;
  const int64_t s = start;
  send_to_rollout_ranks(&s, 1, DType::i64, kStartTag);
  if (start >= 2 && start < cfg_.iterations)
    send_to_rollout_ranks(behaviour_.data(), behaviour_.size(), DType::f32, kWeightsTag);
  if (start >= 1 && start + 1 < cfg_.iterations) {
    const std::vector<float> w = full_weights();
    send_to_rollout_ranks(w.data(), w.size(), DType::f32, kWeightsTag);
  }
}

// The KV decoder reads whole fp32 parameters: in place below ZeRO-3; at ZeRO-3 the actor is
// gathered whole for the rollout (a transient Ψ floats per rank, as DeepSpeed-Chat's hybrid
// engine does) and freed after it.
void PpoRun::bind_decoder() {
  if (const float* p = actor_eng_->full_params()) {
    decoder_.bind(p);
    return;
  }
  gen_params_ = actor_eng_->gather_full_params();
  decoder_.bind(gen_params_.data());
}

// log π(a_t) at temperature τ of every response token, in chunks of the model's batch.
void PpoRun::policy_logps(model::GPT& m, const Rollout& ro, std::vector<double>& out) {
  const int P = ro.P, R = ro.R, T = ro.T, Vp = acfg_.padded_vocab;
  out.assign(size_t(ro.G) * R, 0.0);
  std::vector<float> lse(static_cast<size_t>(R)), logp(static_cast<size_t>(R));
  for (int at = 0; at < ro.G; at += mb_) {
    const int b = std::min(mb_, ro.G - at);
    const float* z = m.logits(&ro.tokens[size_t(at) * T], b, T);
    for (int i = 0; i < b; ++i) {  // the rows before each response token, and those tokens
      kernels::log_softmax_forward(lse.data(), logp.data(), nullptr, z + (int64_t(i) * T + P - 1) * Vp,
                                   &ro.tokens[size_t(at + i) * T + P], R, acfg_.vocab, Vp,
                                   float(cfg_.sample.temperature));
      for (int t = 0; t < R; ++t) out[size_t(at + i) * R + t] = logp[size_t(t)];
    }
  }
}

void PpoRun::score(Rollout& ro) {
  const int G = ro.G, P = ro.P, R = ro.R, T = ro.T;
  if (!off_policy()) policy_logps(actor_, ro, ro.old_logp);  // else the behaviour's, from the sampler
  policy_logps(reference_, ro, ro.ref_logp);
  ro.values.assign(critic_ ? size_t(G) * R : 0, 0.0);
  ro.score.assign(size_t(G), 0.0);
  ro.gold.assign(size_t(G), 0.0);
  std::vector<float> v(size_t(mb_) * T);
  for (int at = 0; at < G; at += mb_) {
    const int b = std::min(mb_, G - at);
    if (critic_) {
      critic_->forward(&ro.tokens[size_t(at) * T], b, T, v.data());
      for (int i = 0; i < b; ++i)
        for (int t = 0; t < R; ++t) ro.values[size_t(at + i) * R + t] = v[size_t(i) * T + P - 1 + t];
    }
    reward_.forward(&ro.tokens[size_t(at) * T], b, T, v.data());
    for (int i = 0; i < b; ++i) ro.score[size_t(at + i)] = v[size_t(i) * T + T - 1];
  }
  for (int i = 0; i < G; ++i) ro.gold[size_t(i)] = gold_.score(&ro.tokens[size_t(i) * T + P], R);
}

// Every rank's share of the rollout, in rank order: the whole rollout on every rank.
void PpoRun::gather(Rollout& ro) {
  if (!group_) return;
  auto all = [this](auto& v) {
    std::remove_reference_t<decltype(v)> out(v.size() * size_t(world_));
    group_->all_gather(v.data(), out.data(), v.size(), comm::dtype_of<typename std::remove_reference_t<decltype(v)>::value_type>());
    v.swap(out);
  };
  if (link_.n > 0) {  // the whole rollout came from the rollout ranks
    ro.tokens.swap(received_.tokens);
    ro.old_logp.swap(received_.old_logp);
  } else {
    all(ro.tokens);
    all(ro.old_logp);
  }
  all(ro.ref_logp);
  if (critic_) all(ro.values);
  all(ro.score);
  all(ro.gold);
  ro.G *= world_;
}

// The advantages of the whole rollout (every rank alike). PPO: per-token rewards, GAE and
// whitened advantages; GRPO and RLOO: each response's reward against its group's, on every
// token of the response.
void PpoRun::advantages(Rollout& ro) {
  const int G = ro.G, R = ro.R;
  ro.rewards.assign(size_t(G) * R, 0.0);
  ro.adv.assign(size_t(G) * R, 0.0);
  if (!critic_) {
    std::vector<double> r(ro.score), a(static_cast<size_t>(G));
    if (cfg_.kl_in == KlIn::reward)
      for (int i = 0; i < G; ++i)
        for (int t = 0; t < R; ++t)
          r[size_t(i)] -= kl_.beta() * kl_k1(ro.old_logp[size_t(i) * R + t], ro.ref_logp[size_t(i) * R + t]);
    const int k = cfg_.group_size;
    if (cfg_.algo == plan::RlAlgo::rloo) rloo_advantages(r.data(), G / k, k, a.data());
    else group_advantages(r.data(), G / k, k, /*scale_by_std=*/!cfg_.dr_grpo, a.data());
    for (int i = 0; i < G; ++i) {
      ro.rewards[size_t(i) * R + R - 1] = r[size_t(i)];
      std::fill_n(&ro.adv[size_t(i) * R], R, a[size_t(i)]);
    }
    return;
  }
  ro.ret.assign(size_t(G) * R, 0.0);
  for (int i = 0; i < G; ++i) {
    double* r = &ro.rewards[size_t(i) * R];
    for (int t = 0; t < R; ++t)
      r[t] = -kl_.beta() * kl_k1(ro.old_logp[size_t(i) * R + t], ro.ref_logp[size_t(i) * R + t]);
    r[R - 1] += ro.score[size_t(i)];
    gae(r, &ro.values[size_t(i) * R], R, cfg_.gamma, cfg_.lambda, &ro.adv[size_t(i) * R],
        &ro.ret[size_t(i) * R]);
  }
  whiten(ro.adv.data(), int64_t(ro.adv.size()));
}

UpdateStats PpoRun::update(int iter, const Rollout& ro) {
  const int P = ro.P, R = ro.R, T = ro.T, Vp = acfg_.padded_vocab, V = acfg_.vocab;
  const float tau = float(cfg_.sample.temperature);
  // Each response's token mean, averaged over the minibatch (PPO, GRPO, RLOO); Dr. GRPO's
  // constant normaliser (the longest response, R) is the same number while every response
  // has R tokens.
  const double scale = 1.0 / (double(mb_) * R);
  const bool kl_loss = cfg_.kl_in == KlIn::loss;
  // Each global minibatch of mb_ sequences is split over the ranks (mbl each); gradients are
  // summed over ranks before every step, so every rank takes the same step.
  const int mbl = mb_ / world_;
  UpdateStats st;
  std::vector<int> order(size_t(ro.G));
  Rng rng(cfg_.seed, 0x0DE5'0000'0000ULL + uint64_t(iter));
  std::vector<int32_t> tokens(size_t(mb_) * T);
  std::vector<float> lse(static_cast<size_t>(R)), logp(lse), entropy(lse), g(lse);  // a response's rows
  for (int epoch = 0; epoch < cfg_.epochs; ++epoch) {
    for (int i = 0; i < ro.G; ++i) order[size_t(i)] = i;
    for (int k = ro.G - 1; k > 0; --k) std::swap(order[size_t(k)], order[rng.below(uint64_t(k + 1))]);
    for (int at = 0; at < ro.G; at += mb_) {
      const int* idx = &order[size_t(at) + size_t(rank_) * mbl];
      for (int i = 0; i < mbl; ++i)
        std::copy(&ro.tokens[size_t(idx[i]) * T], &ro.tokens[size_t(idx[i] + 1) * T], &tokens[size_t(i) * T]);
      // Actor: clipped policy loss with entropy bonus, through the logits.
      actor_eng_->begin_step();
      actor_eng_->begin_micro(0, 1);
      const float* z = actor_.logits(tokens.data(), mbl, T);
      std::fill(dlogits_.begin(), dlogits_.end(), 0.0f);
      for (int i = 0; i < mbl; ++i) {  // sequence i's response rows (R) and their tokens
        const int64_t row = int64_t(i) * T + P - 1;
        const int32_t* actions = &tokens[size_t(i) * T + P];
        kernels::log_softmax_forward(lse.data(), logp.data(), entropy.data(), z + row * Vp, actions, R, V,
                                     Vp, tau);
        for (int t = 0; t < R; ++t) {
          const size_t k = size_t(idx[i]) * R + t;
          const PolicyTerm pt = policy_term(logp[size_t(t)], ro.old_logp[k], ro.adv[k], cfg_.clip);
          const KlTerm kt = kl_loss ? kl_k3_term(logp[size_t(t)], ro.ref_logp[k], kl_.beta()) : KlTerm{};
          g[size_t(t)] = float((pt.dlogp + kt.dlogp) * scale);
          st.policy_loss += pt.loss;
          st.kl_loss += kt.loss;
          st.entropy += entropy[size_t(t)];
          st.approx_kl += 0.5 * (logp[size_t(t)] - ro.old_logp[k]) * (logp[size_t(t)] - ro.old_logp[k]);
          st.clipped += pt.clipped;
          ++st.tokens;
        }
        kernels::log_softmax_backward(dlogits_.data() + row * Vp, z + row * Vp, lse.data(), entropy.data(),
                                      actions, g.data(), float(cfg_.ent_coef * scale), R, V, Vp, tau);
      }
      actor_.backward_logits(dlogits_.data());
      actor_eng_->end_backward();  // gradients summed over the ranks (all-reduce or reduce-scatter)
      st.actor_norm += actor_eng_->step(cfg_.actor_lr);
      if (critic_) update_critic(ro, tokens, idx, mbl, st);
      ++st.updates;
    }
  }
  if (group_) {  // the update's sums over every rank's share (norms are the same everywhere)
    double sums[] = {st.policy_loss, st.value_loss, st.entropy, st.approx_kl, st.clipped, st.vclipped,
                     double(st.tokens), st.kl_loss};
    group_->all_reduce(sums, 8);
    st.policy_loss = sums[0], st.value_loss = sums[1], st.entropy = sums[2], st.approx_kl = sums[3];
    st.clipped = sums[4], st.vclipped = sums[5], st.tokens = int64_t(sums[6]), st.kl_loss = sums[7];
  }
  return st;
}

// The critic's clipped value loss on the minibatch's share `tokens` (sequences idx[0..mbl)
// of the rollout), one AdamW step of its trunk and value head.
void PpoRun::update_critic(const Rollout& ro, const std::vector<int32_t>& tokens, const int* idx, int mbl,
                           UpdateStats& st) {
  const int P = ro.P, R = ro.R, T = ro.T;
  const double scale = 1.0 / (double(mb_) * R);
  values_.resize(size_t(mb_) * T);
  dvalues_.assign(size_t(mb_) * T, 0.0f);
  critic_eng_->begin_step();
  critic_eng_->begin_micro(0, 1);
  critic_->zero_head_grad();
  critic_->forward(tokens.data(), mbl, T, values_.data());
  for (int i = 0; i < mbl; ++i)
    for (int t = 0; t < R; ++t) {
      const size_t k = size_t(idx[i]) * R + t;
      const size_t row = size_t(i) * T + P - 1 + t;
      const ValueTerm vt = value_term(values_[row], ro.values[k], ro.ret[k], cfg_.value_clip);
      dvalues_[row] = float(vt.dvalue * scale);
      st.value_loss += vt.loss;
      st.vclipped += vt.clipped;
    }
  critic_->backward(dvalues_.data());
  critic_eng_->end_backward();
  all_reduce(critic_->head_grad(), critic_->config().dim + 1);
  float clip = 1;
  st.critic_norm += critic_eng_->step(cfg_.critic_lr, head_opt_.sum_squares(), &clip);
  head_opt_.apply(cfg_.critic_lr, clip);
}

// The run state's whole tensors over this rank's shards: the actor's, and under PPO the
// critic's trunk and value head.
struct PpoRun::State {
  FullState actor;
  std::unique_ptr<FullState> critic;
  std::vector<NamedTensor> tensors;
  explicit State(PpoRun& r) : actor(*r.actor_eng_, r.dp_, r.actor_.num_params(), "actor.params") {
    if (r.critic_) critic = std::make_unique<FullState>(*r.critic_eng_, r.dp_, r.critic_->gpt().num_params(), "critic.trunk");
  }
  // After gather() (saving) or before the load: the tensors to write or fill; off-policy, the
  // weights the next rollout samples with (whole).
  void collect(const AdamWGroup& head, std::vector<float>* behaviour) {
    tensors = actor.tensors();
    if (behaviour) tensors.push_back({"behaviour.params", behaviour->data(), int64_t(behaviour->size())});
    if (!critic) return;
    for (const NamedTensor& t : critic->tensors()) tensors.push_back(t);
    for (const NamedTensor& t : head.tensors("critic.")) tensors.push_back(t);
  }
};

std::string PpoRun::state_file() const {
  return path(cat(plan::rl_algo_name(cfg_.algo), "-state.safetensors").c_str());
}

// Collective: every rank assembles the whole states from the shards; rank 0 writes.
void PpoRun::save_state(int iter) {
  State st(*this);
  st.actor.gather();
  if (st.critic) st.critic->gather();
  if (rank_ != 0) return;
  st.collect(head_opt_, off_policy() ? &behaviour_ : nullptr);
  json meta = {{"iteration", iter},
               {"beta", kl_.beta()},
               {"algo", plan::rl_algo_name(cfg_.algo)},
               {"actor_steps", actor_eng_->step_count()},
               {"config", cfg_.to_json()},
               {"actor", config_json(acfg_)}};
  if (critic_) {
    meta["critic_steps"] = critic_eng_->step_count();
    meta["critic"] = config_json(critic_->config());
  }
  save_tensors(state_file(), st.tensors, meta);
}

// Returns the iterations already done (0: a fresh start). The file holds whole tensors, so
// any rank count and ZeRO stage resumes it.
int PpoRun::load_state() {
  const std::string f = state_file();
  if (!cfg_.resume) return 0;
  STRATA_CHECK(fs::exists(f), "--resume: ", f, " does not exist (no checkpoint saved yet)");
  State st(*this);
  if (off_policy()) behaviour_.assign(size_t(actor_.num_params()), 0.0f);
  st.collect(head_opt_, off_policy() ? &behaviour_ : nullptr);
  const json meta = load_tensors(f, st.tensors);
  STRATA_CHECK(meta.value("algo", "ppo") == plan::rl_algo_name(cfg_.algo), "--resume: ", f, " is a ",
               meta.value("algo", "ppo"), " run's state, not ", plan::rl_algo_name(cfg_.algo), "'s");
  STRATA_CHECK(meta.at("actor") == config_json(acfg_) &&
                   (!critic_ || meta.at("critic") == config_json(critic_->config())),
               "--resume: ", f, " was written for other models (actor ", meta.at("actor").dump(), ")");
  kl_.set_beta(meta.at("beta").get<double>());
  st.actor.scatter(meta.at("actor_steps").get<int64_t>());
  if (critic_) {
    st.critic->scatter(meta.at("critic_steps").get<int64_t>());
    head_opt_.set_steps(meta.at("critic_steps").get<int64_t>());
  }
  return meta.at("iteration").get<int>();
}

// Per rank: the engines' model states (ZeRO-sharded as --zero says), the critic's replicated
// value head, the frozen models' parameters (shards under ZeRO-3, else whole) and their
// gather slots (comm).
json PpoRun::memory_report() const {
  auto bytes = [](int64_t floats) { return 4 * floats; };
  const int64_t head = reward_.config().dim + 1;
  const int64_t pa = actor_.num_params(), pr = reward_.config().num_params() + head;
  const int64_t act_a = actor_.activation_bytes() + bytes(int64_t(dlogits_.size()));
  const parallel::MemoryReport a = actor_eng_->memory_report();
  json out = {
      {"actor", {{"parameters", a.parameters}, {"gradients", a.gradients}, {"optimizer", a.optimizer},
                 {"activations", act_a}, {"comm", a.comm}, {"kv_cache", decoder_.cache_bytes()},
                 {"generation_gather", actor_eng_->full_params() ? 0 : bytes(pa)}}},
      {"reference", frozen_memory(ref_shards_.get(), bytes(pa), 0, reference_.activation_bytes())},
      {"reward", frozen_memory(reward_shards_.get(), bytes(pr), bytes(head),
                               const_cast<ValueModel&>(reward_).gpt().activation_bytes())},
      {"zero", cfg_.zero},
      {"tracker", memory_tracker().to_json()}};
  if (critic_) {
    const parallel::MemoryReport c = critic_eng_->memory_report();
    const int64_t ch = critic_->config().dim + 1;
    out["critic"] = {{"parameters", c.parameters + bytes(ch)}, {"gradients", c.gradients + bytes(ch)},
                     {"optimizer", c.optimizer + 2 * bytes(ch)}, {"comm", c.comm},
                     {"activations", critic_->gpt().activation_bytes()}};
  }
  add_model_states_total(out);
  return out;
}

PpoResult PpoRun::run(const std::function<void(const json&)>& log) {
  PpoResult res;
  const int start = load_state();
  start_rollout_ranks(start);
  // metrics.jsonl streams (a record per iteration survives a crash), each write checked.
  const bool writer = rank_ == 0;  // rank 0 alone writes files and reports
  LineLog metrics = writer && !cfg_.run_dir.empty() ? open_run_log(cfg_.run_dir, "iteration", start, "PPO log") : LineLog();
  double t_gen = 0, t_score = 0, t_train = 0;
  for (int iter = start; iter < cfg_.iterations; ++iter) {
    json rec = {{"iteration", iter + 1}};
    Rollout ro;
    const double cpu0 = cpu_seconds();
    auto t0 = std::chrono::steady_clock::now();
    {
      TraceSpan span(tracer(), "rlhf generate", "compute");
      generate(iter, ro, rec);
    }
    const double gen_s = seconds_since(t0);
    t0 = std::chrono::steady_clock::now();
    {
      TraceSpan span(tracer(), "rlhf score", "compute");
      score(ro);
      gather(ro);
      advantages(ro);
    }
    const double score_s = seconds_since(t0);
    t0 = std::chrono::steady_clock::now();
    UpdateStats st;
    {
      TraceSpan span(tracer(), "rlhf train", "compute");
      st = update(iter, ro);
      send_weights(iter);
    }
    const double train_s = seconds_since(t0);
    t_gen += gen_s, t_score += score_s, t_train += train_s;
    const double beta = kl_.beta();
    record(rec, ro, st, critic_ != nullptr, gen_s, score_s, train_s);
    kl_.update(rec["kl"].get<double>(), ro.G);
    rec["beta"] = beta;
    rec["time"]["cpu_s"] = cpu_seconds() - cpu0;
    if (metrics.is_open()) metrics.write_line(rec.dump());
    if (log && writer) log(rec);
    res.iterations.push_back(rec);
    if (cfg_.ckpt_every > 0 && ((iter + 1) % cfg_.ckpt_every == 0 || iter + 1 == cfg_.iterations))
      save_state(iter + 1);
    if (group_) group_->barrier();  // a resumed run finds the state its peers saved
  }
  const double total = t_gen + t_score + t_train;
  res.summary = {{"iterations", cfg_.iterations},
                 {"resumed_from", start},
                 {"config", cfg_.to_json()},
                 {"actor", config_json(acfg_)},
                 {"algo", plan::rl_algo_name(cfg_.algo)},
                 {"reward_model", config_json(reward_.config())},
                 {"time", {{"generate_s", t_gen}, {"score_s", t_score}, {"train_s", t_train}}},
                 {"share", total > 0 ? json{{"generate", t_gen / total}, {"score", t_score / total},
                                            {"train", t_train / total}}
                                     : json(nullptr)},
                 {"memory", memory_report()}};
  if (critic_) res.summary["critic"] = config_json(critic_->config());
  compare_with_plan(res.summary["memory"], cfg_.algo, acfg_, critic_ ? critic_->config() : reward_.config(),
                    link_.n > 0 ? 1 : rollout_sequences(cfg_) / world_, mb_ / world_, world_, cfg_.zero);
  res.summary["ranks"] = world_;
  if (link_.n > 0) res.summary["rollout_ranks"] = link_.n;  // "ranks": the trainers
  if (!res.iterations.empty()) {
    res.summary["first"] = res.iterations.front();
    res.summary["last"] = res.iterations.back();
  }
  const std::vector<float> actor_w = actor_eng_->gather_full_params();  // collectives
  const std::vector<float> critic_w = critic_ ? critic_eng_->gather_full_params() : std::vector<float>();
  if (writer && !cfg_.run_dir.empty()) {
    save_model(path("actor.safetensors"), acfg_, actor_w.data(), {}, {{"role", "actor"}});
    if (critic_)
      save_model(path("critic.safetensors"), critic_->config(), critic_w.data(), critic_->head(), {{"role", "critic"}});
    ckpt::atomic_write_file(path("summary.json"), res.summary.dump(2) + "\n");
  }
  return res;
}

// A rollout rank (index j of link.n): samples its share of every rollout, responses
// [j·S/n, (j+1)·S/n), with the weights of the update before the last, and sends it to every
// trainer; its summary says what it did.
PpoResult run_rollout_rank(const PpoConfig& cfg, const ModelFile& actor, const RolloutLink& link, int j) {
  const int S = rollout_sequences(cfg), G = S / link.n, P = cfg.prompt_len, R = cfg.response_len, T = P + R;
  std::vector<float> w = actor.params;
  KvDecoder dec(actor.cfg, G);
  dec.bind(w.data());
  std::vector<int32_t> prompts, resp(size_t(G) * R), tokens(size_t(G) * T);
  std::vector<uint64_t> streams;
  std::vector<float> logp(size_t(G) * R);
  double gen_s = 0, wait_s = 0;
  int64_t start = 0;
  link.world->recv(&start, 1, DType::i64, 0, kStartTag);
  for (int iter = int(start); iter < cfg.iterations; ++iter) {
    auto t0 = std::chrono::steady_clock::now();
    if (iter >= 2)  // the weights after update iter - 2
      link.world->recv(w.data(), w.size(), comm::dtype_of<float>(), 0, kWeightsTag);
    wait_s += seconds_since(t0);
    t0 = std::chrono::steady_clock::now();
    rollout_prompts(cfg, actor.cfg.vocab, iter, int64_t(j) * G, G, prompts, streams);
    generate_cached(dec, actor.cfg, prompts.data(), G, P, R, cfg.sample, cfg.seed ^ 0x9E0117, streams.data(),
                    resp.data(), logp.data());
    for (int i = 0; i < G; ++i) {
      std::copy_n(&prompts[size_t(i) * P], P, &tokens[size_t(i) * T]);
      std::copy_n(&resp[size_t(i) * R], R, &tokens[size_t(i) * T + P]);
    }
    gen_s += seconds_since(t0);
    for (int t = 0; t < link.first; ++t) {
      link.world->send(tokens.data(), tokens.size(), comm::dtype_of<int32_t>(), t, kTokensTag);
      link.world->send(logp.data(), logp.size(), comm::dtype_of<float>(), t, kLogpTag);
    }
  }
  PpoResult r;
  r.summary = {{"role", "rollout"}, {"generate_s", gen_s}, {"weights_wait_s", wait_s},
               {"kv_cache_bytes", dec.cache_bytes()}};
  return r;
}

}  // namespace

PpoResult run_ppo(const PpoConfig& cfg, PpoModels models, const std::function<void(const json&)>& log,
                  comm::ProcessGroup* group) {
  cfg.validate();
  check_models(models, cfg);
  const int world = group ? group->size() : 1;
  const int trainers = trainer_ranks(cfg, world);
  STRATA_CHECK(trainers >= 1, "--rollout-ranks ", cfg.rollout_ranks, " leaves no trainer of ", world, " ranks");
  STRATA_CHECK(rollout_sequences(cfg) % trainers == 0 && cfg.minibatch % trainers == 0 &&
                   (cfg.rollout_ranks > 0 || cfg.rollout_batch % world == 0),
               "--rollout-batch ", cfg.rollout_batch, " and --minibatch ", cfg.minibatch, " must divide over ",
               trainers, cfg.rollout_ranks > 0 ? " trainer" : "", " ranks");
  STRATA_CHECK(cfg.rollout_ranks == 0 || cfg.rollout_batch % cfg.rollout_ranks == 0, "--rollout-batch ",
               cfg.rollout_batch, " must divide over --rollout-ranks ", cfg.rollout_ranks);
  if (cfg.trace) {
    tracer().enable(0);
    tracer().name_thread("compute");
  }
  RolloutLink link;
  comm::GroupPtr trainer_group;
  if (cfg.rollout_ranks > 0) {
    link = {group, trainers, cfg.rollout_ranks};
    const bool rollout = group->rank() >= trainers;
    trainer_group = group->split(rollout ? 1 : 0, group->rank(), rollout ? "rollout" : "trainers");
    if (rollout) return run_rollout_rank(cfg, models.actor, link, group->rank() - trainers);
  }
  PpoRun run(cfg, models, trainer_group ? trainer_group.get() : group, link);
  PpoResult r = run.run(log);
  if (cfg.trace) tracer().write((fs::path(cfg.run_dir) / "trace-rank0.json").string());
  return r;
}

}  // namespace strata::rlhf
