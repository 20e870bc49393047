// GPT-2 byte-level BPE against js-tiktoken's "gpt2" (tools/tokenizer/gpt2_fixture.js writes
// the count and FNV-1a-64 hash of the ids of ../shared/data/tinyshakespeare.txt).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <unordered_map>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "data/fnv.h"
#include "data/tokenizer/bpe.h"
#include "support/temp_dir.h"

namespace strata::data {
namespace {

const std::string kShared = std::string(STRATA_SOURCE_DIR) + "/../shared/data/";

TEST(BpeTokenizer, TinyShakespeareEqualsTiktokenAndRoundTrips) {
  const std::string text_path = kShared + "tinyshakespeare.txt";
  if (!std::filesystem::exists(text_path)) GTEST_SKIP() << "no " << text_path;
  auto t = BpeTokenizer::from_vocab_merges(kShared + "gpt2-bpe/vocab.json", kShared + "gpt2-bpe/merges.txt");
  std::ifstream in(text_path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();
  const auto ids = t.encode(text);
  // Measured with js-tiktoken 1.x (gpt2) over the whole file.
  EXPECT_EQ(ids.size(), 338025u);
  EXPECT_EQ(fnv1a64(ids), 0xe22fcd868ca90167ull);
  const std::vector<int32_t> head(ids.begin(), ids.begin() + 8);
  EXPECT_EQ(head, (std::vector<int32_t>{5962, 22307, 25, 198, 8421, 356, 5120, 597}));
  EXPECT_EQ(t.decode(ids), text);
  EXPECT_EQ(t.special_id("<|endoftext|>"), 50256);
  EXPECT_EQ(t.encode("a<|endoftext|>b", true), (std::vector<int32_t>{64, 50256, 65}));
}

TEST(BpeTokenizer, InvalidUtf8BytesAreKept) {
  const std::string text_path = kShared + "gpt2-bpe/vocab.json";
  if (!std::filesystem::exists(text_path)) GTEST_SKIP() << "no " << text_path;
  auto t = BpeTokenizer::from_vocab_merges(kShared + "gpt2-bpe/vocab.json", kShared + "gpt2-bpe/merges.txt");
  const std::string bad = std::string("ab\xff\xc3 cd\xe2\x82");
  EXPECT_EQ(t.decode(t.encode(bad)), bad);
}

TEST(BpeTokenizer, MergeNotInVocabularyNamesFileAndLine) {
  const auto dir = std::filesystem::temp_directory_path() / ("strata_bpe_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::string vocab = "{";
  for (int b = 0; b < 256; ++b) vocab += (b ? "," : "") + nlohmann::json(byte_to_unicode(static_cast<uint8_t>(b))).dump() + ":" + std::to_string(b);
  vocab += "}";
  std::ofstream(dir / "vocab.json") << vocab;
  std::ofstream(dir / "merges.txt") << "#version: 0.2\na b\n";
  try {
    BpeTokenizer::from_vocab_merges((dir / "vocab.json").string(), (dir / "merges.txt").string());
    FAIL() << "expected an error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("merges.txt line 2"), std::string::npos) << e.what();
  }
  std::ofstream(dir / "vocab.json") << "{\"a\": 1,\n";
  EXPECT_THROW(BpeTokenizer::from_vocab_merges((dir / "vocab.json").string(), (dir / "merges.txt").string()),
               std::runtime_error);
  std::filesystem::remove_all(dir);
}

// OpenAI's encoder.py bpe(), which gpt-3-encoder ports: find the adjacent pair of lowest
// rank, merge every occurrence of it left to right, repeat. Straightforward and independent of
// bpe.cc (it reads the files itself); O(n) a round, and a run of one byte takes few rounds.
// For a merge table that makes each merge's parts before using them (GPT-2's), it equals
// the lowest-rank-leftmost-first rule bpe.h states.
class ReferenceBpe {
 public:
  ReferenceBpe(const std::string& vocab_json, const std::string& merges_txt) {
    const nlohmann::json vocab = nlohmann::json::parse(test::read_file(vocab_json));
    for (const auto& [key, id] : vocab.items()) vocab_[key] = id;
    std::istringstream in(test::read_file(merges_txt));
    std::string line;
    for (int32_t rank = 0; std::getline(in, line);)
      if (!line.empty() && line.rfind("#version", 0) != 0) {
        const size_t sp = line.find(' ');
        const std::string a = line.substr(0, sp), b = line.substr(sp + 1);
        merges_.emplace(key(vocab_.at(a), vocab_.at(b)), std::make_pair(rank++, vocab_.at(a + b)));
      }
  }
  std::vector<int32_t> encode_word(const std::string& word) const {
    std::vector<int32_t> w;
    for (const char c : word) w.push_back(vocab_.at(byte_to_unicode(static_cast<uint8_t>(c))));
    for (;;) {
      const std::pair<int32_t, int32_t>* best = nullptr;
      uint64_t best_key = 0;
      for (size_t i = 0; i + 1 < w.size(); ++i)
        if (const auto m = merges_.find(key(w[i], w[i + 1])); m != merges_.end() && (!best || m->second < *best))
          best = &m->second, best_key = m->first;
      if (!best) return w;
      std::vector<int32_t> merged;
      for (size_t i = 0; i < w.size(); ++i)
        if (i + 1 < w.size() && key(w[i], w[i + 1]) == best_key) {
          merged.push_back(best->second);
          ++i;
        } else {
          merged.push_back(w[i]);
        }
      w.swap(merged);
    }
  }

 private:
  static uint64_t key(int32_t a, int32_t b) { return (uint64_t(uint32_t(a)) << 32) | uint32_t(b); }
  std::unordered_map<std::string, int32_t> vocab_;
  std::unordered_map<uint64_t, std::pair<int32_t, int32_t>> merges_;  // -> (rank, merged id)
};

// A pre-token of megabytes (one repeated byte: letters, punctuation, newlines, spaces) is
// merged in O(n log n), not O(n^2): 1 MiB of one byte took hours before; the ctest timeout
// guards the time, the reference the tokens. Words of every length around the switch from
// the short words' rescan to the long words' queue (random letters, random punctuation)
// encode as the reference does too.
TEST(BpeTokenizer, LongPreTokensEqualTheReferenceMerge) {
  const std::string vocab = kShared + "gpt2-bpe/vocab.json", merges = kShared + "gpt2-bpe/merges.txt";
  if (!std::filesystem::exists(vocab)) GTEST_SKIP() << "no " << vocab;
  auto t = BpeTokenizer::from_vocab_merges(vocab, merges);
  const ReferenceBpe ref(vocab, merges);
  for (const char c : {'a', '=', '\n', ' '})
    for (const size_t n : {size_t{4096}, size_t{1} << 20}) {
      const std::string word(n, c);
      ASSERT_EQ(BpeTokenizer::pretokenize(word).size(), 1u);
      const auto ids = t.encode(word);
      EXPECT_EQ(ids, ref.encode_word(word)) << n << " x byte " << int(c);
      EXPECT_EQ(t.decode(ids), word);
    }
  std::mt19937 rng(7);
  for (const std::string alphabet : {"abcdefghijklmnopqrstuvwxyz", "eeeeeettaaoinshr", "=-*#/.,!", "=-"})
    for (size_t n = 1; n <= 300; n += n < 80 ? 1 : 37) {
      std::string word;
      for (size_t i = 0; i < n; ++i) word += alphabet[rng() % alphabet.size()];
      EXPECT_EQ(t.encode(word), ref.encode_word(word)) << word;
    }
}

// A merge can make a pair of lower rank than its own when the table uses a token before the
// merge that makes it: that pair goes first (the rule is the lowest rank at every step), in
// long words as in short ones. Here "a b" (rank 1) makes "ab", and "ab a" (rank 0) then
// takes the next "a" before the next "a b" can: "abab..." is "aba", "b", "aba", "b"...
TEST(BpeTokenizer, AMergeThatMakesALowerRankPairLetsItGoFirst) {
  test::TempDir dir;
  std::string vocab = "{";
  for (int b = 0; b < 256; ++b) vocab += (b ? "," : "") + nlohmann::json(byte_to_unicode(static_cast<uint8_t>(b))).dump() + ":" + std::to_string(b);
  test::write_file(dir.file("vocab.json"), vocab + ",\"ab\":256,\"aba\":257}");
  test::write_file(dir.file("merges.txt"), "#version: 0.2\nab a\na b\n");
  auto t = BpeTokenizer::from_vocab_merges(dir.file("vocab.json"), dir.file("merges.txt"));
  for (int k = 1; k <= 300; ++k) {
    std::string word;
    std::vector<int32_t> want;
    for (int i = 0; i < k; ++i) word += "ab";
    for (int i = 0; i < k / 2; ++i) want.insert(want.end(), {257, 'b'});
    if (k % 2) want.push_back(256);
    EXPECT_EQ(t.encode(word), want) << k;
  }
}

std::vector<uint32_t> word_lengths(const std::string& text, BpeTokenizer::Pattern p) {
  std::vector<uint32_t> out;
  for (const std::string_view w : BpeTokenizer::pretokenize(text, p)) out.push_back(uint32_t(w.size()));
  return out;
}

uint64_t fnv_lengths(const std::vector<uint32_t>& v) { return fnv1a64(std::vector<int32_t>(v.begin(), v.end())); }

// Llama 3's pattern, hand-written, against JavaScript's Unicode regex engine running the
// pattern itself (tools/tokenizer/llama3_split.js): the same words on Tiny Shakespeare and on
// a sample of scripts, digits, contractions in both cases, emoji and \r\n runs.
TEST(BpeTokenizer, Llama3PatternSplitsAsTheRegexDoes) {
  const std::string sample = std::string(STRATA_SOURCE_DIR) + "/tests/data/fixtures/llama3_split_sample.txt";
  const auto s = word_lengths(test::read_file(sample), BpeTokenizer::Pattern::llama3);
  EXPECT_EQ(s.size(), 98u);
  EXPECT_EQ(fnv_lengths(s), 0xa91249ee36ef4c4eull);
  const auto head = BpeTokenizer::pretokenize("Hello world! It's 12345 THEY'RE\r\n\r\n  x", BpeTokenizer::Pattern::llama3);
  const std::vector<std::string_view> want = {"Hello", " world", "!", " It", "'s", " ", "123", "45", " THEY",
                                              "'RE", "\r\n\r\n", " ", " x"};
  EXPECT_EQ(head, want);
  const std::string text_path = kShared + "tinyshakespeare.txt";
  if (!std::filesystem::exists(text_path)) GTEST_SKIP() << "no " << text_path;
  const auto t = word_lengths(test::read_file(text_path), BpeTokenizer::Pattern::llama3);
  EXPECT_EQ(t.size(), 263198u);
  EXPECT_EQ(fnv_lengths(t), 0x2c41e5b9917fdbadull);
}

// A tokenizer.json with Llama 3's Split step encodes with that pattern and its
// ignore_merges rule (a word that is a token is taken whole); any other Split pattern would
// encode differently under either scanner: refused by name rather than encoded wrongly.
TEST(BpeTokenizer, Llama3TokenizerJsonUsesItsPatternAndIgnoreMerges) {
  std::string vocab = "{";
  for (int b = 0; b < 256; ++b) vocab += (b ? "," : "") + nlohmann::json(byte_to_unicode(static_cast<uint8_t>(b))).dump() + ":" + std::to_string(b);
  vocab += ",\"ab\":256,\"abc\":257}";
  const std::string pre = R"({"type": "Sequence", "pretokenizers": [
      {"type": "Split", "pattern": {"Regex": "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"}, "behavior": "Isolated"},
      {"type": "ByteLevel", "add_prefix_space": false, "use_regex": false}]})";
  const auto path = std::filesystem::temp_directory_path() / ("strata_llama3_" + std::to_string(::getpid()) + ".json");
  // Merges build "ab" only: "abc" is reachable as a whole word through ignore_merges alone.
  std::ofstream(path) << R"({"model": {"type": "BPE", "ignore_merges": true, "vocab": )" << vocab
                      << R"(, "merges": ["a b"]}, "pre_tokenizer": )" << pre << "}";
  auto t = BpeTokenizer::from_tokenizer_json(path.string());
  EXPECT_EQ(t.pattern(), BpeTokenizer::Pattern::llama3);
  EXPECT_EQ(t.encode("abc 12345"), (std::vector<int32_t>{257, ' ', '1', '2', '3', '4', '5'}));
  EXPECT_EQ(t.encode("abcd"), (std::vector<int32_t>{256, 'c', 'd'}));
  std::filesystem::remove(path);
}

// Any other Split pattern is refused.
TEST(BpeTokenizer, TokenizerJsonWithItsOwnSplitPatternIsRefused) {
  const auto path = std::filesystem::temp_directory_path() / ("strata_bpe_split_" + std::to_string(::getpid()) + ".json");
  std::ofstream(path) << R"({"model": {"type": "BPE", "vocab": {}, "merges": []},
    "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
      {"type": "Split", "pattern": {"Regex": "\\p{N}{1,3}"}, "behavior": "Isolated"},
      {"type": "ByteLevel", "add_prefix_space": false, "use_regex": false}]}})";
  try {
    BpeTokenizer::from_tokenizer_json(path.string());
    FAIL() << "expected an error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("splits by a pattern of its own"), std::string::npos) << e.what();
  }
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace strata::data
