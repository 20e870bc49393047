// `strata data prepare` and prepared directories: llm.c's Tiny Shakespeare recipe against two
// independent encoders (tools/tokenizer/llmc_recipe.js), SentencePiece against spm_encode,
// the output independent of the thread count, shards checked against the manifest, and bad
// input refused in one line with nothing that looks prepared left behind.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include "data/fnv.h"
#include "data/dataset.h"
#include "data/prepare.h"
#include "data/prepared.h"
#include "data/token_file.h"
#include "data/tokenizer/bpe.h"
#include "data/tokenizer/tokenizer.h"
#include "nlohmann/json.hpp"
#include "support/run.h"
#include "support/temp_dir.h"

namespace strata::data::test_prepare {
namespace {

namespace fs = std::filesystem;
using test::read_file;
using test::run_strata;
using test::TempDir;
using test::write_file;

const std::string kShared = std::string(STRATA_SOURCE_DIR) + "/../shared/data/";
const std::string kText = kShared + "tinyshakespeare.txt", kGpt2 = kShared + "gpt2-bpe";

std::vector<int32_t> tokens_of(const std::string& path) {
  FileStream s({path}, 65536);
  std::vector<int32_t> t(size_t(s.size()));
  s.read(0, s.size(), t.data());
  return t;
}

PrepareOptions shakespeare(const std::string& out, int threads) {
  PrepareOptions o;
  o.inputs = {kText};
  o.tokenizer = kGpt2;
  o.out = out;
  o.doc_split = DocSplit::blank_line;
  o.val_tokens = 32768;
  o.threads = threads;
  return o;
}

// llm.c's dev/data/tinyshakespeare.py, reproduced by `strata data prepare ... --doc-split
// blank-line --val-tokens 32768`: the figures are js-tiktoken's and gpt-3-encoder's, which agree.
TEST(DataPrepare, LlmcTinyShakespeareRecipeEqualsTwoEncoders) {
  if (!fs::exists(kText)) GTEST_SKIP() << "no " << kText;
  TempDir dir;
  const nlohmann::json m = prepare(shakespeare(dir.file("ts"), 2));
  EXPECT_EQ(m["documents"], 7222);
  EXPECT_EQ(m["tokens"], 338028);
  const auto val = tokens_of(dir.file("ts/val_000000.bin")), train = tokens_of(dir.file("ts/train_000000.bin"));
  EXPECT_EQ(val.size(), 32768u);
  EXPECT_EQ(train.size(), 305260u);
  EXPECT_EQ(fnv1a64(val), 0x459d9aa774e65dc2ull);
  EXPECT_EQ(fnv1a64(train), 0x0f7df3ae1a26281eull);
  for (const auto& e : fs::directory_iterator(dir.path()))
    EXPECT_EQ(e.path().filename().string().find("ts.partial"), std::string::npos) << e.path();
  // The tokenizer beside the shards decodes them back to the text, byte for byte.
  auto tok = open_tokenizer(dir.file("ts/tokenizer"));
  std::vector<int32_t> all = val;
  all.insert(all.end(), train.begin(), train.end());
  std::string text = tok->decode(all);
  for (size_t at; (at = text.find("<|endoftext|>")) != std::string::npos;) text.erase(at, 13);
  EXPECT_EQ(text, read_file(kText));
}

// One thread or several, small shards or one: the same tokens in the same order.
TEST(DataPrepare, ShardsAndThreadsDoNotChangeTheTokens) {
  if (!fs::exists(kText)) GTEST_SKIP() << "no " << kText;
  TempDir dir;
  prepare(shakespeare(dir.file("one"), 1));
  PrepareOptions o = shakespeare(dir.file("many"), 3);
  o.shard_tokens = 50000;
  const nlohmann::json m = prepare(o);
  ASSERT_EQ(m["shards"].size(), 8u);  // 1 val + ceil(305260 / 50000) train
  std::vector<int32_t> joined;
  for (const auto& s : m["shards"])
    if (s["split"] == "train") {
      const auto t = tokens_of(dir.file("many/" + s["file"].get<std::string>()));
      joined.insert(joined.end(), t.begin(), t.end());
    }
  EXPECT_EQ(joined, tokens_of(dir.file("one/train_000000.bin")));
  PreparedStats st;
  verify_prepared(dir.file("many"), read_manifest(dir.file("many")), true, &st);
  EXPECT_EQ(st.documents, 7222);
  EXPECT_EQ(st.tokens, 338028);
}

// JSONL documents by field, a folder of files in name order, the split by documents.
TEST(DataPrepare, JsonlFoldersAndDocumentSplit) {
  if (!fs::exists(kGpt2)) GTEST_SKIP() << "no " << kGpt2;
  TempDir dir;
  fs::create_directories(dir.file("in/sub"));
  write_file(dir.file("in/b.txt"), "second file");
  write_file(dir.file("in/sub/c.txt"), "third");
  write_file(dir.file("in/a.jsonl"), "{\"text\": \"Hello world\", \"id\": 1}\n\n{\"text\": \"more\"}\n");
  PrepareOptions o;
  o.inputs = {dir.file("in")};
  o.tokenizer = kGpt2;
  o.out = dir.file("out");
  o.val_docs = 1;
  const nlohmann::json m = prepare(o);
  EXPECT_EQ(m["documents"], 4);
  auto tok = open_tokenizer(kGpt2);
  EXPECT_EQ(tok->decode(tokens_of(dir.file("out/val_000000.bin"))), "<|endoftext|>Hello world");
  EXPECT_EQ(tok->decode(tokens_of(dir.file("out/train_000000.bin"))),
            "<|endoftext|>more<|endoftext|>second file<|endoftext|>third");
}

// A SentencePiece model trained on the same text with Debian's spm_train: every line
// encodes to spm_encode's ids.
TEST(DataPrepare, SentencePieceEqualsSpmEncode) {
  if (!fs::exists(kText)) GTEST_SKIP() << "no " << kText;
  if (std::system("command -v spm_train >/dev/null && command -v spm_encode >/dev/null") != 0)
    GTEST_SKIP() << "no spm_train (Debian package sentencepiece)";
  TempDir dir;
  const std::string model = dir.file("sp");
  ASSERT_EQ(std::system(("spm_train --input=" + kText + " --model_prefix=" + model +
                         " --vocab_size=1000 --model_type=bpe --minloglevel=2 >/dev/null 2>&1")
                            .c_str()),
            0);
  ASSERT_EQ(std::system(("spm_encode --model=" + model + ".model --output_format=id < " + kText + " > " +
                         dir.file("ids.txt"))
                            .c_str()),
            0);
  auto tok = open_tokenizer(model + ".model");
  EXPECT_EQ(tok->kind(), "sentencepiece");
  EXPECT_EQ(tok->vocab_size(), 1000);
  std::ifstream text(kText), ids(dir.file("ids.txt"));
  std::string line, want;
  int64_t lines = 0, tokens = 0;
  while (std::getline(text, line)) {
    ASSERT_TRUE(std::getline(ids, want)) << "spm_encode gave fewer lines";
    std::vector<int32_t> got;
    tok->encode(line, got);
    std::string got_text;
    for (const int32_t id : got) got_text += (got_text.empty() ? "" : " ") + std::to_string(id);
    ASSERT_EQ(got_text, want) << "line " << lines + 1 << ": " << line;
    ++lines, tokens += int64_t(got.size());
  }
  EXPECT_EQ(lines, 40000);
  EXPECT_GT(tokens, 100000);
  // And a prepared set: documents start with <s>.
  PrepareOptions o;
  o.inputs = {kText};
  o.tokenizer = model + ".model";
  o.out = dir.file("prep");
  o.doc_split = DocSplit::blank_line;
  const nlohmann::json m = prepare(o);
  EXPECT_EQ(m["documents"], 7222);
  EXPECT_EQ(m["tokenizer"]["document_token"], tok->document_token());
}

// Training reads the manifest, the shards and the tokenizer kept beside them, and shows its
// samples as text.
TEST(DataPrepare, TrainReadsAPreparedDirectoryAndDecodesSamples) {
  if (!fs::exists(kText)) GTEST_SKIP() << "no " << kText;
  TempDir dir;
  prepare(shakespeare(dir.file("ts"), 2));
  auto r = run_strata("train --data " + dir.file("ts") +
                      " --vocab 50257 --layers 1 --dim 32 --heads 2 --seq 32 --batch 4 --steps 2 --eval-every 2 "
                      "--sample-every 2 --sample-tokens 4 --run-dir " + dir.file("run"));
  ASSERT_EQ(r.status, 0) << r.out;
  // The validation split starts with llm.c's first statement: the prompt is its text.
  EXPECT_NE(r.out.find("First Citizen"), std::string::npos) << r.out;
  // A model smaller than the tokenizer's vocabulary is refused, naming both.
  auto small = run_strata("train --data " + dir.file("ts") + " --layers 1 --dim 32 --steps 1 --vocab 1000");
  EXPECT_NE(small.status, 0);
  EXPECT_NE(small.out.find("its tokenizer has 50257 tokens but the model's vocabulary is 1000 (set --vocab 50257)"),
            std::string::npos)
      << small.out;
}

// FNV-1a-64 over bytes, for whole files.
uint64_t fnv1a64_bytes(std::string_view bytes, uint64_t h = 0xcbf29ce484222325ull) {
  for (const char c : bytes) {
    h ^= static_cast<uint8_t>(c);
    h *= 0x100000001b3ull;
  }
  return h;
}

// A GPT-2 prepare writes the bytes it always has: every file of the directory (shards with
// their headers, the manifest with this machine's paths replaced, the tokenizer's copies),
// hashed by name and content, equals the hash of the output strata wrote before shards of
// 32-bit tokens existed.
TEST(DataPrepare, SixteenBitOutputIsByteIdenticalToEarlierReleases) {
  if (!fs::exists(kGpt2)) GTEST_SKIP() << "no " << kGpt2;
  TempDir dir;
  std::string text;
  for (int i = 0; i < 300; ++i) text += "Paragraph " + std::to_string(i * 7919 % 1000) + " of the corpus, 'quoted'.\n\n";
  write_file(dir.file("c.txt"), text);
  PrepareOptions o;
  o.inputs = {dir.file("c.txt")};
  o.tokenizer = kGpt2;
  o.out = dir.file("p");
  o.doc_split = DocSplit::blank_line;
  o.val_docs = 10;
  o.shard_tokens = 1000;
  o.threads = 2;
  prepare(o);
  std::vector<std::string> names;
  for (const auto& e : fs::recursive_directory_iterator(dir.file("p")))
    if (e.is_regular_file()) names.push_back(fs::relative(e.path(), dir.file("p")).string());
  std::sort(names.begin(), names.end());
  uint64_t h = 0xcbf29ce484222325ull;
  for (const std::string& name : names) {
    std::string bytes = read_file(dir.file("p/" + name));
    if (name == "manifest.json")
      for (const std::string& local : {dir.str(), kGpt2})
        for (size_t at; (at = bytes.find(local)) != std::string::npos;) bytes.replace(at, local.size(), "LOCAL");
    h = fnv1a64_bytes(name + '\0' + bytes, h);
  }
  EXPECT_EQ(names.size(), 8u);  // manifest, 2 tokenizer files, 1 val and 4 train shards
  EXPECT_EQ(h, 0xef0438b770874eb4ull) << std::hex << h;
}

// A tokenizer.json of Llama 3's family (its Split pattern, ignore_merges) whose vocabulary
// is Llama 3's size, 128,256 ids: the byte tokens, merges whose tokens have ids past 65,535,
// and <|endoftext|> as the top id. Written into `dir`; returns its path.
std::string write_wide_tokenizer(const TempDir& dir) {
  nlohmann::json vocab = nlohmann::json::object();
  for (int b = 0; b < 256; ++b) vocab[byte_to_unicode(uint8_t(b))] = b;
  const std::string space = byte_to_unicode(uint8_t(' '));
  vocab["at"] = 300;
  vocab["th"] = 65536;
  vocab["the"] = 100000;
  vocab[space + "the"] = 128000;
  vocab[space + "c"] = 70001;
  vocab[space + "cat"] = 90000;
  const nlohmann::json merges = {"a t", "t h", "th e", space + " the", space + " c", space + "c at"};
  const std::string pre = R"({"type": "Sequence", "pretokenizers": [
      {"type": "Split", "pattern": {"Regex": "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"}, "behavior": "Isolated"},
      {"type": "ByteLevel", "add_prefix_space": false, "use_regex": false}]})";
  nlohmann::json j = {{"model", {{"type", "BPE"}, {"ignore_merges", true}, {"vocab", vocab}, {"merges", merges}}},
                      {"pre_tokenizer", nlohmann::json::parse(pre)},
                      {"added_tokens", {{{"id", 128255}, {"content", "<|endoftext|>"}, {"special", true}}}}};
  fs::create_directories(dir.file("tok"));
  const std::string path = dir.file("tok/tokenizer.json");
  write_file(path, j.dump());
  return path;
}

// A vocabulary past 65,536 is prepared into llm.c's uint32 shards: read back through --data
// (open_split), every id equals the tokenizer's own encoding, ids past 65,535 included;
// `data info` is clean and names a changed or truncated shard; `strata train` runs on it.
TEST(DataPrepare, VocabularyPast16BitsWritesUint32Shards) {
  TempDir dir;
  const std::string tok_path = write_wide_tokenizer(dir);
  std::string text;
  for (int i = 0; i < 60; ++i)
    text += "Paragraph " + std::to_string(i * 37) + ": the cat sat on the mat with the other cat.\n\n";
  write_file(dir.file("c.txt"), text);
  auto ok = run_strata("data prepare " + dir.file("c.txt") + " --tokenizer " + tok_path +
                       " --doc-split blank-line --val-docs 3 --shard-tokens 300 -o " + dir.file("p"));
  ASSERT_EQ(ok.status, 0) << ok.out;
  EXPECT_NE(ok.out.find("vocab 128256 (32-bit tokens: llm.c's version 7)"), std::string::npos) << ok.out;
  const nlohmann::json m = read_manifest(dir.file("p"));
  EXPECT_EQ(m["token_bits"], 32);
  EXPECT_EQ(m["tokenizer"]["vocab"], 128256);
  EXPECT_EQ(m["tokenizer"]["document_token"], 128255);
  ASSERT_GT(m["shards"].size(), 3u);
  int32_t head[3];
  const std::string first = read_file(dir.file("p/train_000000.bin"));
  std::memcpy(head, first.data(), sizeof head);
  EXPECT_EQ(head[0], 20240801);
  EXPECT_EQ(head[1], 7);
  EXPECT_EQ(first.size(), 1024u + 4 * size_t(head[2]));

  // The tokenizer's own encoding of each document, after the document token.
  auto tok = open_tokenizer(tok_path);
  std::vector<std::string> docs;
  split_documents(dir.file("c.txt"), text, "text", DocSplit::blank_line, docs);
  ASSERT_EQ(docs.size(), 60u);
  std::vector<int32_t> want;
  for (const std::string& d : docs) {
    want.push_back(128255);
    tok->encode(d, want);
  }
  for (const int32_t id : {128000, 100000, 90000, 65536})
    EXPECT_NE(std::count(want.begin(), want.end(), id), 0) << "the corpus never encodes to " << id;
  Split split = open_split(dir.file("p"), 0, 0.05, 0);
  EXPECT_EQ(split.train->vocab(), 128256);
  std::vector<int32_t> got(size_t(split.val->size() + split.train->size()));
  split.val->read(0, split.val->size(), got.data());
  split.train->read(0, split.train->size(), got.data() + split.val->size());
  EXPECT_EQ(got, want);
  EXPECT_EQ(tok->decode(got).substr(0, 13 + 16), "<|endoftext|>Paragraph 0: the");

  auto info = run_strata("data info --data " + dir.file("p") + " --seq 16");
  ASSERT_EQ(info.status, 0) << info.out;
  EXPECT_NE(info.out.find("60 documents, " + std::to_string(want.size()) + " tokens"), std::string::npos) << info.out;
  EXPECT_NE(info.out.find("32-bit tokens"), std::string::npos) << info.out;
  auto train = run_strata("train --data " + dir.file("p") +
                          " --vocab 128256 --layers 1 --dim 32 --heads 2 --seq 16 --batch 2 --steps 2 --run-dir " +
                          dir.file("run"));
  EXPECT_EQ(train.status, 0) << train.out;

  // A token past the model's vocabulary, read from the shard itself, names it.
  const std::string shard = dir.file("p/train_000001.bin");
  auto range = run_strata("data info --data " + dir.file("p/train_000000.bin") + " --vocab 1000");
  EXPECT_NE(range.status, 0);
  EXPECT_NE(range.out.find("token file " + dir.file("p/train_000000.bin") + ": token id 128255 at token offset 0 "
                           "(byte 1024) is >= vocab 1000"),
            std::string::npos)
      << range.out;
  EXPECT_EQ(std::count(range.out.begin(), range.out.end(), '\n'), 1) << range.out;
  // One changed byte (the high half of a token), then a truncated shard, named in one line.
  std::string bytes = read_file(shard);
  bytes[1024 + 4 * 10 + 2] ^= 1;
  write_file(shard, bytes);
  auto bad = run_strata("data info --data " + dir.file("p") + " --seq 16");
  EXPECT_NE(bad.status, 0);
  EXPECT_NE(bad.out.find("shard " + shard + ": its tokens hash to"), std::string::npos) << bad.out;
  EXPECT_EQ(std::count(bad.out.begin(), bad.out.end(), '\n'), 1) << bad.out;
  bytes[1024 + 4 * 10 + 2] ^= 1;
  write_file(shard, bytes.substr(0, 1023 + 4 * 50));
  for (const std::string cmd : {"data info --data ", "train --steps 1 --layers 1 --dim 32 --vocab 128256 --data "}) {
    auto t = run_strata(cmd + dir.file("p") + " --seq 16");
    EXPECT_NE(t.status, 0);
    EXPECT_NE(t.out.find("shard " + shard + ": " + std::to_string(1023 + 4 * 50) + " bytes, expected " +
                         std::to_string(1024 + 4 * 300) + " for 300 tokens of 4 bytes"),
              std::string::npos)
        << t.out;
    EXPECT_EQ(std::count(t.out.begin(), t.out.end(), '\n'), 1) << t.out;
  }
  write_file(shard, bytes);
  // A manifest that does not say 32 bits (as one from before the key) does not match the shards.
  nlohmann::json old = m;
  old.erase("token_bits");
  write_manifest(dir.file("p"), old);
  auto narrow = run_strata("data info --data " + dir.file("p"));
  EXPECT_NE(narrow.status, 0);
  EXPECT_NE(narrow.out.find("its header declares 32-bit tokens, the manifest 16"), std::string::npos) << narrow.out;
  old["token_bits"] = 24;
  write_manifest(dir.file("p"), old);
  auto odd = run_strata("data info --data " + dir.file("p"));
  EXPECT_NE(odd.out.find("manifest.json: \"token_bits\" is 24 (expected 16 or 32)"), std::string::npos) << odd.out;
}

// Every defect is one line naming the file (and line); a failed run leaves neither the output
// nor a directory that looks prepared.
TEST(DataPrepare, BadInputIsOneLineAndLeavesNothingPrepared) {
  if (!fs::exists(kGpt2)) GTEST_SKIP() << "no " << kGpt2;
  TempDir dir;
  write_file(dir.file("ok.txt"), "some text");
  write_file(dir.file("bad.jsonl"), "{\"text\": \"a\"}\n{\"body\": \"b\"}\n");
  write_file(dir.file("notjson.jsonl"), "{\"text\": \"a\"}\nnot json\n");
  write_file(dir.file("empty.txt"), "");
  write_file(dir.file("tok.json"), "{\"model\": {\"type\": \"Unigram\"}}");
  write_file(dir.file("trunc.json"), "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\"");
  fs::create_directories(dir.file("exists"));
  const std::string gpt2 = " --tokenizer " + kGpt2;
  const std::pair<std::string, std::string> cases[] = {
      {dir.file("bad.jsonl") + gpt2, dir.file("bad.jsonl") + " line 2: no string field \"text\" (--text-field)"},
      {dir.file("notjson.jsonl") + gpt2, dir.file("notjson.jsonl") + " line 2: not a JSON object"},
      {dir.file("empty.txt") + gpt2, "holds no text"},
      {dir.file("ok.txt") + " --tokenizer " + dir.file("tok.json"), "unknown model type 'Unigram'"},
      {dir.file("ok.txt") + " --tokenizer " + dir.file("trunc.json"), dir.file("trunc.json") + " line 1: malformed JSON"},
      {dir.file("ok.txt") + " --tokenizer " + dir.file("ok.txt"), "unknown kind of file"},
      {dir.file("missing.txt") + gpt2, dir.file("missing.txt") + ": does not exist"},
      {dir.file("ok.txt") + gpt2 + " --doc-split words", "--doc-split 'words': expected file, blank-line or line"},
      {dir.file("ok.txt") + gpt2 + " --val-tokens 5 --val-docs 1", "--val-tokens and --val-docs: choose one"},
      {dir.file("ok.txt") + gpt2 + " --val-docs 1", "every token went to the validation split"},
  };
  for (const auto& [args, message] : cases) {
    fs::remove_all(dir.file("out"));
    auto r = run_strata("data prepare " + args + " -o " + dir.file("out"));
    EXPECT_NE(r.status, 0) << args;
    EXPECT_NE(r.out.find(message), std::string::npos) << args << "\n" << r.out;
    EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << r.out;
    EXPECT_FALSE(fs::exists(dir.file("out"))) << args;
  }
  auto r = run_strata("data prepare " + dir.file("ok.txt") + gpt2 + " -o " + dir.file("exists"));
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.out.find("output " + dir.file("exists") + " already exists (a directory)"), std::string::npos) << r.out;
}

// `data info` hashes every shard: a changed byte, a truncated or missing shard is named.
TEST(DataPrepare, InfoNamesTheShardThatDoesNotMatch) {
  if (!fs::exists(kGpt2)) GTEST_SKIP() << "no " << kGpt2;
  TempDir dir;
  std::string text;
  for (int i = 0; i < 200; ++i) text += "Line " + std::to_string(i) + " of a small corpus.\n\n";
  write_file(dir.file("c.txt"), text);
  auto ok = run_strata("data prepare " + dir.file("c.txt") + " --tokenizer " + kGpt2 +
                       " --doc-split blank-line --shard-tokens 500 --val-docs 20 -o " + dir.file("p"));
  ASSERT_EQ(ok.status, 0) << ok.out;
  auto info = run_strata("data info --data " + dir.file("p") + " --seq 16");
  ASSERT_EQ(info.status, 0) << info.out;
  EXPECT_NE(info.out.find("200 documents"), std::string::npos) << info.out;
  EXPECT_NE(info.out.find("train_000001.bin"), std::string::npos) << info.out;
  const std::string shard = dir.file("p/train_000001.bin");
  std::string bytes = read_file(shard);
  bytes[2000] ^= 1;
  write_file(shard, bytes);
  auto bad = run_strata("data info --data " + dir.file("p") + " --seq 16");
  EXPECT_NE(bad.status, 0);
  EXPECT_NE(bad.out.find("shard " + shard + ": its tokens hash to"), std::string::npos) << bad.out;
  write_file(shard, bytes.substr(0, 1500));
  for (const std::string cmd : {"data info --data ", "train --steps 1 --layers 1 --dim 32 --vocab 50257 --data "}) {
    auto t = run_strata(cmd + dir.file("p") + " --seq 16");
    EXPECT_NE(t.status, 0);
    EXPECT_NE(t.out.find("shard " + shard + ": 1500 bytes"), std::string::npos) << t.out;
  }
  fs::remove(shard);
  auto gone = run_strata("data info --data " + dir.file("p"));
  EXPECT_NE(gone.out.find("shard " + shard + " listed in the manifest is missing"), std::string::npos) << gone.out;
}

// Two `data prepare -o DIR` at once: each stages in a directory of its own and one rename
// decides, so one of them prepares DIR whole and the other is refused in one line (before, the
// second deleted the first's DIR.partial under it). `-o ""` is refused before any work.
TEST(DataPrepare, TwoRunsToOneOutputLeaveOneWholeAndRefuseTheOther) {
  if (!fs::exists(kGpt2) || !fs::exists(kText)) GTEST_SKIP() << "no " << kGpt2 << " or " << kText;
  TempDir dir;
  for (int round = 0; round < 3; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    const std::string out = dir.file("p" + std::to_string(round));
    const std::vector<std::string> argv = {STRATA_BINARY, "data", "prepare", kText, "--tokenizer", kGpt2,
                                           "--threads", "1", "--shard-tokens", "65536", "-o", out};
    std::vector<test::Proc> runs = {test::start(argv, {}, test::Streams::separate),
                                    test::start(argv, {}, test::Streams::separate)};
    int ok = 0;
    for (test::Proc& p : runs) {
      ASSERT_TRUE(test::wait_for(p, 300)) << p.err;
      if (p.exit_code() == 0) {
        ++ok;
        continue;
      }
      EXPECT_EQ(p.exit_code(), 1) << p.err;
      EXPECT_TRUE(p.err.find("output " + out + " already exists") != std::string::npos ||
                  p.err.find("output " + out + ": was created by another process meanwhile") != std::string::npos)
          << p.err;
    }
    EXPECT_GE(ok, 1);
    auto info = run_strata("data info --data " + out + " --seq 16");  // every shard against the manifest
    EXPECT_EQ(info.status, 0) << info.out;
    EXPECT_NE(info.out.find("prepared " + out + ": 1 documents"), std::string::npos) << info.out;
    for (const auto& e : fs::directory_iterator(dir.path()))
      EXPECT_EQ(e.path().filename().string().find(".partial"), std::string::npos) << e.path();
  }
  auto empty = run_strata("data prepare " + kText + " --tokenizer " + kGpt2 + " -o ''", "cd " + dir.str() + " &&");
  EXPECT_EQ(empty.status, 1) << empty.out;
  EXPECT_NE(empty.out.find("output: empty path"), std::string::npos) << empty.out;
  EXPECT_EQ(std::count(empty.out.begin(), empty.out.end(), '\n'), 1) << empty.out;
  EXPECT_FALSE(fs::exists(dir.file(".partial")));
}

}  // namespace
}  // namespace strata::data::test_prepare
