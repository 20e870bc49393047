// How samples are shown: text files as text (only what would not print escaped), the
// synthetic corpus and .bin tokens as ids.
#include <gtest/gtest.h>

#include <fstream>
#include <regex>

#include "cli_util.h"
#include "nlohmann/json.hpp"
#include "train/generate.h"

using namespace strata::test;
using strata::train::render_tokens;

namespace {
std::vector<int32_t> bytes(const std::string& s) {
  std::vector<int32_t> out;
  for (unsigned char c : s) out.push_back(c);
  return out;
}
}  // namespace

TEST(RenderTokens, TextKeepsPrintableAndUtf8) {
  EXPECT_EQ(render_tokens(bytes("To be, or not"), true), "To be, or not");
  EXPECT_EQ(render_tokens(bytes("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x99\x82"), true),
            "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x99\x82");
  EXPECT_EQ(render_tokens(bytes("a\nb\tc\\d"), true), "a\\nb\\tc\\\\d");
}

TEST(RenderTokens, TextEscapesOnlyWhatWouldNotPrint) {
  EXPECT_EQ(render_tokens({0x01, 'x', 0x7f}, true), "\\x01x\\x7f");
  // A lone continuation byte, a truncated sequence, an overlong form, a surrogate, a C1
  // control: not valid printable UTF-8, so escaped byte by byte.
  EXPECT_EQ(render_tokens({0xde}, true), "\\xde");
  EXPECT_EQ(render_tokens({0x80, 'a'}, true), "\\x80a");
  EXPECT_EQ(render_tokens({0xe2, 0x82}, true), "\\xe2\\x82");
  EXPECT_EQ(render_tokens({0xc0, 0xaf}, true), "\\xc0\\xaf");
  EXPECT_EQ(render_tokens({0xed, 0xa0, 0x80}, true), "\\xed\\xa0\\x80");
  EXPECT_EQ(render_tokens({0xc2, 0x85}, true), "\\xc2\\x85");
  EXPECT_EQ(render_tokens({'a', 300}, true), "a<300>");
  // Whatever the bytes, the result is valid UTF-8 (metrics.jsonl stores it as JSON).
  std::vector<int32_t> all;
  for (int b = 0; b < 256; ++b) all.push_back(b);
  EXPECT_NO_THROW(nlohmann::json(render_tokens(all, true)).dump());
}

TEST(RenderTokens, IdsAreSpaceSeparated) {
  EXPECT_EQ(render_tokens({83, 84, 222, 0}, false), "83 84 222 0");
  EXPECT_EQ(render_tokens({}, false), "");
}

// End to end: the synthetic corpus's sample is token ids (never \xNN escapes); a text file's
// sample is its text.
TEST(RenderTokens, TrainSamplesReadable) {
  const std::string args =
      "train --layers 1 --dim 32 --heads 2 --seq 16 --batch 2 --steps 2 --peak-gflops 10 "
      "--sample-tokens 24 --eval-batches 1 --json ";
  RunResult r = run_strata(args + "--data synthetic:20000", "", Streams::separate);
  ASSERT_EQ(r.status, 0) << r.err;
  std::string sample;
  for (const nlohmann::json& j : json_lines(r.out))
    if (j.contains("sample")) sample = j["sample"];
  EXPECT_TRUE(std::regex_match(sample, std::regex("[0-9]+( [0-9]+)* \\| [0-9]+( [0-9]+)*")))
      << sample;

  TempDir dir("render");
  {
    std::ofstream f(dir.file("t.txt"));
    for (int i = 0; i < 2000; ++i) f << "caf\xc3\xa9\n";  // 6 bytes a line
  }
  r = run_strata(args + "--data " + (dir.file("t.txt")), "", Streams::separate);
  ASSERT_EQ(r.status, 0) << r.err;
  sample.clear();
  for (const nlohmann::json& j : json_lines(r.out))
    if (j.contains("sample")) sample = j["sample"];
  // The prompt is the first 8 bytes of the validation split, so it holds a whole "é": shown
  // as the character, not as \xc3\xa9.
  const std::string prompt = sample.substr(0, sample.find(" | "));
  EXPECT_NE(prompt.find("\xc3\xa9"), std::string::npos) << sample;
  EXPECT_NE(prompt.find("\\n"), std::string::npos) << sample;
}
