// Training a byte-level BPE vocabulary: the incremental trainer's merges equal a naive one
// that recounts every pair each round (the same rules, written the obvious way), the files
// load into BpeTokenizer and encode the corpus losslessly, and bad input is one line.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <map>

#include "data/tokenizer/bpe.h"
#include "data/tokenizer/bpe_train.h"
#include "support/run.h"
#include "support/temp_dir.h"

namespace strata::data {
namespace {

const std::string kText = std::string(STRATA_SOURCE_DIR) + "/../shared/data/tinyshakespeare.txt";

// Every round: count all adjacent pairs over all words, take the highest count (ties: the
// smallest first symbol's bytes, then second's), merge it everywhere.
std::vector<std::pair<std::string, std::string>> naive_merges(const WordCounts& counts, size_t rounds) {
  std::vector<std::pair<std::vector<std::string>, int64_t>> words;
  for (const auto& [w, n] : counts) {
    std::vector<std::string> s;
    for (const char c : w) s.emplace_back(1, c);
    words.emplace_back(s, n);
  }
  std::vector<std::pair<std::string, std::string>> merges;
  while (merges.size() < rounds) {
    std::map<std::pair<std::string, std::string>, int64_t> pc;
    for (const auto& [s, n] : words)
      for (size_t i = 0; i + 1 < s.size(); ++i) pc[{s[i], s[i + 1]}] += n;
    std::pair<std::string, std::string> best;
    int64_t best_n = 0;
    for (const auto& [p, n] : pc)  // std::map: ascending, so the first of a tie wins
      if (n > best_n) best = p, best_n = n;
    if (best_n < 2) break;
    merges.push_back(best);
    for (auto& [s, n] : words) {
      std::vector<std::string> out;
      for (size_t i = 0; i < s.size(); ++i)
        if (i + 1 < s.size() && s[i] == best.first && s[i + 1] == best.second) {
          out.push_back(s[i] + s[i + 1]);
          ++i;
        } else {
          out.push_back(s[i]);
        }
      s.swap(out);
    }
  }
  return merges;
}

TEST(BpeTrain, SennrichExampleMergesInTheDocumentedOrder) {
  WordCounts c = {{"low", 5}, {"lower", 2}, {"newest", 6}, {"widest", 3}};
  BpeTrainOptions o;
  o.vocab_size = 256 + 4 + 1;
  const BpeVocabulary v = train_bpe(c, o);
  // (e,s) and (s,t) both occur 9 times: "e" < "s" decides; then (es,t) 9, then (l,o) 7 ties
  // with (o,w) 7 and "l" < "o".
  const std::vector<std::pair<std::string, std::string>> want = {{"e", "s"}, {"es", "t"}, {"l", "o"}, {"lo", "w"}};
  EXPECT_EQ(v.merges, want);
  EXPECT_EQ(v.tokens.size(), 261u);
  EXPECT_EQ(v.tokens.back(), "<|endoftext|>");
  EXPECT_EQ(naive_merges(c, 4), want);
}

TEST(BpeTrain, IncrementalCountsEqualRecountingEveryRound) {
  if (!std::filesystem::exists(kText)) GTEST_SKIP() << "no " << kText;
  WordCounts c;
  count_words(test::read_file(kText).substr(0, 200000), c);  // the naive trainer is slow
  BpeTrainOptions o;
  o.vocab_size = 256 + 150 + 1;
  const BpeVocabulary v = train_bpe(c, o);
  ASSERT_EQ(v.merges.size(), 150u);
  EXPECT_EQ(v.merges, naive_merges(c, 150));
}

TEST(BpeTrain, FilesLoadAndEncodeTheCorpusLosslessly) {
  if (!std::filesystem::exists(kText)) GTEST_SKIP() << "no " << kText;
  test::TempDir dir;
  auto r = test::run_strata("data tokenizer-train " + kText + " --vocab-size 2048 -o " + dir.file("tok"));
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("2048 tokens (256 bytes + 1791 merges + 1 special)"), std::string::npos) << r.out;
  auto t = BpeTokenizer::from_vocab_merges(dir.file("tok/vocab.json"), dir.file("tok/merges.txt"));
  const std::string text = test::read_file(kText);
  const auto ids = t.encode(text);
  EXPECT_EQ(t.decode(ids), text);
  EXPECT_LT(double(ids.size()), 0.4 * double(text.size()));  // it compresses
  EXPECT_EQ(t.special_id("<|endoftext|>"), 2047);
  // The same corpus trains the same files.
  auto again = test::run_strata("data tokenizer-train " + kText + " --vocab-size 2048 -o " + dir.file("tok2"));
  ASSERT_EQ(again.status, 0) << again.out;
  EXPECT_EQ(test::read_file(dir.file("tok/merges.txt")), test::read_file(dir.file("tok2/merges.txt")));
  EXPECT_EQ(test::read_file(dir.file("tok/vocab.json")), test::read_file(dir.file("tok2/vocab.json")));
}

TEST(BpeTrain, BadInputIsOneLine) {
  test::TempDir dir;
  test::write_file(dir.file("c.txt"), "some text here");
  test::write_file(dir.file("empty.txt"), "");
  const std::pair<std::string, std::string> cases[] = {
      {dir.file("c.txt") + " --vocab-size 200 -o " + dir.file("o"), "--vocab-size 200 must be in [257, 2^24]"},
      {dir.file("empty.txt") + " -o " + dir.file("o"), "the corpus holds no text"},
      {dir.file("c.txt") + " -o " + dir.path().string(), "already exists (a directory)"},
      {dir.file("nope.txt") + " -o " + dir.file("o"), dir.file("nope.txt") + ": does not exist"},
  };
  for (const auto& [args, msg] : cases) {
    auto r = test::run_strata("data tokenizer-train " + args);
    EXPECT_NE(r.status, 0) << args;
    EXPECT_NE(r.out.find(msg), std::string::npos) << r.out;
    EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << r.out;
    EXPECT_FALSE(std::filesystem::exists(dir.file("o")));
  }
}

// A special token is written into vocab.json as its text, the other tokens in GPT-2's byte
// alphabet: a special spelled as a byte's or a learned token's key, or given twice, would
// share a key with it and an id would vanish from the file (2000 ids, 1999 keys). Each is
// one line naming the token and what it collides with, and nothing is written.
TEST(BpeTrain, SpecialTokensThatCollideAreRefusedBeforeWriting) {
  test::TempDir dir;
  std::string corpus;
  for (int i = 0; i < 50; ++i) corpus += "the theme of the thesis then the other\n";
  test::write_file(dir.file("c.txt"), corpus);
  const std::string train = "data tokenizer-train " + dir.file("c.txt") + " --vocab-size 400 -o " + dir.file("o");
  const std::pair<std::string, std::string> cases[] = {
      {" --special a", "--special 'a' collides with byte 97's token (vocab.json key 'a')"},
      {" --special '<|endoftext|>' --special $(printf '\\304\\240')",  // "Ġ", the space byte's key
       "--special '\\xc4\\xa0' collides with byte 32's token"},
      {" --special the", "--special 'the' collides with the token of merge "},
      {" --special '<|x|>' --special '<|endoftext|>' --special '<|x|>'", "--special '<|x|>' is given twice"},
      {" --special ''", "--special \"\" is empty"},
  };
  for (const auto& [flags, msg] : cases) {
    auto r = test::run_strata(train + flags);
    EXPECT_NE(r.status, 0) << flags;
    EXPECT_NE(r.out.find(msg), std::string::npos) << r.out;
    EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << r.out;
    EXPECT_FALSE(std::filesystem::exists(dir.file("o"))) << flags;
    EXPECT_FALSE(std::filesystem::exists(dir.file("o.partial"))) << flags;
  }
  // The merge that "the" collides with is named by its parts.
  auto r = test::run_strata(train + " --special the");
  EXPECT_NE(r.out.find("('t' + 'he') learned from the corpus"), std::string::npos) << r.out;
  // Specials that collide with nothing still train.
  r = test::run_strata(train + " --special '<|endoftext|>' --special '<|pad|>'");
  ASSERT_EQ(r.status, 0) << r.out;
  auto t = BpeTokenizer::from_vocab_merges(dir.file("o/vocab.json"), dir.file("o/merges.txt"));
  EXPECT_EQ(t.special_id("<|endoftext|>"), t.vocab_size() - 2);
  EXPECT_EQ(t.special_id("<|pad|>"), t.vocab_size() - 1);
}

}  // namespace
}  // namespace strata::data
