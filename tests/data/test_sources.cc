// Token sources: the synthetic corpus (exact entropy floor against the empirical one,
// determinism, independent streams), text and .bin files as one stream, splits, and every
// kind of bad file named with its numbers.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <tuple>

#include "core/error.h"
#include "core/rng.h"
#include "data/dataset.h"
#include "data/synthetic.h"
#include "data/token_file.h"
#include "support/temp_dir.h"

namespace strata::data {
namespace {

namespace fs = std::filesystem;

using test::TempDir;

std::vector<int32_t> read_all(const TokenSource& s) {
  std::vector<int32_t> v(size_t(s.size()));
  s.read(0, s.size(), v.data());
  return v;
}

// Expects `f` to throw an Error whose message contains every one of `parts`.
template <typename F>
void expect_error(F f, std::initializer_list<std::string> parts) {
  try {
    f();
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    for (const std::string& p : parts)
      EXPECT_NE(std::string(e.what()).find(p), std::string::npos)
          << "message lacks '" << p << "': " << e.what();
  }
}

TEST(Synthetic, EntropyFloorMatchesTheEmpiricalEntropyOfGeneratedText) {
  for (uint64_t seed : {0, 1234}) {
    MarkovChain chain(seed);
    // pi is stationary: pi P = pi.
    const int S = MarkovChain::kStates;
    ASSERT_EQ(int(chain.stationary().size()), S);
    std::vector<double> next(size_t(S), 0.0);
    double total = 0;
    for (int s = 0; s < S; ++s) {
      total += chain.stationary()[size_t(s)];
      for (int k = 0; k < MarkovChain::kSuccessors; ++k)
        next[size_t(chain.successors(s)[size_t(k)])] +=
            chain.stationary()[size_t(s)] * chain.probs(s)[size_t(k)];
    }
    EXPECT_NEAR(total, 1.0, 1e-12);
    for (int s = 0; s < S; ++s) EXPECT_NEAR(next[size_t(s)], chain.stationary()[size_t(s)], 1e-12);
    // Mean negative log-likelihood of 2M generated tokens under the true chain estimates the
    // entropy rate (standard error ~5e-4); the plug-in bigram entropy must agree too.
    std::vector<uint8_t> text = chain.generate(1 << 21, 99);
    double nll = 0;
    std::vector<double> pair(65536, 0), row(256, 0);
    for (size_t i = 1; i < text.size(); ++i) {
      nll -= chain.log_prob(text[i - 1], text[i]);
      pair[size_t(text[i - 1]) * 256 + text[i]]++;
      row[text[i - 1]]++;
    }
    const double n = double(text.size() - 1);
    nll /= n;
    double plug_in = 0;
    for (int a = 0; a < 256; ++a)
      for (int b = 0; b < 256; ++b) {
        double c = pair[size_t(a) * 256 + size_t(b)];
        if (c > 0) plug_in -= c / n * std::log(c / row[size_t(a)]);
      }
    EXPECT_NEAR(nll, chain.entropy_rate(), 3e-3) << "seed " << seed;
    EXPECT_NEAR(plug_in, chain.entropy_rate(), 3e-3) << "seed " << seed;
    EXPECT_GT(chain.entropy_rate(), 0.5);
    EXPECT_LT(chain.entropy_rate(), 2.0);
  }
}

// generate() batches its draws and walks by table; the path is the one a walk drawing
// Rng::uniform_double() once per token gives (draw 0: the first state from pi; draw i: the
// successor of token i - 1, the first k with draw < cdf[k]), at lengths around its batches.
TEST(Synthetic, GeneratedPathIsTheOneDrawAtATimeWalk) {
  for (uint64_t seed : {uint64_t(0), uint64_t(17), ~uint64_t(0)}) {
    const MarkovChain chain(seed);
    for (int64_t n : {1, 2, 3, 4096, 4097, 4098, 70001}) {
      Rng rng(seed, 0x5EED'7EA1'0000'0000ull);
      std::vector<uint8_t> want(static_cast<size_t>(n));
      double u = rng.uniform_double(), acc = 0;
      int state = MarkovChain::kStates - 1;
      for (int s = 0; s < MarkovChain::kStates; ++s)
        if (u < (acc += chain.stationary()[size_t(s)])) {
          state = s;
          break;
        }
      want[0] = uint8_t(MarkovChain::kFirstToken + state);
      for (int64_t i = 1; i < n; ++i) {
        const double v = rng.uniform_double();
        double cdf = 0;
        int k = 0;
        while (k < MarkovChain::kSuccessors - 1 && v >= (cdf += chain.probs(state)[size_t(k)])) ++k;
        state = chain.successors(state)[size_t(k)];
        want[size_t(i)] = uint8_t(MarkovChain::kFirstToken + state);
      }
      ASSERT_EQ(chain.generate(n, 0x5EED'7EA1'0000'0000ull), want) << "seed " << seed << ", " << n << " tokens";
    }
  }
}

TEST(Synthetic, DeterministicFromTheSeedWithIndependentValidationStream) {
  Split a = open_split("synthetic:20000", 3), b = open_split("synthetic:20000", 3),
        c = open_split("synthetic:20000", 4);
  EXPECT_EQ(read_all(*a.train), read_all(*b.train));
  EXPECT_EQ(read_all(*a.val), read_all(*b.val));
  EXPECT_NE(read_all(*a.train), read_all(*c.train));
  std::vector<int32_t> t = read_all(*a.train), v = read_all(*a.val);
  int same = 0;
  for (size_t i = 0; i < v.size(); ++i) same += t[i] == v[i];
  EXPECT_LT(same, int(v.size()) / 10);  // independent paths agree ~1/64 of the time
  EXPECT_EQ(a.train->entropy_floor(), a.val->entropy_floor());
  EXPECT_EQ(a.train->vocab(), 256);
  for (int32_t x : t)  // the states are the printable bytes 32 .. 95
    ASSERT_TRUE(x >= MarkovChain::kFirstToken &&
                x < MarkovChain::kFirstToken + MarkovChain::kStates);
  EXPECT_EQ(open_split("synthetic", 0).train->size(), kSyntheticTrainTokens);
}

TEST(Synthetic, BadSpecsAreRejected) {
  expect_error([] { open_split("synthetic:abc", 0); }, {"synthetic:abc"});
  expect_error([] { open_split("synthetic:0", 0); }, {"synthetic:0"});
  expect_error([] { open_split("synthetic", 0, 0.05, 100); }, {"256", "100"});
}

TEST(TokenFiles, TextIsOneTokenPerByteWithTheLastFractionHeldOut) {
  TempDir dir;
  std::string text;
  for (int i = 0; i < 1000; ++i) text += char(i % 200 + 20);
  std::ofstream(dir.file("a.txt"), std::ios::binary) << text;
  Split s = open_split(dir.file("a.txt"), 0, 0.1);
  EXPECT_EQ(s.train->size(), 900);
  EXPECT_EQ(s.val->size(), 100);
  EXPECT_EQ(s.train->vocab(), 256);
  std::vector<int32_t> all = read_all(*s.train), val = read_all(*s.val);
  all.insert(all.end(), val.begin(), val.end());
  for (int i = 0; i < 1000; ++i) ASSERT_EQ(all[size_t(i)], uint8_t(text[size_t(i)]));
  EXPECT_LT(s.train->entropy_floor(), 0);
}

TEST(TokenFiles, BinShardsInADirectoryOrGlobAreOneStream) {
  TempDir dir;
  std::vector<uint16_t> all;
  for (int shard = 0; shard < 3; ++shard) {
    std::vector<uint16_t> t;
    for (int i = 0; i < 100 + shard * 7; ++i) t.push_back(uint16_t((shard * 1000 + i * 13) % 50257));
    write_bin(dir.file("shard_" + std::to_string(shard) + ".bin"), t);
    all.insert(all.end(), t.begin(), t.end());
  }
  for (std::string spec : {dir.str(), dir.file("shard_*.bin")}) {
    Split s = open_split(spec, 0, 0.0);
    EXPECT_EQ(s.train->size(), int64_t(all.size()));
    EXPECT_EQ(s.val->size(), 0);
    EXPECT_EQ(s.train->vocab(), 50257);
    std::vector<int32_t> got = read_all(*s.train);
    for (size_t i = 0; i < all.size(); ++i) ASSERT_EQ(got[i], all[i]) << spec << " token " << i;
    // A read that spans all three shards.
    std::vector<int32_t> mid(250);
    s.train->read(50, 250, mid.data());
    for (size_t i = 0; i < mid.size(); ++i) ASSERT_EQ(mid[i], all[50 + i]);
    EXPECT_NE(s.train->describe().find("3 files"), std::string::npos) << s.train->describe();
  }
}

// Both of llm.c's widths written and read back id for id: uint16 as version 1, uint32 (ids
// past 65,535, Llama 3's vocabulary by default) as version 7, and the two in one stream.
TEST(TokenFiles, BothWidthsRoundTrip) {
  TempDir dir;
  std::vector<uint16_t> narrow;
  std::vector<uint32_t> wide;
  for (uint32_t i = 0; i < 1000; ++i) {
    narrow.push_back(uint16_t((i * 7919) % 65536));
    wide.push_back((i * 104729u) % 128256u);
  }
  wide.back() = 128255;  // the top id of a 128,256-token vocabulary
  write_bin(dir.file("a_16.bin"), narrow);
  write_bin(dir.file("b_32.bin"), wide);
  const std::string bytes16 = test::read_file(dir.file("a_16.bin")), bytes32 = test::read_file(dir.file("b_32.bin"));
  ASSERT_EQ(bytes16.size(), 1024u + 2 * 1000);
  ASSERT_EQ(bytes32.size(), 1024u + 4 * 1000);
  int32_t head[3];
  std::memcpy(head, bytes32.data(), sizeof head);
  EXPECT_EQ(head[0], 20240801);  // llm.c's dev/data/data_common.py, "llama-3"
  EXPECT_EQ(head[1], 7);
  EXPECT_EQ(head[2], 1000);
  std::memcpy(head, bytes16.data(), sizeof head);
  EXPECT_EQ(head[0], 20240520);
  EXPECT_EQ(head[1], 1);

  Split s32 = open_split(dir.file("b_32.bin"), 0, 0.0);
  EXPECT_EQ(s32.train->vocab(), kLlama3Vocab);
  const std::vector<int32_t> got32 = read_all(*s32.train);
  ASSERT_EQ(got32.size(), wide.size());
  for (size_t i = 0; i < wide.size(); ++i) ASSERT_EQ(uint32_t(got32[i]), wide[i]) << "token " << i;
  Split s16 = open_split(dir.file("a_16.bin"), 0, 0.0, 65536);
  const std::vector<int32_t> got16 = read_all(*s16.train);
  for (size_t i = 0; i < narrow.size(); ++i) ASSERT_EQ(got16[i], narrow[i]) << "token " << i;

  // A directory of both widths is one stream; a read crosses from one width to the other.
  Split both = open_split(dir.str(), 0, 0.0, 128256);
  ASSERT_EQ(both.train->size(), 2000);
  std::vector<int32_t> mid(10);
  both.train->read(995, 10, mid.data());
  for (int i = 0; i < 5; ++i) EXPECT_EQ(mid[size_t(i)], narrow[size_t(995 + i)]);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(uint32_t(mid[size_t(5 + i)]), wide[size_t(i)]);
}

// Bad uint32 files are named with their numbers as uint16 ones are.
TEST(TokenFiles, BadWideFilesAreNamedWithTheirNumbers) {
  TempDir dir;
  std::vector<uint32_t> tokens(100, 70000);
  tokens[42] = 128256;
  write_bin(dir.file("big.bin"), tokens);
  expect_error([&] { open_split(dir.file("big.bin"), 0, 0.0); },
               {"big.bin", "token id 128256", "offset 42", "byte 1192", "vocab 128256"});
  expect_error([&] { open_split(dir.file("big.bin"), 0, 0.0, 65536); }, {"big.bin", "token id 70000", "offset 0"});
  tokens[42] = 5;
  write_bin(dir.file("ok.bin"), tokens);
  fs::copy_file(dir.file("ok.bin"), dir.file("trunc.bin"));
  fs::resize_file(dir.file("trunc.bin"), 1024 + 4 * 100 - 2);  // half a token short
  expect_error([&] { open_split(dir.file("trunc.bin"), 0); },
               {"trunc.bin", "100 tokens", "1424 bytes", "1422 bytes", "truncated"});
  fs::copy_file(dir.file("ok.bin"), dir.file("long.bin"));
  fs::resize_file(dir.file("long.bin"), 1024 + 4 * 100 + 2);
  expect_error([&] { open_split(dir.file("long.bin"), 0); }, {"long.bin", "trailing"});
  // A uint16 count read as if it were uint32 (or the other way) does not match the size.
  {
    std::string bytes = test::read_file(dir.file("ok.bin"));
    int32_t v1[2] = {kBinMagic, kBinVersion};
    std::memcpy(bytes.data(), v1, sizeof v1);
    test::write_file(dir.file("as16.bin"), bytes);
  }
  expect_error([&] { open_split(dir.file("as16.bin"), 0); }, {"as16.bin", "1224 bytes", "1424 bytes", "trailing"});
  // Llama 3's magic with another version, and GPT-2's magic with Llama 3's version.
  for (const auto& [name, magic, version, expect] :
       {std::tuple{"v3.bin", kBin32Magic, 3, "expected 7: uint32 tokens"},
        std::tuple{"v7.bin", kBinMagic, 7, "expected 1: uint16 tokens"}}) {
    std::string bytes = test::read_file(dir.file("ok.bin"));
    const int32_t mv[2] = {magic, version};
    std::memcpy(bytes.data(), mv, sizeof mv);
    test::write_file(dir.file(name), bytes);
    expect_error([&] { open_split(dir.file(name), 0); },
                 {name, "unsupported version " + std::to_string(version), "magic " + std::to_string(magic), expect});
  }
}

TEST(TokenFiles, ValNamedShardsFormTheValidationSplit) {
  TempDir dir;
  write_bin(dir.file("corpus_train_000001.bin"), std::vector<uint16_t>(300, 7));
  write_bin(dir.file("corpus_train_000002.bin"), std::vector<uint16_t>(200, 8));
  write_bin(dir.file("corpus_val_000000.bin"), std::vector<uint16_t>(50, 9));
  Split s = open_split(dir.str(), 0, 0.5, 256);
  EXPECT_EQ(s.train->size(), 500);
  EXPECT_EQ(s.val->size(), 50);
  EXPECT_EQ(read_all(*s.val)[0], 9);
  EXPECT_EQ(s.train->vocab(), 256);
}

TEST(TokenFiles, BadFilesAreNamedWithTheirNumbers) {
  TempDir dir;
  std::vector<uint16_t> tokens(100, 5);
  tokens[42] = 300;
  write_bin(dir.file("big.bin"), tokens);
  expect_error([&] { open_split(dir.file("big.bin"), 0, 0.0, 256); },
               {"big.bin", "token id 300", "offset 42", "1108", "vocab 256"});
  EXPECT_NO_THROW(open_split(dir.file("big.bin"), 0, 0.0));  // GPT-2 vocab by default

  std::vector<uint16_t> ok(64, 1);
  write_bin(dir.file("ok.bin"), ok);
  fs::copy_file(dir.file("ok.bin"), dir.file("trunc.bin"));
  fs::resize_file(dir.file("trunc.bin"), 1024 + 2 * 64 - 3);
  expect_error([&] { open_split(dir.file("trunc.bin"), 0); },
               {"trunc.bin", "64 tokens", "1152 bytes", "1149 bytes", "truncated"});
  fs::copy_file(dir.file("ok.bin"), dir.file("long.bin"));
  fs::resize_file(dir.file("long.bin"), 1024 + 2 * 64 + 2);
  expect_error([&] { open_split(dir.file("long.bin"), 0); }, {"long.bin", "trailing"});

  {
    std::ofstream f(dir.file("magic.bin"), std::ios::binary);
    std::vector<int32_t> header(256, 0);
    header[0] = 12345;
    header[1] = 1;
    f.write(reinterpret_cast<const char*>(header.data()), 1024);
  }
  expect_error([&] { open_split(dir.file("magic.bin"), 0); }, {"magic.bin", "bad magic 12345"});
  {
    std::ofstream f(dir.file("v2.bin"), std::ios::binary);
    std::vector<int32_t> header(256, 0);
    header[0] = kBinMagic;
    header[1] = 2;
    f.write(reinterpret_cast<const char*>(header.data()), 1024);
  }
  expect_error([&] { open_split(dir.file("v2.bin"), 0); }, {"v2.bin", "version 2"});
  std::ofstream(dir.file("short.bin")) << "abc";
  expect_error([&] { open_split(dir.file("short.bin"), 0); }, {"short.bin", "3 bytes"});
  // One bad shard among good ones fails the whole directory, naming that shard.
  TempDir shards;
  write_bin(shards.file("a_000.bin"), ok);
  fs::copy_file(dir.file("trunc.bin"), shards.file("a_001.bin"));
  expect_error([&] { open_split(shards.str(), 0); }, {"a_001.bin", "truncated"});
  // Mixed formats, empty and missing inputs.
  std::ofstream(dir.file("x.txt")) << "hello";
  expect_error([&] { open_split(dir.str() + "/[xo]*", 0); }, {"mix formats"});
  std::ofstream(dir.file("empty.txt")).close();
  expect_error([&] { open_split(dir.file("empty.txt"), 0); }, {"empty.txt", "empty"});
  expect_error([&] { open_split(dir.file("missing.bin"), 0); }, {"missing.bin", "not found"});
  expect_error([&] { open_split(dir.file("nothing_*.bin"), 0); }, {"nothing_*.bin", "matches no"});
  TempDir empty;
  expect_error([&] { open_split(empty.str(), 0); }, {"no .bin"});
  expect_error([&] { open_split(dir.file("ok.bin"), 0, 1.5); }, {"1.5"});
}

}  // namespace
}  // namespace strata::data
