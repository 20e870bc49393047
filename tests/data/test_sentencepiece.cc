// strata's SentencePiece BPE encoder against libsentencepiece (the reference, still linked):
// models trained here by Debian's spm_train on a randomized corpus (runs of spaces and tabs,
// leading and trailing whitespace, accented Latin, combining marks, CJK, emoji, forms NFKC
// changes, invalid UTF-8, characters outside the vocabulary) and on Tiny Shakespeare, with
// the library's defaults (nmt_nfkc), Llama 2's settings (identity, byte fallback, split
// digits, extra whitespace kept), user-defined pieces, whitespace-only pieces and whitespace
// as a suffix: every line's ids equal the library's, and so does decode(encode(line)).
#include <gtest/gtest.h>
#include <sentencepiece_processor.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "data/tokenizer/sentencepiece.h"
#include "data/tokenizer/sentencepiece_bpe.h"
#include "data/tokenizer/sentencepiece_model.h"
#include "data/tokenizer/sentencepiece_normalizer.h"
#include "support/temp_dir.h"

namespace strata::data::test_sentencepiece {
namespace {

namespace fs = std::filesystem;
using test::TempDir;
using test::write_file;

const std::string kText = std::string(STRATA_SOURCE_DIR) + "/../shared/data/tinyshakespeare.txt";

bool have_spm_train() { return std::system("command -v spm_train >/dev/null") == 0; }

std::string utf8(uint32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s += char(cp);
  } else if (cp < 0x800) {
    s += char(0xC0 | (cp >> 6)), s += char(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    s += char(0xE0 | (cp >> 12)), s += char(0x80 | ((cp >> 6) & 0x3F)), s += char(0x80 | (cp & 0x3F));
  } else {
    s += char(0xF0 | (cp >> 18)), s += char(0x80 | ((cp >> 12) & 0x3F));
    s += char(0x80 | ((cp >> 6) & 0x3F)), s += char(0x80 | (cp & 0x3F));
  }
  return s;
}

// Lines of words from a small Zipf-like vocabulary (so BPE has merges to learn) mixed with
// everything normalization and unknown characters must get right.
std::vector<std::string> random_lines(uint64_t seed, int count) {
  std::mt19937_64 rng(seed);
  auto pick = [&](size_t n) { return size_t(rng() % n); };
  static const char* kSyllables[] = {"th", "e", "an", "re", "in", "on", "st", "ar", "ou", "ing",
                                     "ed", "er", "al", "it", "qu", "ly", "o", "a", "is", "pr"};
  std::vector<std::string> words;
  for (int w = 0; w < 300; ++w) {
    std::string word;
    for (size_t k = 0, n = 1 + pick(4); k < n; ++k) word += kSyllables[pick(std::size(kSyllables))];
    words.push_back(word);
  }
  static const char* kSpaces[] = {" ", "  ", "   ", "\t", " \t ", "\xE3\x80\x80" /* U+3000 */, "\xC2\xA0" /* NBSP */,
                                  "\n", " \n  "};
  static const char* kAccented[] = {"café", "naïve", "Ångström", "façade", "über", "niño", "Œuvre", "ÆØÅ"};
  static const char* kCombining[] = {"e\xCC\x81", "a\xCC\x88", "n\xCC\x83", "o\xCC\x82\xCC\xA3", "A\xCC\x8A",
                                     "\xCC\x81" /* a mark with nothing before it */};
  static const char* kCjk[] = {"日本語", "中文字符", "漢字", "東京", "한국어"};
  static const char* kEmoji[] = {"😀", "👍🏽", "👨‍👩‍👧", "🇯🇵", "❤️"};
  static const char* kNfkc[] = {"ＡＢＣ", "１２３", "！", "ｶﾀｶﾅ", "ﬁ", "①", "㎏", "™", "½", "ℌ", "Ⅻ", "ｗｏｒｄ",
                                "ｶﾞ", "ﾊﾟﾝ", "ｳﾞ", "Ａ\xCC\x81"};
  static const char* kInvalid[] = {"\xFF", "\xC0\x80", "\x80", "\xE2\x82", "\xED\xA0\x80", "\xF4\x90\x80\x80",
                                   "\xC3", "\xFE\xFE", "\xF0\x9F\x98"};
  static const char* kControl[] = {"\x01", "\x7F", "\xE2\x80\x8B" /* ZWSP */, "\xE2\x80\x8D", "\xEF\xBB\xBF", "\r",
                                   "\xE2\x96\x81" /* a literal U+2581 */, "\xE2\x96\x81\xE2\x96\x81"};
  std::vector<std::string> lines;
  for (int l = 0; l < count; ++l) {
    std::string line;
    if (pick(6) == 0) line += kSpaces[pick(std::size(kSpaces))];
    for (size_t k = 0, n = pick(14); k < n; ++k) {
      if (k > 0) line += pick(8) == 0 ? kSpaces[pick(std::size(kSpaces))] : " ";
      const size_t kind = pick(100);
      std::string word = words[std::min(pick(words.size()), pick(words.size()))];  // skewed to the first
      if (pick(10) == 0) word[0] = char(std::toupper(word[0]));
      if (kind < 55) {
        line += word;
      } else if (kind < 60) {
        line += std::to_string(rng() % 100000);
      } else if (kind < 67) {
        line += word + ",.;:!?'\"()-"[pick(11)];
      } else if (kind < 72) {
        line += kAccented[pick(std::size(kAccented))];
      } else if (kind < 76) {
        line += word + kCombining[pick(std::size(kCombining))];
      } else if (kind < 80) {
        line += kCjk[pick(std::size(kCjk))];
        if (pick(2)) line += utf8(0x4E00 + uint32_t(pick(0x5200)));
      } else if (kind < 83) {
        line += kEmoji[pick(std::size(kEmoji))];
      } else if (kind < 88) {
        line += kNfkc[pick(std::size(kNfkc))];
      } else if (kind < 91) {
        line += word + kInvalid[pick(std::size(kInvalid))];
      } else if (kind < 95) {
        // Characters the vocabulary is unlikely to hold: anywhere in the BMP or beyond.
        uint32_t cp = 0xA0 + uint32_t(pick(0x10FFFF - 0xA0));
        if (cp >= 0xD800 && cp < 0xE000) cp -= 0x800;
        line += utf8(cp);
      } else {
        line += kControl[pick(std::size(kControl))] + word;
      }
    }
    if (pick(6) == 0) line += kSpaces[pick(std::size(kSpaces))];
    // spm_train reads lines: a newline inside one is for the multi-line texts below.
    for (char& c : line)
      if (c == '\n') c = ' ';
    lines.push_back(line);
  }
  return lines;
}

// Texts that stress the edges: empty, only whitespace, and several lines as one text (as
// `data prepare` encodes documents).
std::vector<std::string> edge_texts(const std::vector<std::string>& lines) {
  std::vector<std::string> texts = {"", " ", "   ", "\t", "\n", " \n\t ", "a", " a", "a ", "  a  b  ",
                                    "\xE2\x96\x81", "\xE2\x96\x81\xE2\x96\x81x", "x\xE2\x96\x81", "\xE2\x80\x8B",
                                    "\xFF", " \xFF ", "\xEF\xBF\xBD", "\xE3\x80\x80x\xE3\x80\x80",
                                    "a<sep>b", "<sep><sep> <sep>", "the thing!", "ＡＢＡＢ"};
  texts.push_back(std::string("a\0b \0", 5));  // NUL walks the trie like any byte
  for (size_t i = 0; i + 3 <= lines.size() && texts.size() < 400; i += 3)
    texts.push_back(lines[i] + "\n" + lines[i + 1] + "\n\n" + lines[i + 2]);
  return texts;
}

std::vector<std::string> shakespeare_lines() {
  std::vector<std::string> lines;
  std::ifstream in(kText);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

struct Trained {
  std::string model;
  sentencepiece::SentencePieceProcessor library;
};

// Trains a model (BPE unless `type` says otherwise) on `corpus` with `flags`; false when
// spm_train fails.
bool train(const TempDir& dir, const std::string& name, const std::string& corpus, const std::string& flags,
           Trained& out, const std::string& type = "bpe") {
  out.model = dir.file(name + ".model");
  const std::string cmd = "spm_train --input=" + corpus + " --model_prefix=" + dir.file(name) + " --model_type=" +
                          type + " --minloglevel=2 " + flags + " >" + dir.file(name + ".log") + " 2>&1";
  if (std::system(cmd.c_str()) != 0) return false;
  return out.library.Load(out.model).ok();
}

std::string ids_text(const std::vector<int32_t>& ids) {
  std::string s;
  for (const int32_t id : ids) s += (s.empty() ? "" : " ") + std::to_string(id);
  return s;
}

// Every text through the tokenizer (its segment cache on), through the encoder's parts with
// no cache, and through the library: equal ids, equal decodes.
// Returns how many of the ids are unk or byte pieces.
int64_t expect_equal_to_library(Trained& t, const std::vector<std::string>& texts, const std::string& what) {
  auto tok = open_sentencepiece(t.model);
  const std::string proto = t.library.serialized_model_proto();
  const SentencePieceModel model = parse_sentencepiece_model(proto, t.model);
  EXPECT_EQ(model.model_type, SentencePieceModel::ModelType::bpe);
  EXPECT_EQ(int(model.pieces.size()), t.library.GetPieceSize());
  const SentencePieceNormalizer normalizer(model, t.model);
  const SentencePieceBpe bpe(model, t.model);
  SentencePieceBpe::Scratch scratch;
  std::string normalized;
  int64_t tokens = 0, unknown = 0;
  for (size_t i = 0; i < texts.size(); ++i) {
    std::vector<int> want;
    EXPECT_TRUE(t.library.Encode(texts[i], &want).ok());
    const std::vector<int32_t> want32(want.begin(), want.end());
    std::vector<int32_t> got, parts;
    tok->encode(texts[i], got);
    normalizer.normalize(texts[i], normalized);
    bpe.encode(normalized, parts, scratch);
    std::string want_text;
    EXPECT_TRUE(t.library.Decode(want, &want_text).ok());
    // The first difference is enough to go on.
    if (ids_text(got) != ids_text(want32) || ids_text(parts) != ids_text(want32) || tok->decode(got) != want_text) {
      ADD_FAILURE() << what << " text " << i << ": \"" << texts[i] << "\"\n  library " << ids_text(want32)
                    << "\n  strata  " << ids_text(got) << "\n  no cache " << ids_text(parts);
      return unknown;
    }
    tokens += int64_t(got.size());
    for (const int32_t id : got) unknown += t.library.IsUnknown(id) || t.library.IsByte(id);
  }
  EXPECT_GT(tokens, int64_t(texts.size()));
  return unknown;
}

class SentencePieceBpeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!have_spm_train()) GTEST_SKIP() << "no spm_train (Debian package sentencepiece)";
    corpus_ = random_lines(29, 6000);
    std::string all;
    for (const std::string& l : corpus_) all += l + "\n";
    // Trained on Shakespeare too, so its lines encode with real merges.
    if (fs::exists(kText)) all += test::read_file(kText);
    write_file(dir_.file("corpus.txt"), all);
    texts_ = random_lines(2026, 6000);  // lines the models were not trained on
    for (std::string& e : edge_texts(texts_)) texts_.push_back(std::move(e));
    texts_.insert(texts_.end(), corpus_.begin(), corpus_.begin() + 2000);
  }
  // A model trained on the random corpus, checked on it and on Tiny Shakespeare.
  // `cached`: whether the vocabulary lets segments be cached.
  void check(const std::string& name, const std::string& flags, bool cached) {
    Trained t;
    ASSERT_TRUE(train(dir_, name, dir_.file("corpus.txt"), "--vocab_size=4000 " + flags, t))
        << test::read_file(dir_.file(name + ".log"));
    EXPECT_EQ(SentencePieceBpe(parse_sentencepiece_model(t.library.serialized_model_proto(), t.model), t.model)
                  .segments_are_independent(),
              cached);
    // The random text reaches the paths it is for: characters outside the vocabulary included.
    EXPECT_GT(expect_equal_to_library(t, texts_, name + " on random text"), 0);
    if (!fs::exists(kText)) return;
    const std::vector<std::string> lines = shakespeare_lines();
    EXPECT_EQ(lines.size(), 40000u);
    expect_equal_to_library(t, lines, name + " on Tiny Shakespeare");
  }
  TempDir dir_;
  std::vector<std::string> corpus_, texts_;
};

TEST_F(SentencePieceBpeTest, DefaultsNmtNfkcEqualLibrary) { check("defaults", "", true); }

TEST_F(SentencePieceBpeTest, Llama2SettingsEqualLibrary) {
  check("llama", "--normalization_rule_name=identity --remove_extra_whitespaces=false --byte_fallback=true "
                 "--split_digits=true --add_dummy_prefix=true",
        true);
}

// User-defined pieces are matched whole (frozen, never normalized); whitespace-only pieces
// ("▁▁▁") merge runs of spaces.
TEST_F(SentencePieceBpeTest, UserDefinedAndWhitespacePiecesEqualLibrary) {
  check("user", "--user_defined_symbols='<sep>,qu,\xE2\x96\x81th,ing!,ＡＢ' --allow_whitespace_only_pieces=true "
                "--remove_extra_whitespaces=false --byte_fallback=true",
        true);
}

// Pieces that end in "▁" span segment cuts: the encoder must see the text whole.
TEST_F(SentencePieceBpeTest, WhitespaceAsSuffixEqualsLibrary) {
  check("suffix", "--treat_whitespace_as_suffix=true --normalization_rule_name=nfkc", false);
}

// Protobuf's wire format, enough to rewrite piece types: a varint at `at`, advanced past it.
uint64_t read_varint(const std::string& s, size_t& at) {
  uint64_t v = 0;
  for (int shift = 0;; shift += 7) {
    const auto b = uint8_t(s.at(at++));
    v |= uint64_t(b & 0x7F) << shift;
    if ((b & 0x80) == 0) return v;
  }
}
void write_varint(uint64_t v, std::string& out) {
  for (; v >= 0x80; v >>= 7) out += char(0x80 | (v & 0x7F));
  out += char(v);
}

// The serialized model with piece types rewritten: retype(id, piece, type) gives the new type.
std::string with_piece_types(const std::string& proto,
                             const std::function<int(size_t, const std::string&, int)>& retype) {
  std::string out;
  size_t id = 0;
  for (size_t at = 0; at < proto.size();) {
    const size_t field_start = at;
    const uint64_t key = read_varint(proto, at);
    if ((key & 7) != 2) {  // every top-level field of a model is length-delimited
      ADD_FAILURE() << "unexpected wire type " << (key & 7);
      return proto;
    }
    const size_t n = read_varint(proto, at);
    const std::string body = proto.substr(at, n);
    at += n;
    if ((key >> 3) != 1) {
      out += proto.substr(field_start, at - field_start);
      continue;
    }
    // The piece's own fields without its type (absent means NORMAL, 1), then the new type.
    std::string piece, text;
    int type = 1;
    for (size_t p = 0; p < body.size();) {
      const size_t start = p;
      const uint64_t k = read_varint(body, p);
      if ((k & 7) == 0) {
        const uint64_t v = read_varint(body, p);
        if ((k >> 3) == 3) {
          type = int(v);
          continue;
        }
      } else if ((k & 7) == 2) {
        const size_t len = read_varint(body, p);
        if ((k >> 3) == 1) text = body.substr(p, len);
        p += len;
      } else {
        p += (k & 7) == 5 ? 4 : 8;
      }
      piece += body.substr(start, p - start);
    }
    piece += char(3 << 3);  // field 3, a varint
    write_varint(uint64_t(retype(id++, text, type)), piece);
    out += char(key);
    write_varint(piece.size(), out);
    out += piece;
  }
  return out;
}

// A model trained on the random corpus, then its pieces retyped and written to `name`.model.
void retyped_model(const TempDir& dir, const std::string& name,
                   const std::function<int(size_t, const std::string&, int)>& retype, Trained& t) {
  Trained base;
  ASSERT_TRUE(train(dir, name + "-base", dir.file("corpus.txt"), "--vocab_size=4000", base))
      << test::read_file(dir.file(name + "-base.log"));
  t.model = dir.file(name + ".model");
  write_file(t.model, with_piece_types(base.library.serialized_model_proto(), retype));
  ASSERT_TRUE(t.library.Load(t.model).ok());
}

// Unused pieces still merge, then split back into the two symbols they were last proposed
// from; a model with them is encoded without the segment cache.
TEST_F(SentencePieceBpeTest, UnusedPiecesSplitBackAsTheLibraryDoes) {
  Trained t;
  retyped_model(
      dir_, "unused", [](size_t id, const std::string&, int type) { return type == 1 && id % 3 == 0 ? 5 : type; }, t);
  int unused = 0;
  for (int id = 0; id < t.library.GetPieceSize(); ++id) unused += t.library.IsUnused(id);
  EXPECT_GT(unused, 1000);
  EXPECT_FALSE(SentencePieceBpe(parse_sentencepiece_model(t.library.serialized_model_proto(), t.model), t.model)
                   .segments_are_independent());
  EXPECT_GT(expect_equal_to_library(t, texts_, "unused on random text"), 0);
  if (fs::exists(kText)) expect_equal_to_library(t, shakespeare_lines(), "unused on Tiny Shakespeare");
}

// Normal pieces retyped as user-defined: matched whole before normalization and frozen, so
// pieces that hold them ("▁th" when "th" is user-defined) are never formed.
TEST_F(SentencePieceBpeTest, FrozenUserDefinedPiecesNeverMerge) {
  Trained t;
  retyped_model(
      dir_, "frozen",
      [](size_t, const std::string& piece, int type) {
        const bool two_letters = piece.size() == 2 && std::isalpha(uint8_t(piece[0])) && std::isalpha(uint8_t(piece[1]));
        return type == 1 && two_letters ? 4 : type;
      },
      t);
  EXPECT_GT(expect_equal_to_library(t, texts_, "frozen on random text"), 0);
  if (fs::exists(kText)) expect_equal_to_library(t, shakespeare_lines(), "frozen on Tiny Shakespeare");
}

// A unigram model keeps the library's encoder (strata's is for BPE): the same ids.
TEST_F(SentencePieceBpeTest, UnigramModelsKeepTheLibrarysEncoder) {
  Trained t;
  ASSERT_TRUE(train(dir_, "unigram", dir_.file("corpus.txt"), "--vocab_size=4000", t, "unigram"))
      << test::read_file(dir_.file("unigram.log"));
  EXPECT_EQ(parse_sentencepiece_model(t.library.serialized_model_proto(), t.model).model_type,
            SentencePieceModel::ModelType::unigram);
  auto tok = open_sentencepiece(t.model);
  for (size_t i = 0; i < texts_.size(); i += 7) {
    std::vector<int> want;
    ASSERT_TRUE(t.library.Encode(texts_[i], &want).ok());
    std::vector<int32_t> got;
    tok->encode(texts_[i], got);
    ASSERT_EQ(ids_text(got), ids_text(std::vector<int32_t>(want.begin(), want.end()))) << "text " << i;
  }
}

// The tables past many growths, and the cache emptied when full (shrunk to 5 entries).
TEST(SegmentCache, KeepsEveryEntryUntilFullThenStartsAgain) {
  StringMap<int32_t> map;
  for (int32_t i = 0; i < 5000; ++i) EXPECT_TRUE(map.insert("k" + std::to_string(i), i));
  EXPECT_FALSE(map.insert("k7", -1));  // the first value stays
  EXPECT_FALSE(map.insert("", 1));      // keys are never empty
  EXPECT_EQ(map.size(), 5000u);
  for (int32_t i = 0; i < 5000; ++i) {
    const int32_t* v = map.find("k" + std::to_string(i));
    ASSERT_NE(v, nullptr) << i;
    EXPECT_EQ(*v, i);
  }
  EXPECT_EQ(map.find("k5000"), nullptr);

  SegmentCache cache(5);
  auto key = [](int i) { return "\xE2\x96\x81segment" + std::to_string(i); };
  for (int i = 0; i < 12; ++i) {
    const std::vector<int32_t> ids(size_t(i % 3 + 1), i);
    cache.insert(key(i), SegmentCache::hash(key(i)), ids.data(), ids.size());
    EXPECT_EQ(cache.size(), size_t(i % 5 + 1)) << i;
  }
  // Entries 10 and 11 are those since the last emptying (at the 11th insert).
  for (int i = 0; i < 12; ++i) {
    std::vector<int32_t> got = {-7};
    const bool hit = cache.find(key(i), SegmentCache::hash(key(i)), got);
    EXPECT_EQ(hit, i >= 10) << i;
    if (hit) {
      std::vector<int32_t> want(size_t(i % 3 + 1), i);
      want.insert(want.begin(), -7);  // appended after what `out` held
      EXPECT_EQ(got, want) << i;
    }
  }
}

// The library checks a file before strata reads it, so these defects reach strata's reader
// only through a damaged copy in memory: each is one line naming the file.
TEST(SentencePieceModelReader, DefectsNameTheFileAndTheByte) {
  auto message = [](const std::string& proto) {
    try {
      parse_sentencepiece_model(proto, "m.model");
    } catch (const std::exception& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  // A piece message whose length runs past the end.
  EXPECT_EQ(message(std::string("\x0A\x09\x0A\x05<unk>", 9)),
            "m.model: truncated SentencePiece model (9 bytes wanted at byte 2, 7 left)");
  EXPECT_EQ(message(std::string("\x0D\x00\x00\x00\x00", 5)),
            "m.model: not a SentencePiece model (field 1 has wire type 5 at byte 1, expected 2)");
  EXPECT_EQ(message(std::string("\x0A\x02\x18\x09", 4)), "m.model: not a SentencePiece model (piece type 9 at byte 4)");
  EXPECT_EQ(message(""), "m.model: not a SentencePiece model (no pieces)");
  SentencePieceModel model;
  model.precompiled_charsmap = std::string("\xFF\xFF\x00\x00" "abcdefgh", 12);
  try {
    SentencePieceNormalizer normalizer(model, "m.model");
    ADD_FAILURE() << "a charsmap longer than its blob was accepted";
  } catch (const std::exception& e) {
    EXPECT_STREQ(e.what(), "m.model: malformed normalizer charsmap (a trie of 65535 bytes in 8)");
  }
}

}  // namespace
}  // namespace strata::data::test_sentencepiece

