// `strata train --init-from DIR` and `strata ckpt export --hf` as a user runs them: a Hugging
// Face Llama directory (the parity fixture of 2 key/value heads for 4 query heads, F16,
// sharded) loaded into one process, tp 2, pp 2, ZeRO 3, cp 2 and bf16, and exported again, element
// for element; bad directories and contradicting flags refused in one line before any step,
// with nothing saved touched.
//
// To see the parameters a layout holds right after the import, each run trains one step at
// --lr 1e-30: AdamW's first update is lr x (about 1) per element, far below half an ulp of
// weights of order 0.01-1 (and of their weight decay), so every fp32 weight the checkpoint of
// step 1 saves is the imported one, bit for bit (the fixture has no zero weight, whose update
// would show; padding rows get no gradient and stay zero).
#include <algorithm>
#include <cstring>

#include "ckpt/safetensors.h"
#include "helpers.h"
#include "support/run.h"

using namespace ckpt_test;

namespace test_hf_cli {  // its own names in a unity build
namespace {

using strata::test::run_strata;

const std::string kFixture = std::string(STRATA_SOURCE_DIR) + "/tests/model/fixtures/hf/llama-kv2";

bool has(const std::string& s, const std::string& needle) {
  return s.find(needle) != std::string::npos;
}

// Every tensor of a Hugging Face directory (one file or shards) as fp32, by name.
std::map<std::string, std::vector<float>> tensors_of(const std::string& dir) {
  std::map<std::string, std::vector<float>> out;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().extension() != ".safetensors") continue;
    const SafetensorsFile f = read_safetensors(e.path().string());
    for (const SafetensorsTensor& t : f.tensors) out[t.name] = read_tensor_f32(f, t);
  }
  return out;
}

// An llm.c token file (256 int32 header words: magic, version, count; then uint16 tokens) of
// ids below the fixture's vocabulary of 50, in `tmp`; returns its path.
std::string token_file(const TempDir& tmp) {
  std::vector<int32_t> header(256, 0);
  header[0] = 20240520, header[1] = 1, header[2] = 4000;
  std::string bytes(reinterpret_cast<const char*>(header.data()), header.size() * 4);
  for (int i = 0; i < 4000; ++i) {
    const uint16_t t = uint16_t((i * 37 + i / 7) % 50);
    bytes.append(reinterpret_cast<const char*>(&t), 2);
  }
  const std::string path = tmp.str() + "/tokens.bin";
  std::ofstream(path, std::ios::binary) << bytes;
  return path;
}

std::string train_args(const std::string& run, const std::string& from = kFixture) {
  const std::string data = fs::path(run).parent_path().string() + "/tokens.bin";
  return "train --init-from " + from + " --data " + data +
         " --seq 16 --batch 4 --steps 1 --lr 1e-30 "
         "--ckpt-every 1 --eval-every 0 --eval-batches 1 --sample-tokens 0 --threads 1 --run-dir " +
         run;
}

}  // namespace

TEST(CkptHfCli, InitFromThenExportIsExactInEveryLayout) {
  const std::map<std::string, std::vector<float>> want = tensors_of(kFixture);
  ASSERT_EQ(want.size(), 2u + 9 * 2 + 1);
  for (const char* layout :
       {"", "--nproc 2 --tp 2", "--nproc 2 --pp 2", "--nproc 2 --zero 3", "--nproc 2 --cp 2",
        "--precision bf16"}) {
    TempDir tmp;
    token_file(tmp);
    const std::string run = tmp.str() + "/run", out = tmp.str() + "/hf";
    const auto t = run_strata(train_args(run) + " " + layout);
    ASSERT_EQ(t.status, 0) << layout << "\n" << t.out;
    EXPECT_TRUE(has(t.out, "initialised from " + kFixture +
                               ": Hugging Face LlamaForCausalLM, 21 tensors (F16)"))
        << t.out;
    const auto x = run_strata("ckpt export " + run + " --hf " + out);
    ASSERT_EQ(x.status, 0) << layout << "\n" << x.out;
    EXPECT_TRUE(has(x.out, "Hugging Face LlamaForCausalLM, 21 tensors")) << x.out;
    const nlohmann::json c = nlohmann::json::parse(test::read_file(out + "/config.json"));
    const nlohmann::json fixture =
        nlohmann::json::parse(test::read_file(kFixture + "/config.json"));
    for (const char* key : {"hidden_size", "intermediate_size", "num_hidden_layers",
                            "num_attention_heads", "num_key_value_heads", "max_position_embeddings",
                            "rms_norm_eps", "rope_theta", "vocab_size", "tie_word_embeddings"})
      EXPECT_EQ(c.at(key), fixture.at(key)) << layout << " " << key;
    EXPECT_EQ(c.at("torch_dtype"), "float32");
    const std::map<std::string, std::vector<float>> got = tensors_of(out);
    ASSERT_EQ(got.size(), want.size()) << layout;
    for (const auto& [name, values] : want) {
      ASSERT_TRUE(got.count(name)) << layout << " " << name;
      ASSERT_EQ(got.at(name).size(), values.size()) << layout << " " << name;
      EXPECT_EQ(std::memcmp(got.at(name).data(), values.data(), values.size() * 4), 0)
          << layout << " " << name;
    }
  }
}

TEST(CkptHfCli, ExportThenImportGivesTheSameFile) {
  TempDir tmp;
  token_file(tmp);
  const std::string run = tmp.str() + "/run", first = tmp.str() + "/hf1";
  ASSERT_EQ(run_strata(train_args(run) + " --nproc 2 --tp 2").status, 0);
  ASSERT_EQ(run_strata("ckpt export " + run + " --hf " + first).status, 0);
  // The F32 export as the starting point of a one-process run, exported again: the same bytes.
  const std::string again = tmp.str() + "/run2", second = tmp.str() + "/hf2";
  const auto t = run_strata(train_args(again, first));
  ASSERT_EQ(t.status, 0) << t.out;
  EXPECT_TRUE(has(t.out, "21 tensors (F32)")) << t.out;
  ASSERT_EQ(run_strata("ckpt export " + again + " --hf " + second).status, 0);
  for (const char* f : {"config.json", "model.safetensors"})
    EXPECT_EQ(test::read_file(first + "/" + f), test::read_file(second + "/" + f)) << f;
}

// Llama 3.1's rope_scaling in and out: imported with the model (under tp 2 as in one process),
// written back as Hugging Face writes it, and the export imported again gives the same files;
// a flag contradicting it, and bad values, are one line.
TEST(CkptHfCli, RopeScalingRoundTrips) {
  const std::string fixture = std::string(STRATA_SOURCE_DIR) + "/tests/model/fixtures/hf/llama-rope3";
  TempDir tmp;
  token_file(tmp);
  const std::string run = tmp.str() + "/run", first = tmp.str() + "/hf1";
  const auto t = run_strata(train_args(run, fixture) + " --nproc 2 --tp 2");
  ASSERT_EQ(t.status, 0) << t.out;
  ASSERT_EQ(run_strata("ckpt export " + run + " --hf " + first).status, 0);
  const nlohmann::json c = nlohmann::json::parse(test::read_file(first + "/config.json"));
  const nlohmann::json want = nlohmann::json::parse(test::read_file(fixture + "/config.json"));
  EXPECT_EQ(c.at("rope_scaling"), want.at("rope_scaling")) << c.dump();
  const std::string again = tmp.str() + "/run2", second = tmp.str() + "/hf2";
  ASSERT_EQ(run_strata(train_args(again, first)).status, 0);
  ASSERT_EQ(run_strata("ckpt export " + again + " --hf " + second).status, 0);
  for (const char* f : {"config.json", "model.safetensors"})
    EXPECT_EQ(test::read_file(first + "/" + f), test::read_file(second + "/" + f)) << f;
  const std::pair<std::string, std::string> bad[] = {
      {train_args(tmp.str() + "/r3", fixture) + " --rope-scaling none",
       "--rope-scaling none contradicts " + fixture + "/config.json's rope_scaling"},
      {"train --model llama-tiny --steps 1 --rope-scaling 0.5", "--rope-scaling 0.5: FACTOR 0.5 is not >= 1"},
      {"train --model llama-tiny --steps 1 --rope-scaling 8,x", "--rope-scaling 8,x: expected none, FACTOR or"},
      {"train --model tiny --steps 1 --rope-scaling 8", "--rope-scaling needs Llama blocks"},
  };
  for (const auto& [args, line] : bad) {
    const auto r = run_strata(args, "", test::Streams::separate);
    EXPECT_NE(r.status, 0) << args;
    EXPECT_TRUE(has(r.err, line)) << args << "\n" << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << args << "\n" << r.err;
  }
}

TEST(CkptHfCli, BadDirectoriesAndContradictingFlagsStopBeforeAnyStep) {
  TempDir tmp;
  const std::string data = token_file(tmp), run = tmp.str() + "/run";
  ASSERT_EQ(run_strata(train_args(run) + " --steps 2 --ckpt-every 2").status, 0);
  auto snapshot = [&] {
    std::map<std::string, std::string> files;
    for (const auto& e : fs::recursive_directory_iterator(run))
      if (e.is_regular_file()) files[e.path().string()] = test::read_file(e.path().string());
    return files;
  };
  const auto before = snapshot();
  auto refused = [&](const std::string& args, const std::string& needle, long lines = 1) {
    const auto r =
        run_strata(args + " --resume auto --steps 4", "", strata::test::Streams::separate);
    EXPECT_EQ(r.status, 1) << args << "\n" << r.out << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), lines)
        << r.err;  // one line per problem
    EXPECT_TRUE(has(r.err, needle)) << r.err;
    EXPECT_FALSE(has(r.out, "step ")) << r.out;
    EXPECT_TRUE(snapshot() == before) << args;
  };
  refused(train_args(run) + " --dim 32",
          "--dim 32 contradicts " + kFixture + "/config.json's hidden_size 24");
  refused(train_args(run) + " --kv-heads 4",
          "--kv-heads 4 contradicts " + kFixture + "/config.json's num_key_value_heads 2");
  refused(train_args(run) + " --model llama-tiny",
          "--model llama-tiny: with --init-from the model is the one");

  // A copy of the fixture with rope scaling; one with a config of 1 key/value head; one whose
  // second shard is cut short; one whose index names a shard that is not there.
  auto variant = [&](const std::string& name, const std::function<void(const std::string&)>& edit) {
    const std::string dir = tmp.str() + "/" + name;
    fs::copy(kFixture, dir);
    edit(dir);
    return dir;
  };
  auto set_config = [](const std::string& dir, const char* key, nlohmann::json value) {
    nlohmann::json c = nlohmann::json::parse(test::read_file(dir + "/config.json"));
    c[key] = value;
    std::ofstream(dir + "/config.json", std::ios::trunc) << c.dump();
  };
  const std::string scaled = variant("scaled", [&](const std::string& d) {
    set_config(d, "rope_scaling", {{"type", "linear"}, {"factor", 2.0}});
  });
  refused(
      "train --init-from " + scaled + " --data " + data + " --seq 16 --batch 4 --run-dir " + run,
      "rope_scaling {\"factor\":2.0,\"type\":\"linear\"}: strata's RoPE scales frequencies only as "
      "Llama 3.1's rope_type \"llama3\"");
  const std::string mqa =
      variant("mqa", [&](const std::string& d) { set_config(d, "num_key_value_heads", 1); });
  refused("train --init-from " + mqa + " --data " + data + " --seq 16 --batch 4 --run-dir " + run,
          "'model.layers.0.self_attn.k_proj.weight' is (12,24), expected (6,24)",
          4);  // k, v of 2 layers
  const std::string cut = variant("cut", [&](const std::string& d) {
    const std::string f = d + "/model-00002-of-00002.safetensors";
    fs::resize_file(f, fs::file_size(f) - 2);
  });
  refused("train --init-from " + cut + " --data " + data + " --seq 16 --batch 4 --run-dir " + run,
          "outside the data section");
  const std::string lost = variant(
      "lost", [&](const std::string& d) { fs::remove(d + "/model-00001-of-00002.safetensors"); });
  refused("train --init-from " + lost + " --data " + data + " --seq 16 --batch 4 --run-dir " + run,
          "names model-00001-of-00002.safetensors");
}

}  // namespace test_hf_cli
