#include "data/tokenizer/bpe_train.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <queue>
#include <stdexcept>

#include "core/error.h"
#include "core/files.h"
#include "data/tokenizer/bpe.h"

namespace strata::data {
namespace {

uint64_t key_of(int32_t a, int32_t b) { return (uint64_t(uint32_t(a)) << 32) | uint32_t(b); }
int32_t first_of(uint64_t k) { return int32_t(k >> 32); }
int32_t second_of(uint64_t k) { return int32_t(k & 0xFFFFFFFFu); }

// The token's bytes in GPT-2's printable alphabet, as vocab.json and merges.txt spell it.
std::string spelled(const std::string& bytes) {
  std::string s;
  for (const char c : bytes) s += byte_to_unicode(uint8_t(c));
  return s;
}

class Trainer {
 public:
  Trainer(const WordCounts& counts, const BpeTrainOptions& o) : o_(o) {
    for (int b = 0; b < 256; ++b) v_.tokens.emplace_back(1, char(b));
    std::vector<std::pair<std::string, int64_t>> sorted(counts.begin(), counts.end());
    std::sort(sorted.begin(), sorted.end());  // the result must not depend on hash order
    for (const auto& [word, n] : sorted) {
      std::vector<int32_t> s;
      for (const char c : word) s.push_back(int32_t(uint8_t(c)));
      count_.push_back(n);
      words_.push_back(std::move(s));
    }
    for (size_t w = 0; w < words_.size(); ++w) add_pairs(int32_t(w));
    for (const auto& [k, n] : pairs_) push(k);
  }

  BpeVocabulary run() {
    const int64_t room = o_.vocab_size - int64_t(o_.specials.size());
    while (int64_t(v_.tokens.size()) < room) {
      const uint64_t best = pop_best();
      if (best == 0 && pairs_.empty()) break;
      if (pairs_.count(best) == 0 || pairs_[best] < std::max<int64_t>(1, o_.min_frequency)) break;
      merge(best);
    }
    for (const std::string& s : o_.specials) v_.tokens.push_back(s);
    return v_;
  }

 private:
  // The heap orders by count, then by the pair's bytes (smallest first).
  struct Entry {
    int64_t count;
    uint64_t key;
  };
  bool worse(const Entry& x, const Entry& y) const {  // true: x comes after y
    if (x.count != y.count) return x.count < y.count;
    const std::string &xa = v_.tokens[size_t(first_of(x.key))], &ya = v_.tokens[size_t(first_of(y.key))];
    if (xa != ya) return xa > ya;
    return v_.tokens[size_t(second_of(x.key))] > v_.tokens[size_t(second_of(y.key))];
  }
  void push(uint64_t k) {
    heap_.push_back({pairs_[k], k});
    std::push_heap(heap_.begin(), heap_.end(), [this](const Entry& a, const Entry& b) { return worse(a, b); });
  }
  // The best pair whose heap entry is current; 0 with pairs_ empty when none is left.
  uint64_t pop_best() {
    auto cmp = [this](const Entry& a, const Entry& b) { return worse(a, b); };
    while (!heap_.empty()) {
      std::pop_heap(heap_.begin(), heap_.end(), cmp);
      const Entry e = heap_.back();
      heap_.pop_back();
      const auto it = pairs_.find(e.key);
      if (it != pairs_.end() && it->second == e.count && e.count > 0) return e.key;
    }
    pairs_.clear();
    return 0;
  }
  void add_pairs(int32_t w) {
    const auto& s = words_[size_t(w)];
    for (size_t i = 0; i + 1 < s.size(); ++i) {
      const uint64_t k = key_of(s[i], s[i + 1]);
      pairs_[k] += count_[size_t(w)];
      auto& where = where_[k];
      if (where.empty() || where.back() != w) where.push_back(w);
      touched_.push_back(k);
    }
  }
  void remove_pairs(int32_t w) {
    const auto& s = words_[size_t(w)];
    for (size_t i = 0; i + 1 < s.size(); ++i) {
      const uint64_t k = key_of(s[i], s[i + 1]);
      if ((pairs_[k] -= count_[size_t(w)]) == 0) pairs_.erase(k);
      touched_.push_back(k);
    }
  }
  void merge(uint64_t k) {
    const int32_t a = first_of(k), b = second_of(k), id = int32_t(v_.tokens.size());
    v_.tokens.push_back(v_.tokens[size_t(a)] + v_.tokens[size_t(b)]);
    v_.merges.emplace_back(v_.tokens[size_t(a)], v_.tokens[size_t(b)]);
    std::vector<int32_t> holders;
    holders.swap(where_[k]);
    where_.erase(k);
    touched_.clear();
    for (const int32_t w : holders) {
      auto& s = words_[size_t(w)];
      bool has = false;
      for (size_t i = 0; i + 1 < s.size() && !has; ++i) has = s[i] == a && s[i + 1] == b;
      if (!has) continue;  // a stale entry: an earlier merge took the pair from this word
      remove_pairs(w);
      std::vector<int32_t> out;
      for (size_t i = 0; i < s.size(); ++i) {
        if (i + 1 < s.size() && s[i] == a && s[i + 1] == b) {
          out.push_back(id);
          ++i;
        } else {
          out.push_back(s[i]);
        }
      }
      s.swap(out);
      add_pairs(w);
    }
    std::sort(touched_.begin(), touched_.end());
    touched_.erase(std::unique(touched_.begin(), touched_.end()), touched_.end());
    for (const uint64_t t : touched_)
      if (pairs_.count(t)) push(t);
  }

  const BpeTrainOptions& o_;
  BpeVocabulary v_;
  std::vector<std::vector<int32_t>> words_;
  std::vector<int64_t> count_;
  std::unordered_map<uint64_t, int64_t> pairs_;
  std::unordered_map<uint64_t, std::vector<int32_t>> where_;
  std::vector<Entry> heap_;
  std::vector<uint64_t> touched_;
};

}  // namespace

void count_words(const std::string& text, WordCounts& counts) {
  for (const std::string_view w : BpeTokenizer::pretokenize(text)) ++counts[std::string(w)];
}

void check_options(const BpeTrainOptions& o) {
  STRATA_CHECK_SETTING(
      o.vocab_size >= 256 + int64_t(o.specials.size()) && o.vocab_size <= (1 << 24),
      setting("vocab-size"), " ", o.vocab_size, " must be in [", 256 + o.specials.size(),
      ", 2^24] (256 bytes + ", o.specials.size(), " special token(s) at least)");
  STRATA_CHECK_SETTING(o.min_frequency >= 1, setting("min-frequency"), " must be >= 1 (got ",
                       o.min_frequency, ")");
  for (size_t i = 0; i < o.specials.size(); ++i) {
    const std::string& s = o.specials[i];
    STRATA_CHECK_SETTING(!s.empty(), setting("special"),
                         " \"\" is empty: a special token needs text");
    STRATA_CHECK_SETTING(std::find(o.specials.begin(), o.specials.begin() + std::ptrdiff_t(i), s) ==
                             o.specials.begin() + std::ptrdiff_t(i),
                         setting("special"), " ", quote_input(s),
                         " is given twice (one id each, so one would be lost)");
    for (int b = 0; b < 256; ++b)
      STRATA_CHECK_SETTING(s != byte_to_unicode(uint8_t(b)), setting("special"), " ",
                           quote_input(s), " collides with byte ", b, "'s token (vocab.json key ",
                           quote_input(s), ")");
  }
}

BpeVocabulary train_bpe(const WordCounts& counts, const BpeTrainOptions& o) {
  check_options(o);
  BpeVocabulary v = Trainer(counts, o).run();
  // A special equal to a learned token would share its vocab.json key: refused, not lost.
  for (size_t m = 0; m < v.merges.size(); ++m) {
    const std::string key = spelled(v.tokens[256 + m]);
    for (const std::string& s : o.specials)
      STRATA_CHECK_SETTING(s != key, setting("special"), " ", quote_input(s),
                           " collides with the token of merge ", m + 1, " (",
                           quote_input(spelled(v.merges[m].first)), " + ",
                           quote_input(spelled(v.merges[m].second)), ") learned from the corpus");
  }
  return v;
}

void write_bpe_files(const BpeVocabulary& v, const std::string& dir) {
  nlohmann::ordered_json vocab = nlohmann::ordered_json::object();
  for (size_t id = 0; id < v.tokens.size(); ++id) {
    const bool special = id >= 256 + v.merges.size();
    vocab[special ? v.tokens[id] : spelled(v.tokens[id])] = id;
  }
  atomic_write_file(dir + "/vocab.json", vocab.dump() + "\n");
  std::string merges = "#version: 0.2\n";
  for (const auto& [a, b] : v.merges) merges += spelled(a) + ' ' + spelled(b) + '\n';
  atomic_write_file(dir + "/merges.txt", merges);
}

}  // namespace strata::data
