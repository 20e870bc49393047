// TOML run configs: a config run equals the same flags bit for bit, the run dir's config.toml
// runs it again, --print-config reads back to itself, the command line wins, one file can hold
// another command's section, and every defect names the file, line and key.
#include <gtest/gtest.h>

#include <algorithm>
#include <regex>
#include <string>
#include <vector>

#include "support/run.h"
#include "support/temp_dir.h"

namespace strata {
namespace {

using test::run_strata;
using test::TempDir;
using test::write_file;

// The losses of a run dir's metrics.jsonl, as written (17 digits).
std::vector<std::string> losses(const std::string& run_dir) {
  std::vector<std::string> out;
  const std::string text = test::read_file(run_dir + "/metrics.jsonl");
  const std::regex rec(R"re("loss":([-0-9.e+]+))re");
  for (auto it = std::sregex_iterator(text.begin(), text.end(), rec); it != std::sregex_iterator(); ++it)
    out.push_back((*it)[1].str());
  return out;
}

const char* kRun = R"([model]
model = "tiny"
[training]
steps = 3
seq = 32
batch = 4
eval-every = 0
sample-tokens = 0
[optimizer]
lr = 3e-4
[parallelism]
nproc = 2
zero = 1
[plan]
gpus = 8
)";

TEST(RunConfig, ConfigFlagsAndTheRunDirsCopyGiveTheSameLosses) {
  TempDir dir;
  write_file(dir.file("run.toml"), kRun);
  auto a = run_strata("train --config " + dir.file("run.toml") + " --run-dir " + dir.file("a"));
  ASSERT_EQ(a.status, 0) << a.out;
  auto b = run_strata("train --model tiny --steps 3 --seq 32 --batch 4 --eval-every 0 --sample-tokens 0 --lr 3e-4 "
                      "--nproc 2 --zero 1 --run-dir " + dir.file("b"));
  ASSERT_EQ(b.status, 0) << b.out;
  ASSERT_EQ(losses(dir.file("a")).size(), 3u);
  EXPECT_EQ(losses(dir.file("a")), losses(dir.file("b")));
  // The run dir keeps the resolved config; run again from it (into another dir).
  auto c = run_strata("train --config " + dir.file("a/config.toml") + " --run-dir " + dir.file("c"));
  ASSERT_EQ(c.status, 0) << c.out;
  EXPECT_EQ(losses(dir.file("c")), losses(dir.file("a")));
}

TEST(RunConfig, PrintConfigReadsBackToItselfAndTheCommandLineWins) {
  TempDir dir;
  write_file(dir.file("run.toml"), kRun);
  auto p1 = run_strata("train --config " + dir.file("run.toml") + " --steps 7 --print-config", "",
                       test::Streams::separate);
  ASSERT_EQ(p1.status, 0) << p1.out << p1.err;
  EXPECT_NE(p1.out.find("\n[training]\nseq = 32\nsteps = 7\n"), std::string::npos) << p1.out;  // the flag won
  EXPECT_NE(p1.out.find("lr = 3e-04\n"), std::string::npos) << p1.out;  // shortest, valid TOML
  EXPECT_NE(p1.out.find("# seed = 1\n"), std::string::npos) << p1.out;  // unset: its default, commented
  write_file(dir.file("p1.toml"), p1.out);
  auto p2 = run_strata("train --config " + dir.file("p1.toml") + " --print-config", "", test::Streams::separate);
  ASSERT_EQ(p2.status, 0) << p2.err;
  EXPECT_EQ(p2.out, p1.out);
  // A later file wins over an earlier one.
  write_file(dir.file("more.toml"), "[training]\nsteps = 9\n");
  auto p3 = run_strata("train --config " + dir.file("run.toml") + " --config " + dir.file("more.toml") +
                           " --print-config",
                       "", test::Streams::separate);
  EXPECT_NE(p3.out.find("steps = 9\n"), std::string::npos) << p3.out;
}

// One file for several commands: each reads the sections and keys that apply to it, and keys
// that mean something else to it (PPO's --top-k samples tokens; train's routes to experts)
// come only from its own section. Each printout is checked first, so the file describes a run
// of every command (plan reads train's dim and batch as its hidden and global batch).
TEST(RunConfig, OneFileFeedsTrainPlanPpoAndFed) {
  TempDir dir;
  write_file(dir.file("all.toml"), R"([model]
layers = 2
dim = 64
heads = 4
vocab = 512
top-k = 1
[training]
seq = 32
batch = 8
seed = 5
[metrics]
run-dir = "run"
[optimizer]
grad-clip = 0.5
[parallelism]
zero = 1
[checkpoint]
resume = "auto"
[plan]
gpus = 8
[ppo]
actor = "a"
reward = "r"
top-k = 8
[fed]
clients = 3
per-round = 2
)");
  auto print = [&](const std::string& cmd) {
    auto r = run_strata(cmd + " --config " + dir.file("all.toml") + " --print-config", "", test::Streams::separate);
    EXPECT_EQ(r.status, 0) << cmd << ": " << r.err;
    return r.out;
  };
  const std::string train = print("train"), plan = print("plan"), ppo = print("rlhf ppo"), fed = print("fed train");
  EXPECT_NE(train.find("\ntop-k = 1\n"), std::string::npos) << train;
  EXPECT_NE(train.find("resume = \"auto\"\n"), std::string::npos) << train;
  EXPECT_EQ(train.find("gpus"), std::string::npos) << train;
  EXPECT_NE(plan.find("gpus = 8\n"), std::string::npos) << plan;
  EXPECT_NE(plan.find("\nlayers = 2\n"), std::string::npos) << plan;
  EXPECT_NE(ppo.find("[ppo]\nactor = \"a\"\n"), std::string::npos) << ppo;
  EXPECT_NE(ppo.find("top-k = 8\n"), std::string::npos) << ppo;
  EXPECT_EQ(ppo.find("top-k = 1"), std::string::npos) << ppo;
  EXPECT_NE(ppo.find("grad-clip = 0.5\n"), std::string::npos) << ppo;
  EXPECT_NE(ppo.find("\n# seed = "), std::string::npos) << ppo;  // train's [training] seed is not PPO's
  EXPECT_NE(fed.find("clients = 3\n"), std::string::npos) << fed;
  EXPECT_NE(fed.find("\nlayers = 2\n"), std::string::npos) << fed;
  // A flag the command requires may come from the file; missing from both, it is named.
  write_file(dir.file("none.toml"), "[ppo]\niterations = 2\n");
  auto r = run_strata("rlhf ppo --config " + dir.file("none.toml"));
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.out.find("--actor is required"), std::string::npos) << r.out;
}

TEST(RunConfig, DefectsNameTheFileLineAndKey) {
  TempDir dir;
  const std::pair<std::string, std::string> cases[] = {
      {"[model]\nmodle = \"tiny\"\n", "line 2: key 'modle' in [model] is not a flag of this command"},
      {"[training]\nsteps = \"3\"\n", "line 2: key 'steps' must be an integer (got a string)"},
      {"[training]\nsteps = 2.5\n", "line 2: key 'steps' must be an integer (got a float)"},
      {"[optimizer]\nlr = \"x\"\n", "line 2: key 'lr' must be a number (got a string)"},
      {"[metrics]\njson = 1\n", "line 2: key 'json' is a switch: true or false (got an integer)"},
      {"[model]\nsteps = 3\n", "line 2: key 'steps' belongs in [training], not [model]"},
      {"[model\nsteps = 3\n", "line 1: not TOML"},
      {"steps = 3\n", "line 1: key 'steps' is outside a section (put it under [training])"},
      {"[foo]\nsteps = 3\n", "line 1: unknown section [foo]"},
      {"[training]\nsteps = [1, 2]\n", "line 2: key 'steps' takes one value, not an array"},
      {"[training]\n\nseed = -1\n", "line 3: key 'seed': --seed: must be >= 0 (got -1)"},
  };
  for (const auto& [text, message] : cases) {
    write_file(dir.file("c.toml"), text);
    auto r = run_strata("train --config " + dir.file("c.toml") + " --steps 1 --run-dir " + dir.file("run"));
    EXPECT_NE(r.status, 0) << text;
    EXPECT_NE(r.out.find(dir.file("c.toml") + " " + message), std::string::npos) << text << "\n" << r.out;
    EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << r.out;
  }
  auto missing = run_strata("train --config " + dir.file("none.toml"));
  EXPECT_NE(missing.out.find("--config " + dir.file("none.toml") + ": does not exist"), std::string::npos)
      << missing.out;
}

}  // namespace
}  // namespace strata
