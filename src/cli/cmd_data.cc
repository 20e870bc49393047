// `strata data plan`: the sampler's assignment of samples to steps, ranks and micro-batches,
// computed by the same planner the Loader (and so `strata train`) uses.
// `strata data info`: what a data spec holds (tokens, samples, vocabulary, entropy floor); on a
// prepared directory also its manifest, token statistics and a check of every shard.
// `strata data prepare`: a corpus and a tokenizer into prepared shards (data/prepare.h).
// `strata data tokenizer-train`: a byte-level BPE vocabulary trained on a corpus
// (data/tokenizer/bpe_train.h), written as Hugging Face's vocab.json + merges.txt.
//
//   strata data prepare corpus.txt --tokenizer gpt2-bpe/ --doc-split blank-line
//       --val-tokens 32768 -o data/shakespeare       (llm.c's Tiny Shakespeare recipe)
//   strata data prepare docs.jsonl --text-field text --tokenizer tokenizer.model -o data/d
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <iostream>

#include "cli/command.h"
#include "core/error.h"
#include "data/dataset.h"
#include "data/prepare.h"
#include "data/prepared.h"
#include "data/sampler.h"
#include "data/tokenizer/bpe_train.h"
#include "nlohmann/json.hpp"

namespace strata::cli {
namespace {

struct DataPlanArgs {
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

void run_plan(const DataPlanArgs& a) {
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
  nlohmann::json out;
  data::PreparedStats stats;
  if (data::is_prepared(a.data)) {
    // Every shard hashed and counted against the manifest before anything else is said.
    out["manifest"] = data::read_manifest(a.data);
    data::verify_prepared(a.data, out["manifest"], /*deep=*/true, &stats);
    out["stats"] = {{"tokens", stats.tokens},          {"documents", stats.documents},
                    {"distinct_tokens", stats.distinct_tokens}, {"doc_tokens_min", stats.doc_min},
                    {"doc_tokens_median", stats.doc_median},   {"doc_tokens_mean", stats.doc_mean},
                    {"doc_tokens_max", stats.doc_max}};
  }
  data::Split split = data::open_split(a.data, a.seed, a.val_fraction, a.vocab);
  const int64_t stride = a.stride > 0 ? a.stride : a.seq;
  for (auto [name, src] : {std::pair{"train", split.train.get()}, {"val", split.val.get()}}) {
    out[name] = {{"describe", src->describe()},
                 {"tokens", src->size()},
                 {"vocab", src->vocab()},
                 {"samples", src->num_samples(a.seq, stride)}};
    if (src->entropy_floor() >= 0) out[name]["entropy_floor"] = src->entropy_floor();
  }
  if (a.json) {
    std::cout << out.dump() << "\n";
    return;
  }
  if (out.contains("manifest")) {
    const auto& m = out["manifest"];
    const auto& t = m["tokenizer"];
    std::printf("prepared %s: %lld documents, %lld tokens from %lld bytes of %s (doc split %s, %d-bit tokens)\n",
                a.data.c_str(), (long long)stats.documents, (long long)stats.tokens,
                (long long)m.value("bytes", int64_t(0)), m.value("inputs", nlohmann::json::array()).dump().c_str(),
                m.value("doc_split", "?").c_str(), 8 * data::manifest_token_bytes(m));
    std::printf("tokenizer %s (%s, xxh64 %s): vocab %lld, document token %d; %lld distinct tokens used\n",
                t.value("source", "?").c_str(), t.value("kind", "?").c_str(), t.value("xxh64", "?").c_str(),
                (long long)t["vocab"].get<int64_t>(), t["document_token"].get<int>(), (long long)stats.distinct_tokens);
    std::printf("tokens per document: min %lld, median %.1f, mean %.1f, max %lld\n", (long long)stats.doc_min,
                stats.doc_median, stats.doc_mean, (long long)stats.doc_max);
    for (const auto& sh : m["shards"])
      std::printf("  %-18s %-5s %12lld tokens %9lld documents  xxh64 %s  ok\n", sh["file"].get<std::string>().c_str(),
                  sh["split"].get<std::string>().c_str(), (long long)sh["tokens"].get<int64_t>(),
                  (long long)sh["documents"].get<int64_t>(), sh.value("xxh64", "").c_str());
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

// The live progress line: redrawn in place on a terminal, a line every 10 s otherwise.
class PrepareLine {
 public:
  void operator()(const data::PrepareProgress& p) {
    const auto now = std::chrono::steady_clock::now();
    if (!p.last && now - drawn_ < (tty_ ? std::chrono::milliseconds(100) : std::chrono::seconds(10))) return;
    drawn_ = now;
    const double mb = double(p.bytes_done) / 1e6, total = double(p.bytes_total) / 1e6;
    const double rate = p.seconds > 0 ? mb / p.seconds : 0;
    const double eta = rate > 0 ? (total - mb) / rate : 0;
    std::fprintf(stderr, "%sdata prepare | %.1f/%.1f MB | %lld documents | %.3f M tokens | %.2f MB/s | %s%s",
                 tty_ ? "\r\033[K" : "", mb, total, (long long)p.documents, double(p.tokens) / 1e6, rate,
                 p.last ? cat("done in ", fmt_seconds(p.seconds, 3)).c_str() : cat("ETA ", fmt_seconds(eta, 1)).c_str(),
                 tty_ && !p.last ? "" : "\n");
  }

 private:
  static std::string fmt_seconds(double s, int digits) {
    char b[32];
    std::snprintf(b, sizeof b, "%.*f s", s < 100 ? digits : 0, s);
    return b;
  }
  bool tty_ = isatty(2);
  std::chrono::steady_clock::time_point drawn_ = std::chrono::steady_clock::now();
};

void run_prepare(data::PrepareOptions o, const std::string& doc_split, bool json) {
  o.doc_split = data::parse_doc_split(doc_split);
  o.progress = PrepareLine();
  const nlohmann::json m = data::prepare(o);
  if (json) {
    std::cout << m.dump() << "\n";
    return;
  }
  int64_t val = 0;
  for (const auto& s : m["shards"])
    if (s["split"] == "val") val += s["tokens"].get<int64_t>();
  // GPT-2-sized vocabularies print as they always have; uint32 shards say so.
  std::printf("prepared %s: %lld documents, %lld tokens (train %lld, val %lld) in %zu shard(s); "
              "tokenizer %s, vocab %lld%s\n",
              o.out.c_str(), (long long)m["documents"].get<int64_t>(), (long long)m["tokens"].get<int64_t>(),
              (long long)(m["tokens"].get<int64_t>() - val), (long long)val, m["shards"].size(),
              m["tokenizer"]["kind"].get<std::string>().c_str(), (long long)m["tokenizer"]["vocab"].get<int64_t>(),
              data::manifest_token_bytes(m) == 4 ? " (32-bit tokens: llm.c's version 7)" : "");
}

Register prepare_reg("data prepare", "Tokenize text, folders or JSONL into prepared shards for --data",
                     [](CLI::App& app) {
  auto o = std::make_shared<data::PrepareOptions>();
  auto doc_split = std::make_shared<std::string>("file");
  auto json = std::make_shared<bool>(false);
  app.add_option("inputs", o->inputs, "Text files, directories (recursively) or .jsonl files")
      ->required()
      ->check(plain_path(true));
  app.add_option("--tokenizer", o->tokenizer,
                 "tokenizer.json, a directory with vocab.json + merges.txt, or a SentencePiece .model")
      ->required()
      ->check(plain_path(true));
  app.add_option("-o,--out", o->out, "Output directory (must not exist)")->required();
  app.add_option("--text-field", o->text_field, "The text field of JSONL lines")->capture_default_str();
  app.add_option("--doc-split", *doc_split, "Documents of a text file: file, blank-line or line")
      ->capture_default_str();
  app.add_option("--val-tokens", o->val_tokens, "The first N tokens form the validation split")
      ->check(number_in(0, 9.2e18));
  app.add_option("--val-docs", o->val_docs, "The first N documents form the validation split")
      ->check(number_in(0, 9.2e18));
  app.add_option("--shard-tokens", o->shard_tokens, "Tokens per shard")
      ->capture_default_str()
      ->check(number_in(1, 2147483647));
  app.add_option("--threads", o->threads, "Encoding threads (0: every core)")
      ->capture_default_str()
      ->check(number_in(0, 1024));
  app.add_flag("--json", *json, "Print the manifest as one JSON object");
  app.callback([o, doc_split, json] { run_prepare(*o, *doc_split, *json); });
});

struct TokenizerTrainArgs {
  std::vector<std::string> inputs;
  std::string out, text_field = "text", doc_split = "file";
  data::BpeTrainOptions train;
};

void run_tokenizer_train(const TokenizerTrainArgs& a) {
  data::require_new_output_dir(a.out);
  data::check_options(a.train);  // before the corpus is read
  const data::DocSplit split = data::parse_doc_split(a.doc_split);
  const auto t0 = std::chrono::steady_clock::now();
  data::WordCounts counts;
  int64_t bytes = 0, docs = 0;
  for (const std::string& f : data::corpus_files(a.inputs)) {
    const std::string text = read_regular_file(f, "input");
    std::vector<std::string> parts;
    data::split_documents(f, text, a.text_field, split, parts);
    for (const std::string& d : parts) data::count_words(d, counts);
    bytes += int64_t(text.size());
    docs += int64_t(parts.size());
  }
  STRATA_CHECK(bytes > 0, "tokenizer-train: the corpus holds no text");
  const data::BpeVocabulary v = data::train_bpe(counts, a.train);
  // Written beside the output and renamed into place: no half-written tokenizer.
  const std::string tmp = data::stage_output_dir(a.out);
  data::write_bpe_files(v, tmp);
  data::commit_output_dir(tmp, a.out);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("tokenizer-train: %zu tokens (256 bytes + %zu merges + %zu special) from %lld bytes, %lld "
              "documents, %zu distinct words in %.2f s -> %s/vocab.json, merges.txt\n",
              v.tokens.size(), v.merges.size(), a.train.specials.size(), (long long)bytes, (long long)docs,
              counts.size(), s, a.out.c_str());
}

Register tokenizer_train_reg("data tokenizer-train", "Train a byte-level BPE tokenizer on a corpus (Hugging Face files)",
                             [](CLI::App& app) {
  auto a = std::make_shared<TokenizerTrainArgs>();
  app.add_option("inputs", a->inputs, "Text files, directories (recursively) or .jsonl files")
      ->required()
      ->check(plain_path(true));
  app.add_option("-o,--out", a->out, "Output directory for vocab.json + merges.txt (must not exist)")->required();
  app.add_option("--vocab-size", a->train.vocab_size, "Tokens in the vocabulary (bytes + merges + specials)")
      ->capture_default_str()
      ->check(number_in(1, 16777216));
  app.add_option("--min-frequency", a->train.min_frequency, "Stop when the best pair occurs fewer times")
      ->capture_default_str()
      ->check(number_in(1, 9.2e18));
  app.add_option("--special", a->train.specials, "Special tokens, appended after the merges")
      ->capture_default_str();
  app.add_option("--text-field", a->text_field, "The text field of JSONL lines")->capture_default_str();
  app.add_option("--doc-split", a->doc_split, "Documents of a text file: file, blank-line or line")
      ->capture_default_str();
  app.callback([a] { run_tokenizer_train(*a); });
});

Register plan_reg("data plan", "Show which samples every rank uses at every step", [](CLI::App& app) {
  auto a = std::make_shared<DataPlanArgs>();
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
  app.add_option("--data", a->data, "synthetic[:TOKENS] | FILE.txt | FILE.bin | DIR | GLOB | prepared DIR | A:W,B:W")
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
