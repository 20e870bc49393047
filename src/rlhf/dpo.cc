// The DPO loop (dpo.h): reference log-probs once, then steps over the pairs, evaluations,
// checkpoints.
#include "rlhf/dpo.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>

#include "ckpt/fsutil.h"
#include "core/error.h"
#include "core/rng.h"
#include "core/timer.h"
#include "kernels/crossentropy.h"
#include "rlhf/frozen_shards.h"
#include "rlhf/kv_cache.h"
#include "rlhf/plan_check.h"
#include "rlhf/ppo_math.h"
#include "rlhf/trained_state.h"
#include "rlhf/value_model.h"

namespace strata::rlhf {

namespace fs = std::filesystem;
using nlohmann::json;

DpoTerm dpo_term(double pc, double pr, double rc, double rr, double beta, bool ipo) {
  DpoTerm t;
  t.h = (pc - rc) - (pr - rr);
  double dh;
  if (ipo) {
    const double e = t.h - 1.0 / (2.0 * beta);
    t.loss = e * e;
    dh = 2.0 * e;
  } else {
    const double x = beta * t.h;  // -log σ(x) = log(1 + e^{-x}), computed without overflow
    t.loss = x > 0 ? std::log1p(std::exp(-x)) : -x + std::log1p(std::exp(x));
    dh = -beta / (1.0 + std::exp(x));  // -β σ(-x)
  }
  t.dchosen = dh;
  t.drejected = -dh;
  return t;
}

void DpoConfig::validate() const {
  STRATA_CHECK(beta > 0 && std::isfinite(beta), "--beta must be > 0 (got ", beta, ")");
  STRATA_CHECK(steps >= 1, "--steps must be >= 1 (got ", steps, ")");
  STRATA_CHECK(batch >= 1, "--batch must be >= 1 (got ", batch, ")");
  STRATA_CHECK(lr > 0, "--lr must be > 0 (got ", lr, ")");
  STRATA_CHECK(eval_every >= 0, "--eval-every must be >= 0 (got ", eval_every, ")");
  STRATA_CHECK(eval_prompts >= 1, "--eval-prompts must be >= 1 (got ", eval_prompts, ")");
  STRATA_CHECK(sample.temperature >= 0, "--temperature must be >= 0 (got ", sample.temperature, ")");
  STRATA_CHECK(!resume || !run_dir.empty(), "--resume needs --run-dir");
  STRATA_CHECK(ckpt_every == 0 || !run_dir.empty(), "--ckpt-every needs --run-dir");
  STRATA_CHECK(zero >= 0 && zero <= 3, "--zero ", zero, ": ZeRO stage must be 0, 1, 2 or 3");
}

json DpoConfig::to_json() const {
  return {{"algo", ipo ? "ipo" : "dpo"}, {"beta", beta},       {"steps", steps},
          {"batch", batch},              {"lr", lr},           {"seed", seed},
          {"gold_seed", gold_seed},      {"eval_every", eval_every}, {"eval_prompts", eval_prompts},
          {"temperature", sample.temperature}, {"top_k", sample.top_k}, {"zero", zero}};
}

namespace {

// The sequences of pairs idx[0..b): chosen ones first, then the rejected, each P + R tokens.
void pair_tokens(const PairSet& s, const int64_t* idx, int b, int32_t* out) {
  const int P = s.P, R = s.R, T = P + R;
  for (int side = 0; side < 2; ++side)
    for (int i = 0; i < b; ++i) {
      int32_t* row = out + (int64_t(side) * b + i) * T;
      const int64_t p = idx[i];
      std::copy_n(&s.prompts[size_t(p * P)], P, row);
      std::copy_n(&(side == 0 ? s.chosen : s.rejected)[size_t(p * R)], R, row + P);
    }
}

// Sums over a pair set's minibatches, for a record.
struct PairStats {
  double loss = 0, right = 0, chosen = 0, rejected = 0;
  int64_t n = 0;
  void add(const DpoTerm& t, double beta, double dc, double dr) {
    loss += t.loss, right += t.h > 0, chosen += beta * dc, rejected += beta * dr, ++n;
  }
  void reduce(comm::ProcessGroup* g) {
    if (!g) return;
    double v[] = {loss, right, chosen, rejected, double(n)};
    g->all_reduce(v, 5);
    loss = v[0], right = v[1], chosen = v[2], rejected = v[3], n = int64_t(v[4]);
  }
  void into(json& rec, const std::string& prefix) const {
    const double d = double(std::max<int64_t>(n, 1));
    rec[prefix + "loss"] = loss / d;
    rec[prefix + "accuracy"] = right / d;
    rec[prefix + "chosen_reward"] = chosen / d;
    rec[prefix + "rejected_reward"] = rejected / d;
    rec[prefix + "margin"] = (chosen - rejected) / d;
  }
};

class DpoRun {
 public:
  DpoRun(const DpoConfig& cfg, const ModelFile& policy, const ModelFile& reference, const PairSet& train,
         const PairSet& eval, comm::ProcessGroup* group)
      : cfg_(cfg),
        train_(train),
        eval_(eval),
        solo_(group && group->size() > 1 ? nullptr : comm::make_thread_world(1)[0]),
        group_(group && group->size() > 1 ? group : nullptr),
        dp_(group_ ? *group_ : *solo_),
        rank_(group_ ? group_->rank() : 0),
        world_(group_ ? group_->size() : 1),
        pcfg_(policy.cfg),
        b_(cfg.batch / world_),
        policy_(recomputing(pcfg_, cfg.recompute), 2 * b_, /*allocate_state=*/false),
        reference_(pcfg_, 2 * b_, false),
        ref_params_(MemCategory::parameters, cfg.zero == 3 ? 0 : sizeof(float) * pcfg_.num_params()),
        decoder_(pcfg_, (cfg.eval_prompts + world_ - 1) / world_),
        gold_(cfg.gold_seed, pcfg_.vocab) {
    engine_ = make_trained_engine(policy_, dp_, cfg.zero, cfg.optim, policy.params);
    if (cfg.zero == 3) {
      ref_shards_ = std::make_unique<FrozenShards>(reference_, dp_, reference.params);
    } else {
      std::memcpy(ref_params_.data(), reference.params.data(), sizeof(float) * reference.params.size());
      bind_frozen(reference_, ref_params_.as<float>());
    }
    dlogits_.resize(size_t(2 * b_) * (train.P + train.R) * pcfg_.padded_vocab);
  }

  DpoResult run(const std::function<void(const json&)>& log);

 private:
  const float* logps(model::GPT& m, const PairSet& s, const int64_t* idx, int b, double* out);
  void for_pair_chunks(model::GPT& m, const PairSet& s,
                       const std::function<void(int64_t first, int b, const double* lp)>& each);
  DpoTerm pair_term(const double* pi, const std::vector<double>& ref, int64_t pair, PairStats& st) const;
  std::vector<double> reference_logps(const PairSet& s);
  void step(int64_t step, json& rec);
  void evaluate(json& rec);
  void sampled_metrics(json& rec);
  void batch_of(int64_t step, std::vector<int64_t>& idx) const;
  std::string path(const char* name) const { return (fs::path(cfg_.run_dir) / name).string(); }
  void save_state(int64_t step);
  int64_t load_state();
  json memory_report() const;

  const DpoConfig& cfg_;
  const PairSet &train_, &eval_;
  comm::GroupPtr solo_;
  comm::ProcessGroup* group_;
  comm::ProcessGroup& dp_;
  int rank_, world_;
  model::GPTConfig pcfg_;
  int b_;  // pairs per rank and step
  model::GPT policy_, reference_;
  Buffer ref_params_;
  KvDecoder decoder_;
  GoldRule gold_;
  std::unique_ptr<parallel::DataParallelEngine> engine_;
  std::unique_ptr<FrozenShards> ref_shards_;
  std::vector<double> ref_train_, ref_eval_;  // the reference's log-probs: chosen, rejected per pair
  std::vector<int32_t> tokens_;
  std::vector<float> dlogits_, lse_, logp_;
  std::vector<float> gen_params_;
};

// The log-probs of pairs idx[0..b) under m (sums over the response, means under IPO) into
// out[2i] (chosen) and out[2i + 1] (rejected). Returns the logits; they, tokens_ and the rows'
// lse_ stay for a backward.
const float* DpoRun::logps(model::GPT& m, const PairSet& s, const int64_t* idx, int b, double* out) {
  const int P = s.P, R = s.R, T = P + R, Vp = pcfg_.padded_vocab;
  tokens_.resize(size_t(2 * b) * T);
  pair_tokens(s, idx, b, tokens_.data());
  lse_.resize(size_t(2 * b) * R);
  logp_.resize(size_t(2 * b) * R);
  const float* z = m.logits(tokens_.data(), 2 * b, T);
  for (int q = 0; q < 2 * b; ++q) {
    float* logp = &logp_[size_t(q) * R];
    kernels::log_softmax_forward(&lse_[size_t(q) * R], logp, nullptr, z + (int64_t(q) * T + P - 1) * Vp,
                                 &tokens_[size_t(q) * T + P], R, pcfg_.vocab, Vp, 1.0f);
    double sum = 0;
    for (int t = 0; t < R; ++t) sum += logp[t];
    out[2 * (q % b) + q / b] = cfg_.ipo ? sum / R : sum;
  }
  return z;
}

// The log-probs of every pair of s under m, b_ pairs (2b_ sequences) a forward: rank r takes
// the chunks r, r + N, ... and gets each(first pair, pairs, log-probs as logps gives them).
// Every rank runs as many forwards (a ZeRO-3 model gathers its units in each): the ranks
// short of a chunk run a padding forward that `each` does not see.
void DpoRun::for_pair_chunks(model::GPT& m, const PairSet& s,
                             const std::function<void(int64_t first, int b, const double* lp)>& each) {
  const int64_t n = s.size(), chunks = (n + b_ - 1) / b_;
  std::vector<double> lp(size_t(2 * b_));
  std::vector<int64_t> idx(static_cast<size_t>(b_));
  for (int64_t c = rank_; c < (chunks + world_ - 1) / world_ * world_; c += world_) {
    for (int i = 0; i < b_; ++i) idx[size_t(i)] = std::min(c * b_ + i, n - 1);
    logps(m, s, idx.data(), b_, lp.data());
    if (c < chunks) each(c * b_, int(std::min<int64_t>(b_, n - c * b_)), lp.data());
  }
}

// The pair's DPO term from the policy's log-probs pi (chosen, rejected) and the reference's
// (ref[2·pair], ref[2·pair + 1]), added to st.
DpoTerm DpoRun::pair_term(const double* pi, const std::vector<double>& ref, int64_t pair, PairStats& st) const {
  const double rc = ref[size_t(2 * pair)], rr = ref[size_t(2 * pair + 1)];
  const DpoTerm t = dpo_term(pi[0], pi[1], rc, rr, cfg_.beta, cfg_.ipo);
  st.add(t, cfg_.beta, pi[0] - rc, pi[1] - rr);
  return t;
}

// Every pair's reference log-probs, computed once, summed over the ranks' chunks.
std::vector<double> DpoRun::reference_logps(const PairSet& s) {
  std::vector<double> out(size_t(2 * s.size()), 0.0);
  for_pair_chunks(reference_, s, [&](int64_t first, int b, const double* lp) {
    std::copy_n(lp, 2 * b, &out[size_t(2 * first)]);
  });
  if (group_) group_->all_reduce(out.data(), out.size());
  return out;
}

// The global pairs of `step` (0-based): batch `step % per_epoch` of its epoch's seeded order.
void DpoRun::batch_of(int64_t step, std::vector<int64_t>& idx) const {
  const int64_t n = train_.size(), per_epoch = n / cfg_.batch, epoch = step / per_epoch;
  std::vector<int64_t> order(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) order[size_t(i)] = i;
  Rng rng(cfg_.seed, 0xD90'0000'0000ULL + uint64_t(epoch));
  for (int64_t k = n - 1; k > 0; --k) std::swap(order[size_t(k)], order[rng.below(uint64_t(k + 1))]);
  const int64_t at = (step % per_epoch) * cfg_.batch + int64_t(rank_) * b_;
  idx.assign(order.begin() + at, order.begin() + at + b_);
}

void DpoRun::step(int64_t step, json& rec) {
  const int P = train_.P, R = train_.R, T = P + R, Vp = pcfg_.padded_vocab, V = pcfg_.vocab;
  std::vector<int64_t> idx;
  batch_of(step, idx);
  std::vector<double> pi(size_t(2 * b_));
  engine_->begin_step();
  engine_->begin_micro(0, 1);
  const float* z = logps(policy_, train_, idx.data(), b_, pi.data());
  std::fill(dlogits_.begin(), dlogits_.end(), 0.0f);
  PairStats st;
  std::vector<float> g(static_cast<size_t>(R));
  const double per_token = (cfg_.ipo ? 1.0 / R : 1.0) / double(cfg_.batch);  // a mean over the global batch
  for (int i = 0; i < b_; ++i) {
    const DpoTerm t = pair_term(&pi[size_t(2 * i)], ref_train_, idx[size_t(i)], st);
    for (int side = 0; side < 2; ++side) {
      const int q = side * b_ + i;
      const int64_t row = int64_t(q) * T + P - 1;
      std::fill(g.begin(), g.end(), float((side == 0 ? t.dchosen : t.drejected) * per_token));
      kernels::log_softmax_backward(dlogits_.data() + row * Vp, z + row * Vp, &lse_[size_t(q) * R], nullptr,
                                    &tokens_[size_t(q) * T + P], g.data(), 0.0f, R, V, Vp, 1.0f);
    }
  }
  policy_.backward_logits(dlogits_.data());
  engine_->end_backward();
  rec["grad_norm"] = engine_->step(cfg_.lr);
  st.reduce(group_);
  st.into(rec, "");
}

// Held-out pairs (loss, accuracy, margins) and the gold score of sampled responses.
void DpoRun::evaluate(json& rec) {
  PairStats st;
  for_pair_chunks(policy_, eval_, [&](int64_t first, int b, const double* lp) {
    for (int i = 0; i < b; ++i) pair_term(lp + 2 * i, ref_eval_, first + i, st);
  });
  st.reduce(group_);
  if (eval_.size() > 0) st.into(rec, "eval_");
  sampled_metrics(rec);
}

// On responses sampled from the policy to the held-out prompts (the same prompts and random
// streams at every evaluation; rank r answers prompts r, r + N, ...): the mean gold score,
// the KL of the policy from the reference per response (k1 and k3 summed over its tokens, as
// PPO reports them) and the policy's mean entropy per token, at the sampling temperature.
void DpoRun::sampled_metrics(json& rec) {
  const int P = train_.P, R = train_.R;
  std::vector<int32_t> prompts, resp;
  std::vector<uint64_t> streams;
  for (int i = rank_; i < cfg_.eval_prompts; i += world_) {
    prompts.resize(prompts.size() + size_t(P));
    synthetic_prompt(cfg_.seed ^ 0xE7A1'5EED, i, P, pcfg_.vocab, &prompts[prompts.size() - size_t(P)]);
    streams.push_back(uint64_t(i));
  }
  const int B = int(streams.size()), T = P + R, Vp = pcfg_.padded_vocab;
  double sums[4] = {0, 0, 0, 0};  // gold, k1, k3, entropy
  if (const float* p = engine_->full_params()) {
    decoder_.bind(p);
  } else {  // ZeRO-3: the policy gathered whole for the evaluation's generation, then freed
    gen_params_ = engine_->gather_full_params();
    decoder_.bind(gen_params_.data());
  }
  resp.resize(size_t(B) * R);
  if (B > 0) {
    generate_cached(decoder_, pcfg_, prompts.data(), B, P, R, cfg_.sample, cfg_.seed ^ 0xE7A1, streams.data(),
                    resp.data());
    for (int i = 0; i < B; ++i) sums[0] += gold_.score(&resp[size_t(i) * R], R);
  }
  std::vector<float>().swap(gen_params_);
  // Log-probabilities of the sampled responses under policy and reference, in forwards of
  // b_ sequences (as many on every rank: the ZeRO-3 models gather their units in each).
  const float tau = cfg_.sample.temperature > 0 ? cfg_.sample.temperature : 1.0f;
  const int per_rank = (cfg_.eval_prompts + world_ - 1) / world_;
  std::vector<int32_t> seqs(size_t(b_) * T);
  std::vector<float> lse(static_cast<size_t>(R)), lp(lse), ent(lse), lr(lse);
  for (int at = 0; at < per_rank; at += b_) {
    const int b = std::max(0, std::min(b_, B - at));
    std::fill(seqs.begin(), seqs.end(), 0);
    for (int i = 0; i < b; ++i) {
      std::copy_n(&prompts[size_t(at + i) * P], P, &seqs[size_t(i) * T]);
      std::copy_n(&resp[size_t(at + i) * R], R, &seqs[size_t(i) * T + P]);
    }
    const float* zp = policy_.logits(seqs.data(), b_, T);
    std::vector<float> pol(size_t(b_) * R), entropy(size_t(b_) * R);
    for (int i = 0; i < b; ++i) {
      kernels::log_softmax_forward(lse.data(), lp.data(), ent.data(), zp + (int64_t(i) * T + P - 1) * Vp,
                                   &seqs[size_t(i) * T + P], R, pcfg_.vocab, Vp, tau);
      std::copy(lp.begin(), lp.end(), &pol[size_t(i) * R]);
      std::copy(ent.begin(), ent.end(), &entropy[size_t(i) * R]);
    }
    const float* zr = reference_.logits(seqs.data(), b_, T);
    for (int i = 0; i < b; ++i) {
      kernels::log_softmax_forward(lse.data(), lr.data(), nullptr, zr + (int64_t(i) * T + P - 1) * Vp,
                                   &seqs[size_t(i) * T + P], R, pcfg_.vocab, Vp, tau);
      for (int t = 0; t < R; ++t) {
        sums[1] += kl_k1(pol[size_t(i) * R + t], lr[size_t(t)]);
        sums[2] += kl_k3(pol[size_t(i) * R + t], lr[size_t(t)]);
        sums[3] += entropy[size_t(i) * R + t];
      }
    }
  }
  if (group_) group_->all_reduce(sums, 4);
  rec["gold"] = sums[0] / cfg_.eval_prompts;
  rec["kl"] = sums[1] / cfg_.eval_prompts;
  rec["kl_k3"] = sums[2] / cfg_.eval_prompts;
  rec["entropy"] = sums[3] / (double(cfg_.eval_prompts) * R);
}

void DpoRun::save_state(int64_t step) {
  FullState st(*engine_, dp_, policy_.num_params(), "policy.params");
  st.gather();
  if (rank_ != 0) return;
  save_tensors(path("dpo-state.safetensors"), st.tensors(),
               {{"step", step}, {"algo", "dpo"}, {"policy_steps", engine_->step_count()},
                {"config", cfg_.to_json()}, {"policy", config_json(pcfg_)}});
}

int64_t DpoRun::load_state() {
  if (!cfg_.resume) return 0;
  const std::string f = path("dpo-state.safetensors");
  STRATA_CHECK(fs::exists(f), "--resume: ", f, " does not exist (no checkpoint saved yet)");
  FullState st(*engine_, dp_, policy_.num_params(), "policy.params");
  const json meta = load_tensors(f, st.tensors());
  STRATA_CHECK(meta.at("policy") == config_json(pcfg_), "--resume: ", f, " was written for another policy (",
               meta.at("policy").dump(), ")");
  st.scatter(meta.at("policy_steps").get<int64_t>());
  return meta.at("step").get<int64_t>();
}

json DpoRun::memory_report() const {
  const parallel::MemoryReport a = engine_->memory_report();
  json out = {{"actor", {{"parameters", a.parameters}, {"gradients", a.gradients}, {"optimizer", a.optimizer},
                         {"activations", policy_.activation_bytes() + int64_t(sizeof(float) * dlogits_.size())},
                         {"comm", a.comm}, {"generation_gather", engine_->full_params() ? 0 : 4 * policy_.num_params()}}},
              {"reference", frozen_memory(ref_shards_.get(), 4 * policy_.num_params(), 0, reference_.activation_bytes())},
              {"zero", cfg_.zero},
              {"tracker", memory_tracker().to_json()}};
  add_model_states_total(out);
  return out;
}

DpoResult DpoRun::run(const std::function<void(const json&)>& log) {
  DpoResult res;
  const int64_t start = load_state();
  const bool writer = rank_ == 0;
  LineLog metrics = writer && !cfg_.run_dir.empty() ? open_run_log(cfg_.run_dir, "step", start, "DPO log") : LineLog();
  auto emit = [&](const json& rec) {
    if (metrics.is_open()) metrics.write_line(rec.dump());
    if (log && writer) log(rec);
    res.records.push_back(rec);
  };
  const Stopwatch ref_sw;
  ref_train_ = reference_logps(train_);
  ref_eval_ = reference_logps(eval_);
  const double ref_s = ref_sw.seconds();
  double train_s = 0, eval_s = 0;
  json first_eval;
  auto eval_record = [&](int64_t done) {
    json rec = {{"step", done}, {"eval", true}};
    const Stopwatch sw;
    evaluate(rec);
    eval_s += sw.seconds();
    if (first_eval.is_null()) first_eval = rec;
    emit(rec);
    return rec;
  };
  json last_eval = start == 0 ? eval_record(0) : json();
  for (int64_t s = start; s < cfg_.steps; ++s) {
    json rec = {{"step", s + 1}};
    const Stopwatch sw;
    step(s, rec);
    const double dt = sw.seconds();
    train_s += dt;
    rec["time_s"] = dt;
    emit(rec);
    const bool last = s + 1 == cfg_.steps;
    if (last || (cfg_.eval_every > 0 && (s + 1) % cfg_.eval_every == 0)) last_eval = eval_record(s + 1);
    if (cfg_.ckpt_every > 0 && ((s + 1) % cfg_.ckpt_every == 0 || last)) save_state(s + 1);
    if (group_) group_->barrier();
  }
  if (last_eval.is_null()) last_eval = eval_record(cfg_.steps);  // resumed at the end
  const double total = ref_s + train_s;
  res.summary = {{"steps", cfg_.steps},
                 {"resumed_from", start},
                 {"config", cfg_.to_json()},
                 {"algo", cfg_.ipo ? "ipo" : "dpo"},
                 {"actor", config_json(pcfg_)},
                 {"pairs", {{"train", train_.size()}, {"eval", eval_.size()}}},
                 {"time", {{"generate_s", 0.0}, {"score_s", ref_s}, {"train_s", train_s}, {"eval_s", eval_s}}},
                 {"share", total > 0 ? json{{"generate", 0.0}, {"score", ref_s / total}, {"train", train_s / total}}
                                     : json(nullptr)},
                 {"first_eval", first_eval},
                 {"last_eval", last_eval},
                 {"ranks", world_},
                 {"memory", memory_report()}};
  compare_with_plan(res.summary["memory"], plan::RlAlgo::dpo, pcfg_, pcfg_, /*rollout_per_rank=*/1, 2 * b_, world_,
                    cfg_.zero);  // DPO generates nothing: no KV cache whatever the rollout
  const std::vector<float> w = engine_->gather_full_params();  // a collective
  if (writer && !cfg_.run_dir.empty()) {
    save_model(path("policy.safetensors"), pcfg_, w.data(), {}, {{"role", "actor"}});
    ckpt::atomic_write_file(path("summary.json"), res.summary.dump(2) + "\n");
  }
  return res;
}

}  // namespace

DpoResult run_dpo(const DpoConfig& cfg, const ModelFile& policy, const ModelFile& reference, const PairSet& train,
                  const PairSet& eval, const std::function<void(const json&)>& log, comm::ProcessGroup* group) {
  cfg.validate();
  const int world = group ? group->size() : 1;
  STRATA_CHECK(cfg.batch % world == 0, "--batch ", cfg.batch, " must divide over ", world, " ranks");
  STRATA_CHECK(train.size() >= cfg.batch, "--pairs: ", train.size(), " training pairs, fewer than --batch ",
               cfg.batch);
  STRATA_CHECK(train.P + train.R <= policy.cfg.seq, "--pairs: ", train.P, " + ", train.R,
               " tokens per sequence, beyond the policy's context (", policy.cfg.seq, ")");
  STRATA_CHECK(same_shape(reference.cfg, policy.cfg), "--reference (", describe(reference.cfg),
               ") does not match --policy (", describe(policy.cfg), ")");
  DpoRun run(cfg, policy, reference, train, eval, group);
  return run.run(log);
}

}  // namespace strata::rlhf
