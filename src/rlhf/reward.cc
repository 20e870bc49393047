// Bradley-Terry reward model training (reward.h).
#include "rlhf/reward.h"

#include <algorithm>
#include <cmath>

#include "comm/process_group.h"
#include "core/error.h"
#include "core/rng.h"
#include "rlhf/optim.h"
#include "rlhf/trained_state.h"

namespace strata::rlhf {

using nlohmann::json;

// tokens (n, P + R) of rows (prompt | response).
static void join(const int32_t* prompts, const int32_t* responses, int64_t n, int P, int R,
                 int32_t* out) {
  for (int64_t i = 0; i < n; ++i) {
    std::copy(prompts + i * P, prompts + (i + 1) * P, out + i * (P + R));
    std::copy(responses + i * R, responses + (i + 1) * R, out + i * (P + R) + P);
  }
}

std::vector<double> score_sequences(ValueModel& rm, const int32_t* prompts, const int32_t* responses,
                                    int64_t n, int P, int R) {
  const int T = P + R, mb = rm.gpt().max_batch();
  std::vector<double> out(static_cast<size_t>(n));
  std::vector<int32_t> tokens(size_t(mb) * T);
  std::vector<float> v(size_t(mb) * T);
  for (int64_t at = 0; at < n; at += mb) {
    const int b = int(std::min<int64_t>(mb, n - at));
    join(prompts + at * P, responses + at * R, b, P, R, tokens.data());
    rm.forward(tokens.data(), b, T, v.data());
    for (int i = 0; i < b; ++i) out[size_t(at + i)] = v[size_t(i) * T + T - 1];
  }
  return out;
}

double pair_accuracy(ValueModel& rm, const PairSet& pairs) {
  const int64_t n = pairs.size();
  if (n == 0) return 0;
  const auto c = score_sequences(rm, pairs.prompts.data(), pairs.chosen.data(), n, pairs.P, pairs.R);
  const auto r = score_sequences(rm, pairs.prompts.data(), pairs.rejected.data(), n, pairs.P, pairs.R);
  int64_t right = 0;
  for (int64_t i = 0; i < n; ++i) right += c[size_t(i)] > r[size_t(i)];
  return double(right) / double(n);
}

RewardResult train_reward(ValueModel& rm, const std::vector<float>& params, const PairSet& train,
                          const PairSet& eval, const RewardConfig& cfg,
                          const std::function<void(const json&)>& log) {
  const int P = train.P, R = train.R, T = P + R;
  const int64_t n = train.size();
  STRATA_CHECK(n > 0, "reward model: no training pairs");
  STRATA_CHECK(2 * cfg.batch <= rm.gpt().max_batch(), "reward model: batch ", cfg.batch,
               " pairs needs ", 2 * cfg.batch, " sequences, the model holds ", rm.gpt().max_batch());
  STRATA_CHECK(T <= rm.config().seq, "--prompt-len + --response-len = ", T,
               " is beyond the reward model's context of ", rm.config().seq);
  STRATA_CHECK(rm.gpt().params() == nullptr,
               "reward model: build the value model with allocate_state = false (the engine owns "
               "the trunk)");
  const comm::GroupPtr solo = comm::make_thread_world(1).front();
  const auto engine = make_trained_engine(rm.gpt(), *solo, /*stage=*/0, cfg.optim, params);
  AdamWGroup head(cfg.optim);
  head.add("head", rm.head().data(), rm.head_grad(), rm.config().dim + 1, {});
  std::vector<int64_t> order(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) order[size_t(i)] = i;
  Rng rng(cfg.seed, 0xBEEF);
  int64_t cursor = n;
  const int B = int(std::min<int64_t>(cfg.batch, n));
  std::vector<int32_t> tokens(size_t(2 * B) * T);
  std::vector<float> v(size_t(2 * B) * T), dv(size_t(2 * B) * T);
  RewardResult res;
  res.eval_accuracy_before = eval.size() ? pair_accuracy(rm, eval) : 0.0;
  for (int step = 0; step < cfg.steps; ++step) {
    for (int i = 0; i < B; ++i) {
      if (cursor == n) {  // a new epoch: Fisher-Yates with the run's stream
        for (int64_t k = n - 1; k > 0; --k) std::swap(order[size_t(k)], order[rng.below(uint64_t(k + 1))]);
        cursor = 0;
      }
      const int64_t p = order[size_t(cursor++)];
      join(&train.prompts[size_t(p * P)], &train.chosen[size_t(p * R)], 1, P, R, &tokens[size_t(i) * T]);
      join(&train.prompts[size_t(p * P)], &train.rejected[size_t(p * R)], 1, P, R,
           &tokens[size_t(B + i) * T]);
    }
    engine->begin_step();
    engine->begin_micro(0, 1);
    rm.zero_head_grad();
    rm.forward(tokens.data(), 2 * B, T, v.data());
    std::fill(dv.begin(), dv.end(), 0.0f);
    double loss = 0;
    for (int i = 0; i < B; ++i) {
      const double d = double(v[size_t(i) * T + T - 1]) - v[size_t(B + i) * T + T - 1];
      loss += std::log1p(std::exp(-std::abs(d))) + std::max(-d, 0.0);  // -log σ(d), stably
      const double sig = 1.0 / (1.0 + std::exp(-d));
      dv[size_t(i) * T + T - 1] = float((sig - 1.0) / B);
      dv[size_t(B + i) * T + T - 1] = float((1.0 - sig) / B);
    }
    rm.backward(dv.data());
    engine->end_backward();
    float clip = 1;
    const float norm = engine->step(cfg.lr, head.sum_squares(), &clip);
    head.apply(cfg.lr, clip);
    res.losses.push_back(loss / B);
    if (log) log({{"step", step + 1}, {"loss", loss / B}, {"grad_norm", norm}});
  }
  res.train_accuracy = pair_accuracy(rm, train);
  res.eval_accuracy = eval.size() ? pair_accuracy(rm, eval) : 0.0;
  FullState trunk(*engine, *solo, rm.gpt().num_params(), "trunk");
  trunk.gather();
  const NamedTensor& p = trunk.tensors()[0];  // "trunk.params"
  res.params.assign(p.data, p.data + p.n);
  return res;
}

PairSet synthetic_pairs(KvDecoder& dec, const model::GPTConfig& cfg, const GoldRule& gold, int64_t n,
                        int P, int R, const SampleConfig& s, uint64_t seed) {
  PairSet out;
  out.P = P;
  out.R = R;
  const int half = dec.max_batch() / 2;  // prompts per round, each generated twice
  STRATA_CHECK(half >= 1, "synthetic pairs need a decoder batch of at least 2");
  std::vector<int32_t> prompts(size_t(2 * half) * P), resp(size_t(2 * half) * R);
  std::vector<uint64_t> streams(size_t(2 * half));
  // A prompt yields a pair only when its two responses differ in gold score; near-greedy
  // sampling (a tiny temperature) makes them alike, so the yield, not the loop, would go to
  // zero. Below one pair per kMinYield prompts (judged after kJudgeAfter) the set would take
  // over kMinYield·n prompts: stop instead. At most max(kJudgeAfter, kMinYield·n) + 2·half.
  constexpr int64_t kMinYield = 16, kJudgeAfter = 256;
  for (int64_t first = 0; out.size() < n; first += half) {
    if (first >= kJudgeAfter && out.size() * kMinYield < first)
      fail("synthetic pairs: ", out.size(), " of ", n, " after ", first, " prompts: the two responses to ",
           first - out.size(), " of them tied on the gold rule (sampling at --temperature ", s.temperature,
           " makes them alike); raise --temperature or give --pairs FILE");
    for (int i = 0; i < 2 * half; ++i) {
      synthetic_prompt(seed, first + i % half, P, cfg.vocab, &prompts[size_t(i) * P]);
      streams[size_t(i)] = (uint64_t(first + i % half) << 1) | uint64_t(i / half);
    }
    generate_cached(dec, cfg, prompts.data(), 2 * half, P, R, s, seed ^ 0x5A1D, streams.data(),
                    resp.data());
    for (int i = 0; i < half && out.size() < n; ++i) {
      const int32_t* a = &resp[size_t(i) * R];
      const int32_t* b = &resp[size_t(half + i) * R];
      const double ga = gold.score(a, R), gb = gold.score(b, R);
      if (ga == gb) continue;  // a tie says nothing about the preference
      out.prompts.insert(out.prompts.end(), prompts.begin() + i * P, prompts.begin() + (i + 1) * P);
      const int32_t* c = ga > gb ? a : b;
      const int32_t* r = ga > gb ? b : a;
      out.chosen.insert(out.chosen.end(), c, c + R);
      out.rejected.insert(out.rejected.end(), r, r + R);
    }
  }
  return out;
}

}  // namespace strata::rlhf
