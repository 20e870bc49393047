// Opening a data spec as training and validation sources.
#include "data/dataset.h"

#include <cmath>
#include <filesystem>

#include "core/error.h"
#include "data/mixture.h"
#include "data/prepared.h"
#include "data/synthetic.h"
#include "data/token_file.h"

namespace strata::data {

TailPolicy parse_tail_policy(const std::string& s) {
  if (s == "drop") return TailPolicy::drop;
  if (s == "pad") return TailPolicy::pad;
  if (s == "uneven") return TailPolicy::uneven;
  fail("unknown tail policy '", s, "' (expected drop, pad or uneven)");
}

static Split open_synthetic(const std::string& spec, uint64_t seed, int vocab) {
  STRATA_CHECK(vocab <= 0 || vocab >= MarkovChain::kVocab, "the synthetic corpus has ",
               MarkovChain::kVocab, " token ids but the model's vocabulary is ", vocab);
  int64_t tokens = kSyntheticTrainTokens;
  if (spec.size() > 10) {
    const std::string n = spec.substr(10);
    char* end = nullptr;
    long long v = std::strtoll(n.c_str(), &end, 10);
    STRATA_CHECK_SETTING(!n.empty() && *end == '\0' && v > 0, "bad synthetic corpus size '", n,
                         "' in ", setting("data"), " ", spec,
                         " (expected synthetic:TOKENS with TOKENS > 0)");
    // One byte of memory per token, generated up front: bound it before allocating.
    STRATA_CHECK_SETTING(v <= kSyntheticMaxTokens, "synthetic corpus size ", n, " in ",
                         setting("data"), " ", spec, " is above the limit of ", kSyntheticMaxTokens,
                         " tokens (1 byte each, in memory)");
    tokens = v;
  }
  Split s;
  s.train = std::make_unique<SyntheticSource>(seed, false, tokens);
  s.val = std::make_unique<SyntheticSource>(seed, true, std::min(tokens, kSyntheticValTokens));
  return s;
}

// llm.c names its shards *_train_*.bin and *_val_*.bin: when some names say "val" and others
// do not, they are the validation split.
static bool is_val_name(const std::string& path) {
  return std::filesystem::path(path).filename().string().find("val") != std::string::npos;
}

Split open_split(const std::string& spec, uint64_t seed, double val_fraction, int vocab) {
  STRATA_CHECK(val_fraction >= 0 && val_fraction < 1, "validation fraction must be in [0, 1) "
               "(got ", val_fraction, ")");
  STRATA_CHECK(vocab >= 0, "vocabulary must be positive (got ", vocab, ")");
  // A ',' makes a mixture, whatever its first part ("synthetic,a.txt" is refused as one).
  const auto mix = parse_mixture(spec);
  if (mix.empty() && (spec == "synthetic" || spec.rfind("synthetic:", 0) == 0))
    return open_synthetic(spec, seed, vocab);
  if (mix.empty() && is_prepared(spec)) return open_prepared(spec, val_fraction, vocab);
  if (!mix.empty()) {
    std::vector<std::unique_ptr<TokenSource>> train, val;
    std::vector<double> weights;
    for (const auto& [part, w] : mix) {
      Split p = open_split(part, seed, val_fraction, vocab);
      STRATA_CHECK_SETTING(train.empty() || p.train->vocab() == train[0]->vocab(), setting("data"),
                           " ", spec, ": '", part, "' has a vocabulary of ", p.train->vocab(),
                           " tokens, the first part ", train[0]->vocab(),
                           " (a mixture needs one tokenizer)");
      train.push_back(std::move(p.train));
      val.push_back(std::move(p.val));
      weights.push_back(w);
    }
    Split s;
    s.train = std::make_unique<MixtureSource>(std::move(train), weights, seed);
    s.val = std::make_unique<MixtureSource>(std::move(val), weights, seed);
    return s;
  }

  std::vector<std::string> files = resolve_files(spec), train_files, val_files;
  for (const std::string& f : files) (is_val_name(f) ? val_files : train_files).push_back(f);
  Split s;
  if (!train_files.empty() && !val_files.empty()) {
    s.train = std::make_unique<FileStream>(train_files, vocab);
    s.val = std::make_unique<FileStream>(val_files, vocab);
    return s;
  }
  auto whole = std::make_shared<const FileStream>(files, vocab);
  const int64_t total = whole->size();
  const int64_t val = int64_t(std::floor(double(total) * val_fraction));
  s.train = std::make_unique<SliceSource>(whole, 0, total - val, "train");
  s.val = std::make_unique<SliceSource>(whole, total - val, total, "val");
  return s;
}

}  // namespace strata::data
