// `strata data plan`: the sampler's assignment of samples to steps, ranks and micro-batches,
// computed by the same planner the Loader (and so `strata train`) uses.
// `strata data info`: what a data spec holds (tokens, samples, vocabulary, entropy floor).
#include <cstdio>
#include <iostream>

#include "cli/command.h"
#include "core/error.h"
#include "data/dataset.h"
#include "data/sampler.h"
#include "nlohmann/json.hpp"

namespace strata::cli {
namespace {

struct PlanArgs {
  int64_t samples = -1;
  int world = 1, micro_batch = 1, accum = 1, rank = -1;
  uint64_t seed = 0;
  int64_t epoch = 0, resume_from = 0, max_steps = -1;
  std::string policy = "drop";
  bool json = false;
};

const char* policy_name(data::TailPolicy p) {
  return p == data::TailPolicy::drop ? "drop" : p == data::TailPolicy::pad ? "pad" : "uneven";
}

nlohmann::json step_json(int64_t index, const data::StepPlan& sp) {
  nlohmann::json ranks = nlohmann::json::array();
  for (const data::RankPlan& rp : sp.ranks) {
    nlohmann::json micro = nlohmann::json::array();
    for (const auto& slots : rp.micro) {
      nlohmann::json ids = nlohmann::json::array(), pads = nlohmann::json::array();
      for (const data::Slot& s : slots) {
        ids.push_back(s.sample);
        pads.push_back(s.pad);
      }
      micro.push_back({{"samples", ids}, {"pad", pads}});
    }
    ranks.push_back({{"rank", rp.rank}, {"real", rp.real_samples()}, {"micro", micro}});
  }
  return {{"step", index},       {"epoch", sp.before.epoch}, {"consumed", sp.before.consumed},
          {"real", sp.real_samples}, {"pad", sp.pad_samples},  {"ranks", ranks}};
}

void print_table_step(int64_t index, const data::StepPlan& sp) {
  for (const data::RankPlan& rp : sp.ranks)
    for (size_t m = 0; m < rp.micro.size(); ++m) {
      std::string ids;
      for (const data::Slot& s : rp.micro[m]) ids += cat(" ", s.sample, s.pad ? "*" : "");
      std::printf("%6lld %6lld %6d %6zu  %s\n", (long long)index, (long long)sp.before.consumed,
                  rp.rank, m, ids.empty() ? " -" : ids.c_str());
    }
}

void run_plan(const PlanArgs& a) {
  STRATA_CHECK(a.world > 0, "--world must be positive (got ", a.world, ")");
  STRATA_CHECK(a.micro_batch > 0, "--micro-batch must be positive (got ", a.micro_batch, ")");
  STRATA_CHECK(a.accum > 0, "--accum must be positive (got ", a.accum, ")");
  // The epoch order is a permutation over at most 2^62 positions (data/sampler.h).
  STRATA_CHECK(a.samples <= (int64_t(1) << 62), "--samples must be at most 2^62 (got ", a.samples,
               ")");
  int64_t g = 0;
  STRATA_CHECK(!__builtin_mul_overflow(int64_t(a.micro_batch) * a.accum, int64_t(a.world), &g) &&
                   g <= data::kMaxPlanSlots,
               "--micro-batch ", a.micro_batch, " x --accum ", a.accum, " x --world ", a.world,
               " is a global batch too large to plan (limit ", data::kMaxPlanSlots,
               " samples per step)");
  data::SamplerConfig cfg;
  cfg.micro_batch = a.micro_batch;
  cfg.accum = a.accum;
  cfg.world = a.world;
  cfg.seed = a.seed;
  cfg.policy = data::parse_tail_policy(a.policy);
  data::Sampler sampler(a.samples, cfg);
  STRATA_CHECK(a.rank >= -1 && a.rank < a.world, "--rank ", a.rank, " outside world of ",
               a.world);
  STRATA_CHECK(a.epoch >= 0, "--epoch must be >= 0 (got ", a.epoch, ")");
  STRATA_CHECK(a.resume_from >= 0 && a.resume_from <= a.samples, "--resume-from ", a.resume_from,
               " outside [0, ", a.samples, "] samples of the epoch");
  const int64_t steps = sampler.steps_in_epoch(a.resume_from);
  STRATA_CHECK(steps > 0 || a.samples == a.resume_from, "global batch of ",
               sampler.global_batch(), " samples (micro-batch ", a.micro_batch, " x accum ",
               a.accum, " x world ", a.world, ") cannot be formed from ",
               a.samples - a.resume_from, " samples under the drop policy");
  const int64_t shown = a.max_steps >= 0 ? std::min(a.max_steps, steps) : steps;
  data::LoaderState at{a.epoch, a.resume_from};
  nlohmann::json out = {{"samples", a.samples},
                        {"world", a.world},
                        {"micro_batch", a.micro_batch},
                        {"accum", a.accum},
                        {"global_batch", sampler.global_batch()},
                        {"seed", a.seed},
                        {"epoch", a.epoch},
                        {"policy", policy_name(cfg.policy)},
                        {"resume_from", a.resume_from},
                        {"steps_in_epoch", steps},
                        {"dropped", sampler.dropped_in_epoch(a.resume_from)},
                        {"padded", sampler.padded_in_epoch(a.resume_from)},
                        {"steps", nlohmann::json::array()}};
  if (!a.json) {
    std::printf("data plan: %lld samples, global batch %lld = micro-batch %d x accum %d x world "
                "%d, policy %s, seed %llu, epoch %lld, from sample %lld\n",
                (long long)a.samples, (long long)sampler.global_batch(), a.micro_batch, a.accum,
                a.world, policy_name(cfg.policy), (unsigned long long)a.seed, (long long)a.epoch,
                (long long)a.resume_from);
    std::printf("%lld steps; %lld samples dropped, %lld padding (marked *)\n", (long long)steps,
                (long long)sampler.dropped_in_epoch(a.resume_from),
                (long long)sampler.padded_in_epoch(a.resume_from));
    std::printf("%6s %6s %6s %6s  %s\n", "step", "from", "rank", "micro", "samples");
  }
  for (int64_t k = 0; k < shown; ++k) {
    data::StepPlan sp = sampler.plan(at, a.rank);
    if (a.json)
      out["steps"].push_back(step_json(k, sp));
    else
      print_table_step(k, sp);
    at = sp.after;
  }
  if (a.json) std::cout << out.dump() << "\n";
}

struct InfoArgs {
  std::string data = "synthetic";
  int64_t seq = 256, stride = 0;
  uint64_t seed = 0;
  double val_fraction = 0.05;
  int vocab = 0;
  bool json = false;
};

void run_info(const InfoArgs& a) {
  constexpr int64_t kMax = int64_t(1) << 31;
  STRATA_CHECK(a.seq > 0 && a.seq <= kMax, "--seq must be in [1, 2^31] (got ", a.seq, ")");
  STRATA_CHECK(a.stride >= 0 && a.stride <= kMax, "--stride must be in [0, 2^31] (got ", a.stride,
               "; 0 = --seq)");
  STRATA_CHECK(a.val_fraction >= 0 && a.val_fraction < 1, "--val-fraction must be in [0, 1) (got ",
               a.val_fraction, ")");
  STRATA_CHECK(a.vocab >= 0, "--vocab must be >= 0 (got ", a.vocab, "; 0 = the format's own)");
  data::Split split = data::open_split(a.data, a.seed, a.val_fraction, a.vocab);
  const int64_t stride = a.stride > 0 ? a.stride : a.seq;
  nlohmann::json out;
  for (auto [name, src] : {std::pair{"train", split.train.get()}, {"val", split.val.get()}}) {
    out[name] = {{"describe", src->describe()},
                 {"tokens", src->size()},
                 {"vocab", src->vocab()},
                 {"samples", data::num_windows(src->size(), a.seq, stride)}};
    if (src->entropy_floor() >= 0) out[name]["entropy_floor"] = src->entropy_floor();
  }
  if (a.json) {
    std::cout << out.dump() << "\n";
    return;
  }
  for (const char* name : {"train", "val"}) {
    const auto& o = out[name];
    std::printf("%-5s %s\n      %lld tokens, vocab %d, %lld samples of %lld tokens at stride %lld",
                name, o["describe"].get<std::string>().c_str(), (long long)o["tokens"],
                int(o["vocab"]), (long long)o["samples"], (long long)(a.seq + 1),
                (long long)stride);
    if (o.contains("entropy_floor"))
      std::printf(", entropy floor %.6f nats/token", o["entropy_floor"].get<double>());
    std::printf("\n");
  }
}

Register plan_reg("data plan", "Show which samples every rank uses at every step", [](CLI::App& app) {
  auto a = std::make_shared<PlanArgs>();
  // Counts below 2^63 (9.2e18): past it the int64 the flag lands in wraps.
  app.add_option("--samples", a->samples, "Samples in the data (N)")->required()
      ->check(number_in(0, 9.2e18));
  app.add_option("--world", a->world, "Data-parallel ranks (W)")->capture_default_str();
  app.add_option("--micro-batch", a->micro_batch, "Samples per rank per micro-step (b)")
      ->capture_default_str();
  app.add_option("--accum", a->accum, "Micro-steps per optimizer step (A)")->capture_default_str();
  app.add_option("--seed", a->seed, "Shuffle seed")
      ->capture_default_str()
      ->check(non_negative_integer());
  app.add_option("--epoch", a->epoch, "Epoch")->capture_default_str();
  app.add_option("--policy", a->policy, "Last-batch policy: drop, pad or uneven")
      ->capture_default_str();
  app.add_option("--rank", a->rank, "Show only this rank (default: all)");
  app.add_option("--resume-from", a->resume_from,
                 "Start from this many samples already consumed (globally) in the epoch")
      ->capture_default_str();
  app.add_option("--steps", a->max_steps, "Show at most this many steps (default: the epoch)")
      ->check(number_in(0, 9.2e18));
  app.add_flag("--json", a->json, "Print one JSON object");
  app.callback([a] { run_plan(*a); });
});

Register info_reg("data info", "Describe a data spec: tokens, samples, vocabulary, entropy floor",
                  [](CLI::App& app) {
  auto a = std::make_shared<InfoArgs>();
  app.add_option("--data", a->data, "synthetic[:TOKENS] | FILE.txt | FILE.bin | DIR | GLOB")
      ->check(plain_path(true))
      ->capture_default_str();
  app.add_option("--seq", a->seq, "Sequence length T (samples are T+1 tokens)")
      ->capture_default_str();
  app.add_option("--stride", a->stride, "Tokens between samples (0 = seq)")->capture_default_str();
  app.add_option("--seed", a->seed, "Seed (the synthetic corpus depends on it)")
      ->capture_default_str()
      ->check(non_negative_integer());
  app.add_option("--val-fraction", a->val_fraction, "Held-out fraction of files")
      ->capture_default_str();
  app.add_option("--vocab", a->vocab, "Check tokens against this vocabulary (0 = format's own)")
      ->capture_default_str();
  app.add_flag("--json", a->json, "Print one JSON object");
  app.callback([a] { run_info(*a); });
});

}  // namespace
}  // namespace strata::cli
