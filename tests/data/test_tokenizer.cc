// GPT-2 byte-level BPE against js-tiktoken's "gpt2" (tools/tokenizer/gpt2_fixture.js writes
// the count and FNV-1a-64 hash of the ids of ../shared/data/tinyshakespeare.txt).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "data/fnv.h"
#include "data/tokenizer/bpe.h"

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

// Llama 3's tokenizer.json (a Split pattern before ByteLevel) would encode differently under
// GPT-2's pattern: refused by name rather than encoded wrongly.
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
