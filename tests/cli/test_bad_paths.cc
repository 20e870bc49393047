// Path flags and the files strata writes, as a new user would get them wrong: for every path
// flag of every subcommand a directory (where a file is expected) and a FIFO (which would block
// a read or a write forever) are refused in one line naming the flag or file and the kind;
// written files go through the checked writer (no half file or DIR.tmp left when the disk is
// full); text from an input file is echoed into errors escaped and capped.
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "cli/bad_input.h"

using namespace strata::bad_input;

namespace test_bad_paths {  // its own names in a unity build
namespace {

// What a path flag expects: a file (a directory is wrong), a directory, or either (a run
// directory or a safetensors file).
enum class Wants { file, dir, either };

struct PathFlag {
  std::string base;  // the command and its required flags, before the path flag
  std::string flag;  // "--data", or "" for a positional path
  Wants wants;
  std::string tail{};  // after the path (e.g. "-- true" for launch)
};

void make_dir_at(const std::string& d) { fs::create_directories(d + "/adir"); }

std::vector<Case> path_cases(const std::vector<PathFlag>& flags) {
  std::vector<Case> cases;
  for (const PathFlag& f : flags) {
    std::string name;  // the command's words, then the flag: "ckpt_export__safetensors"
    for (size_t at = 0; at < f.base.size() && !std::strchr("-$/", f.base[at]);) {
      const size_t end = std::min(f.base.find(' ', at), f.base.size());
      name += f.base.substr(at, end - at) + "_";
      at = end + 1;
    }
    name += f.flag.empty() ? "arg" : f.flag;
    for (char& c : name)
      if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
    auto line = [&](const std::string& path) {
      return f.base + " " + (f.flag.empty() ? "" : f.flag + " ") + path + " " + f.tail;
    };
    auto needles = [&](const std::string& path, const std::string& kind) {
      std::vector<std::string> n = {path, kind};
      if (!f.flag.empty()) n.push_back(f.flag);
      return n;
    };
    cases.push_back({name + "_fifo", line("$D/fifo"), needles("$D/fifo", "FIFO"), make_fifo});
    if (f.wants == Wants::file)
      cases.push_back({name + "_dir", line("$D/adir"), needles("$D/adir", "directory"), make_dir_at});
  }
  return cases;
}

const std::string kReward = "rlhf reward --init $D/none -o $D/rm.safetensors";

}  // namespace

TEST(BadPaths, EveryPathFlagRefusesAFifoAndADirectoryForAFile) {
  const std::string trained = checkpointed_run();
  const std::vector<PathFlag> flags = {
      {kTrain, "--data", Wants::either},
      {kTrain, "--run-dir", Wants::dir},
      {kTrain + "--run-dir $D/r", "--resume", Wants::either},
      {kTrain + "--backend mpi --nproc 2", "--hostfile", Wants::file},
      {"ckpt ls", "", Wants::dir},
      {"ckpt verify", "", Wants::dir},
      {"ckpt export", "", Wants::dir, "--safetensors $D/m.safetensors"},
      {"ckpt export " + trained, "--safetensors", Wants::file},
      {"ckpt import", "", Wants::file},
      {"ckpt advise --mtbf 4h", "", Wants::dir},
      {"rlhf reward -o $D/rm.safetensors", "--init", Wants::either},
      {kReward, "--pairs", Wants::file},
      {"rlhf reward --init $D/none", "-o", Wants::file},
      {kReward, "--save-pairs", Wants::file},
      {"rlhf ppo --reward $D/none", "--actor", Wants::either},
      {"rlhf ppo --actor $D/none", "--reward", Wants::either},
      {"rlhf ppo --actor $D/none --reward $D/none", "--run-dir", Wants::dir},
      {"rlhf generate", "--actor", Wants::either},
      {"fed train --clients 2 --per-round 2 --rounds 1", "--data", Wants::either},
      {"fed train --clients 2 --per-round 2 --rounds 1", "--summary", Wants::file},
      {"fed compare --rounds 1", "--data", Wants::either},
      {"report", "", Wants::dir},
      {"report " + trained, "-o", Wants::file},
      {"trace merge -o $D/t.json", "", Wants::dir},
      {"trace merge " + trained, "-o", Wants::file},
      {"trace overlap", "", Wants::dir},
      {"doctor hang", "", Wants::dir},
      {"doctor net --nproc 2 --backend mpi", "--hostfile", Wants::file},
      {"data info", "--data", Wants::either},
      {"plan --model gpt2", "--gpu", Wants::file},
      {"plan --model gpt2", "--intra-bench", Wants::file},
      {"plan --model gpt2", "--inter-bench", Wants::file},
      {"plan calibrate", "-o", Wants::file},
      {"launch --backend mpi", "--hostfile", Wants::file, "-- true"},
      {"bench scaling --nproc 1", "--out", Wants::dir},
      {"bench scaling --nproc 1 --out $D/s", "--gpu", Wants::file},
  };
  std::vector<Case> cases = path_cases(flags);
  // Files inside a directory given on the command line: a directory in their place was
  // described as empty ("metrics.jsonl holds no step records", "names no host").
  cases.push_back({"report_metrics_dir", "report $D/run", {"$D/run/metrics.jsonl", "directory"},
                   [](const std::string& d) { fs::create_directories(d + "/run/metrics.jsonl"); }});
  run_cases(cases);
}

void write_text(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

// Files strata writes: a FIFO or directory where one goes is refused by its kind (a FIFO
// blocked the open of metrics.jsonl forever; summary.json over a directory said only "cannot
// write"), and a write that runs out of space leaves neither a half file nor a .tmp.
TEST(BadPaths, WrittenFilesAreChecked) {
  const std::string trained = checkpointed_run();
  run_cases({
      {"metrics_fifo", kTrain + "--run-dir $D/run", {"$D/run/metrics.jsonl", "FIFO"},
       [](const std::string& d) {
         fs::create_directories(d + "/run");
         ASSERT_EQ(::mkfifo((d + "/run/metrics.jsonl").c_str(), 0644), 0);
       }},
      {"summary_dir", kTrain + "--run-dir $D/run", {"$D/run/summary.json", "directory"},
       [](const std::string& d) { fs::create_directories(d + "/run/summary.json"); }},
      {"trace_out_device", "trace merge " + trained + " -o /dev/full", {"-o", "/dev/full", "device"}},
      {"calibrate_out_device", "plan calibrate -o /dev/full", {"-o", "/dev/full", "device"}},
  });
  TempDir dir("save_pairs_full");
  const Outcome r = run(dir.str(), "rlhf reward --init " + trained + " -o $D/rm.safetensors --num-pairs 64 "
                                      "--prompt-len 4 --response-len 8 --save-pairs $D/p.txt",
                           "trap '' XFSZ; ulimit -f 1;");
  expect_clean_failure(r, {dir.str() + "/p.txt"});
  EXPECT_FALSE(fs::exists(dir.str() + "/p.txt")) << "a half-written pairs file was left";
  EXPECT_FALSE(fs::exists(dir.str() + "/p.txt.tmp"));
}

// Text from an input file is echoed escaped and capped: binary bytes as \xNN, a 1 MB line as
// its first ~80 characters, "..." and its length (a 200 MB line was echoed whole).
TEST(BadPaths, InputTextIsEscapedAndCapped) {
  const std::string trained = checkpointed_run();
  run_cases({
      {"hostfile_binary", "launch --backend mpi --hostfile $D/hosts -- true",
       {"hostfile $D/hosts line 2", "'\\x01\\x02\\xffhost'"},
       [](const std::string& d) { write_text(d + "/hosts", "a slots=1\n\x01\x02\xffhost slots=1\n"); }},
      {"pairs_binary", "rlhf reward --init " + trained + " -o $D/rm.safetensors --pairs $D/p.txt",
       {"--pairs $D/p.txt:1", "'3\\x00\\x7f'"},
       [](const std::string& d) { write_text(d + "/p.txt", std::string("1 2 | 3\0\x7f | 4\n", 14)); }},
  });
  TempDir dir("long_line");
  write_text(dir.str() + "/hosts", "a " + std::string(1000000, 'x') + "\n");
  const Outcome r = run(dir.str(), "launch --backend mpi --hostfile $D/hosts -- true");
  expect_clean_failure(r, {"unknown field 'xxxx", "...' (1000000 bytes)"});
  EXPECT_LT(r.err.size(), 400u) << r.err.size() << " bytes of error";
}

}  // namespace test_bad_paths
