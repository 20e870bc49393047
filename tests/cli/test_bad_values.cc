// Values a person types wrong, refused before anything trains or is written, in one line that
// names the flag (or file and key) and shows the value as it was typed:
//   - every floating-point flag of every command, found from each command's --help, against
//     nan, inf, overflow, underflow and garbage (one parser, core/finite.h), and the same
//     values as TOML config keys;
//   - data mixtures, --init-from weights, preset/architecture conflicts, --inject kinds that
//     need a setting, --print-config, prepared-data manifests and `plan --config` of a train
//     config.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "cli/bad_input.h"
#include "nlohmann/json.hpp"

using nlohmann::json;
using namespace strata::bad_input;

namespace {

// Every command that has flags of its own (the registry's paths).
const std::vector<std::string> kCommands = {
    "train",       "plan",         "plan calibrate", "rlhf reward",  "rlhf ppo",    "rlhf generate",
    "rlhf grpo",   "rlhf rloo",    "rlhf dpo",
    "fed train",   "fed compare",  "data prepare",   "data plan",    "data info",   "data tokenizer-train",
    "ckpt advise", "ckpt export",  "bench comm",     "bench scaling", "doctor net", "launch",
    "privacy",     "pp schedule",  "trace merge",    "report"};

// The floating-point flags of `strata CMD`, as its --help lists them ("--lr FLOAT ...").
std::vector<std::string> float_flags(const std::string& cmd) {
  TempDir dir("help");
  const Outcome r = run(dir.str(), cmd + " --help");
  EXPECT_EQ(r.status, 0) << cmd << ": " << r.err;
  std::vector<std::string> flags;
  const std::regex option(R"(^\s+(?:-\w,)?(--[\w-]+)(?:,--[\w-]+)*\s+FLOAT)");
  std::istringstream in(r.out);
  for (std::string line; std::getline(in, line);) {
    std::smatch m;
    if (std::regex_search(line, m, option)) flags.push_back(m[1]);
  }
  return flags;
}

bool has_files(const std::string& dir) {
  if (!fs::exists(dir)) return false;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.is_regular_file()) return true;
  return false;
}

}  // namespace

// One parser for every floating-point flag: each value below is refused by every one of them,
// in one line naming the flag and the value as typed (1e-300 was "must be positive (got 0)",
// inf trained at ln V every step).
TEST(BadValues, EveryFloatFlagRefusesNonFiniteAndUnderflowByItsText) {
  const std::vector<std::pair<std::string, std::string>> values = {
      {"nan", "is not a number"}, {"inf", "is not finite"},         {"-inf", "is not finite"},
      {"1e400", "is not finite"}, {"1e39", "past 3.4e38"},          {"1e-300", "too close to 0"},
      {"-1e-45", "too close to 0"}, {"abc", "is not a number"},     {"1.5x", "is not a number"}};
  TempDir dir("floats");
  size_t checked = 0;
  std::set<std::string> seen;
  for (const std::string& cmd : kCommands)
    for (const std::string& flag : float_flags(cmd)) {
      seen.insert(flag);
      for (const auto& [v, why] : values) {
        SCOPED_TRACE(cmd + " " + flag + " " + v);
        // --flag=VALUE: a value that starts with '-' is read as the flag's.
        const Outcome r = run(dir.str(), cmd + " " + flag + "=" + v);
        expect_clean_failure(r, {flag, v});
        // number_in / finite_at_most keep their range wording; the reason is the parser's.
        EXPECT_NE(r.err.find(why), std::string::npos) << r.err;
        EXPECT_TRUE(r.out.empty()) << "it ran:\n" << r.out;
        ++checked;
      }
    }
  // The sweep reaches the flags of the defects and of several commands.
  for (const char* f : {"--norm-eps", "--rope-theta", "--lr", "--capacity-factor", "--temperature",
                        "--val-fraction", "--efficiency", "--noise-multiplier", "--prox-mu", "--beta"})
    EXPECT_TRUE(seen.count(f)) << f << " was not found among the FLOAT flags";
  EXPECT_GT(checked, 300u);
}

// A range is judged on the value and reported with the text typed: "1e-300" never becomes "0".
TEST(BadValues, RangesShowTheValueAsTyped) {
  run_cases({
      {"norm_eps_zero", kTrain + "--arch llama --norm-eps 0.0e0", {"--norm-eps", "0.0e0", "positive"}},
      {"rope_theta_neg", kTrain + "--arch llama --rope-theta -1e4", {"--rope-theta", "-1e4", "positive"}},
      {"min_lr_neg", kTrain + "--min-lr -0.0001", {"--min-lr", "-0.0001", ">= 0"}},
      {"capacity_zero", kTrain + "--experts 4 --capacity-factor 0.000", {"--capacity-factor", "0.000"}},
      // 0 is refused like 0.5: "none" is the one spelling of no scaling.
      {"rope_scaling_zero", kTrain + "--arch llama --rope-scaling 0", {"--rope-scaling 0", "FACTOR 0", "none"}},
      {"rope_scaling_half", kTrain + "--arch llama --rope-scaling 0.5", {"--rope-scaling 0.5", "FACTOR 0.5"}},
      {"rope_scaling_inf", kTrain + "--arch llama --rope-scaling 8,1,inf,8192", {"--rope-scaling", "HIGH inf"}},
      {"rope_scaling_tiny", kTrain + "--arch llama --rope-scaling 8,1e-300,4,8192",
       {"--rope-scaling", "LOW 1e-300", "too close to 0"}},
      {"inject_sleep_nan", kTrain + "--inject sleep:nan", {"--inject sleep:nan", "SECONDS nan"}},
      {"partition_tiny", "fed train --clients 4 --partition dirichlet:1e-300", {"--partition", "1e-300"}},
      // Environment knobs read their numbers the same way.
      {"env_timeout_tiny", kTrain, {"STRATA_TIMEOUT", "1e-300", "too close to 0"}, nullptr, "STRATA_TIMEOUT=1e-300"},
  });
}

// Config keys reach the same parser with the text as written in the file.
TEST(BadValues, ConfigKeysRefuseNonFiniteByTheirText) {
  const std::vector<std::pair<std::string, std::vector<std::string>>> cases = {
      {"[model]\narch = \"llama\"\nnorm-eps = 1e-300\n", {"line 3: key 'norm-eps'", "1e-300", "too close to 0"}},
      {"[model]\narch = \"llama\"\nrope-theta = inf\n", {"line 3: key 'rope-theta'", "inf is not finite"}},
      {"[optimizer]\nlr = nan\n", {"line 2: key 'lr'", "nan is not a number"}},
      {"[optimizer]\nlr = 1e39\n", {"line 2: key 'lr'", "1e39"}},
      {"[optimizer]\nlr = 1e400\n", {"line 2", "1e400"}},  // toml++ refuses it itself
  };
  for (const auto& [text, needles] : cases) {
    SCOPED_TRACE(text);
    TempDir dir("toml");
    std::ofstream(dir.str() + "/c.toml") << text;
    std::vector<std::string> all = needles;
    all.push_back(dir.str() + "/c.toml");
    const Outcome r = run(dir.str(), kTrain + "--config $D/c.toml --run-dir $D/run");
    expect_clean_failure(r, all);
    EXPECT_FALSE(has_files(dir.str() + "/run"));
  }
  // A value typed in range reads back the same.
  TempDir dir("toml_ok");
  std::ofstream(dir.str() + "/c.toml") << "[model]\narch = \"llama\"\nnorm-eps = 1_0e-6\n";
  const Outcome ok = run(dir.str(), kTrain + "--config $D/c.toml --print-config");
  EXPECT_EQ(ok.status, 0) << ok.err;
  EXPECT_NE(ok.out.find("norm-eps = 1e-05\n"), std::string::npos) << ok.out;
}

// Mixture specs: weights through the same parser, parts and commas checked as a whole; no
// bad_alloc or vector::_M_default_append.
TEST(BadValues, DataMixtures) {
  const auto files = [](const std::string& d) {
    for (const char* f : {"/a.txt", "/b.txt"}) {
      std::ofstream o(d + f);
      for (int i = 0; i < 400; ++i) o << "the quick brown fox jumps over the lazy dog " << i << "\n";
    }
  };
  const std::vector<std::pair<std::string, std::vector<std::string>>> specs = {
      {"$D/a.txt:1e308,$D/b.txt:1e308", {"weight '1e308'", "past 3.4e38"}},
      {"$D/a.txt:1e-320,$D/b.txt:1", {"weight '1e-320'", "too close to 0"}},
      {"$D/a.txt:inf,$D/b.txt:1", {"weight 'inf'", "not finite"}},
      {"synthetic,$D/a.txt:1", {"synthetic", "mixture cannot hold"}},
      {"synthetic:5000:1,$D/a.txt:1", {"mixture cannot hold"}},
      {"$D/a.txt:1,$D/b.txt:1,", {"entry 3 of 3 is empty"}},
      {",$D/a.txt:1,$D/b.txt:1", {"entry 1 of 3 is empty"}},
      {"$D/a.txt:1,,$D/b.txt:1", {"entry 2 of 3 is empty"}},
  };
  for (const auto& [spec, needles] : specs)
    for (const std::string& cmd : {std::string("data info"), kTrain + "--run-dir $D/run"}) {
      SCOPED_TRACE(cmd + " --data " + spec);
      TempDir dir("mixture");
      files(dir.str());
      std::vector<std::string> all = needles;
      all.push_back("--data");
      expect_clean_failure(run(dir.str(), cmd + " --data " + spec), all);
      EXPECT_FALSE(fs::exists(dir.str() + "/run")) << "the run dir was written";
    }
  // Weights 1e-30 and 1e30 are finite: the mixture is built (the small part's share is tiny).
  TempDir dir("mix_ratio");
  files(dir.str());
  const Outcome r = run(dir.str(), "data info --data $D/a.txt:1e-30,$D/b.txt:1e30");
  EXPECT_EQ(r.status, 0) << r.err;
}

// --init-from weights holding a NaN or an infinity are refused at load, by tensor and element,
// before any rank starts or anything is written.
TEST(BadValues, InitFromNonFiniteWeights) {
  const std::string& run_dir = checkpointed_run();
  TempDir dir("nan_init");
  const std::string hf = dir.str() + "/hf";
  const Outcome ex = run(dir.str(), "ckpt export " + run_dir + " --hf " + hf);
  ASSERT_EQ(ex.status, 0) << ex.err;
  const std::string file = hf + "/model.safetensors";
  std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
  uint64_t n = 0;
  f.read(reinterpret_cast<char*>(&n), 8);
  std::string header(n, '\0');
  f.read(header.data(), std::streamsize(n));
  // The tensor whose data comes first.
  const json h = json::parse(header);
  std::string first;
  int64_t begin = -1;
  for (const auto& [name, t] : h.items())
    if (name != "__metadata__" && (begin < 0 || t["data_offsets"][0].get<int64_t>() < begin))
      first = name, begin = t["data_offsets"][0].get<int64_t>();
  ASSERT_EQ(h[first]["dtype"], "F32");
  for (const float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
    SCOPED_TRACE(bad);
    f.seekp(std::streamoff(8 + n + begin + 17 * 4));
    f.write(reinterpret_cast<const char*>(&bad), 4);
    f.flush();
    for (const char* extra : {"", "--nproc 2 "}) {
      SCOPED_TRACE(extra);
      const std::string train = "train --init-from " + hf + " --seq 16 --batch 2 --steps 2 --peak-gflops 10 "
                                "--sample-tokens 0 --eval-batches 1 --data synthetic:20000 --run-dir $D/run " + extra;
      const Outcome r = run(dir.str(), train);
      expect_clean_failure(r, {"--init-from", "tensor " + first, std::isnan(bad) ? "a NaN" : "an infinity",
                               "element 17"});
      EXPECT_FALSE(has_files(dir.str() + "/run/ckpt"));
      EXPECT_FALSE(fs::exists(dir.str() + "/run/metrics.jsonl"));
    }
  }
}

// Conflicts named by what was typed; --inject kinds that need a setting refused before any
// rank starts (no per-rank lines, no flight dumps); --print-config validates before printing.
TEST(BadValues, ConflictsInjectAndPrintConfig) {
  run_cases({
      {"llama_preset_gpt2", "train --model llama-tiny --arch gpt2 --steps 1",
       {"--arch gpt2", "--model llama-tiny", "llama model"}},
      {"kill_save_no_ckpt", kTrain + "--nproc 2 --inject kill-during-save --run-dir $D/run",
       {"--inject kill-during-save", "--ckpt-every"}},
      {"kill_mem_commit", kTrain + "--nproc 2 --inject kill-during-mem-commit --run-dir $D/run",
       {"--inject kill-during-mem-commit", "--mem-ckpt-every"}},
      {"corrupt_mem", kTrain + "--inject corrupt-mem-ckpt --run-dir $D/run", {"--inject corrupt-mem-ckpt",
                                                                           "--mem-ckpt-every"}},
      {"print_bad_ckpt", kTrain + "--ckpt-every 2 --print-config", {"--ckpt-every", "--run-dir"}},
      {"print_bad_kv", "train --model llama-tiny --kv-heads 3 --print-config", {"--kv-heads 3"}},
      {"print_bad_plan", "plan --layers 2 --dim 64 --heads 4 --print-config", {"--seq"}},
      {"print_bad_local", "plan --local --layers 4 --dim 64 --heads 4 --experts 4 --moe-every 5 --print-config",
       {"--moe-every 5"}},
      {"print_bad_fed", "fed train --clients 2 --per-round 3 --print-config", {"--per-round"}},
  });
  const Outcome llama = run("/tmp", "train --model llama-tiny --arch gpt2 --steps 1");
  EXPECT_EQ(llama.err.find("--kv-heads"), std::string::npos) << llama.err;
  TempDir dir("inject_dumps");
  const Outcome r = run(dir.str(), kTrain + "--nproc 2 --inject kill-during-save --run-dir $D/run");
  EXPECT_GT(r.status, 0);
  if (fs::exists(dir.str() + "/run")) {
    for (const auto& e : fs::directory_iterator(dir.str() + "/run"))
      EXPECT_EQ(e.path().filename().string().find("flight"), std::string::npos) << e.path();
  }
  EXPECT_FALSE(fs::exists(dir.str() + "/run/metrics.jsonl"));
}

// A prepared directory's manifest with a field out of range is refused by `data info` and
// `train` alike, naming the field.
TEST(BadValues, PreparedManifestFields) {
  TempDir base("prepared");
  {
    std::ofstream o(base.str() + "/docs.txt");
    for (int i = 0; i < 300; ++i) o << "a line of words number " << i << " for the tokenizer\n";
  }
  ASSERT_EQ(run(base.str(), "data tokenizer-train $D/docs.txt -o $D/tok --vocab-size 300").status, 0);
  const Outcome prep =
      run(base.str(), "data prepare $D/docs.txt --tokenizer $D/tok -o $D/good --doc-split line --val-docs 20");
  ASSERT_EQ(prep.status, 0) << prep.err;
  const json good = json::parse(read_file(base.str() + "/good/manifest.json"));
  struct Bad {
    std::string name;
    std::function<void(json&)> edit;
    std::vector<std::string> needles;
  };
  const std::vector<Bad> bad = {
      {"split_test", [](json& m) { m["shards"][0]["split"] = "test"; }, {"\"split\" \"test\"", "train", "val"}},
      {"vocab_neg", [](json& m) { m["tokenizer"]["vocab"] = -1; }, {"\"vocab\" is -1"}},
      {"doc_token_big", [](json& m) { m["tokenizer"]["document_token"] = 300; }, {"\"document_token\" is 300"}},
      {"tokens_neg", [](json& m) { m["shards"][0]["tokens"] = -5; }, {"\"tokens\" -5"}},
  };
  for (const Bad& b : bad)
    for (const std::string& cmd : {std::string("data info --data $D/p"), kTrain + "--data $D/p --run-dir $D/run"}) {
      SCOPED_TRACE(b.name + ": " + cmd);
      TempDir dir(b.name);
      fs::copy(base.str() + "/good", dir.str() + "/p", fs::copy_options::recursive);
      json m = good;
      b.edit(m);
      std::ofstream(dir.str() + "/p/manifest.json") << m.dump(2);
      std::vector<std::string> needles = b.needles;
      needles.push_back("manifest.json");
      expect_clean_failure(run(dir.str(), cmd), needles);
      EXPECT_FALSE(fs::exists(dir.str() + "/run")) << "the run dir was written";
    }
}

// `plan --config` of a config `strata train --print-config` wrote plans the model it trains;
// --dim and --arch gpt2 are train's names for --hidden and --arch gpt.
TEST(BadValues, PlanReadsATrainConfig) {
  TempDir dir("plan_config");
  const Outcome cfg = run(dir.str(), "train --model llama-tiny --layers 3 --dim 128 --heads 4 --batch 8 --print-config");
  ASSERT_EQ(cfg.status, 0) << cfg.err;
  std::ofstream(dir.str() + "/run.toml") << cfg.out;
  const Outcome from_config = run(dir.str(), "plan --config $D/run.toml --json");
  ASSERT_EQ(from_config.status == 0 || from_config.status == 3, true) << from_config.err;
  const json p = json::parse(from_config.out);
  const std::string text = p.dump();
  EXPECT_NE(text.find("\"layers\":3"), std::string::npos) << text.substr(0, 2000);
  EXPECT_NE(text.find("\"hidden\":128"), std::string::npos) << text.substr(0, 2000);
  // The old and the new spellings plan the same model.
  const std::string shape = "--layers 2 --heads 4 --seq 64 --vocab 512 --global-batch 8 --json ";
  const Outcome a = run(dir.str(), "plan " + shape + "--hidden 64 --arch gpt");
  const Outcome b = run(dir.str(), "plan " + shape + "--dim 64 --arch gpt2");
  ASSERT_TRUE(a.status == 0 || a.status == 3) << a.err;
  EXPECT_EQ(a.status, b.status) << b.err;
  EXPECT_EQ(a.out, b.out);
  std::ofstream(dir.str() + "/dim.toml") << "[model]\nlayers = 2\ndim = 64\nheads = 4\nvocab = 512\narch = \"gpt2\"\n"
                                            "[training]\nseq = 64\nbatch = 8\n";
  const Outcome c = run(dir.str(), "plan --config $D/dim.toml --json");
  EXPECT_EQ(c.out, a.out) << c.err;
}
