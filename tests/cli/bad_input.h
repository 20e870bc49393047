// Helpers of the bad-input suites (test_bad_input.cc, test_bad_paths.cc): each case is a
// command line and the files it needs; every one must end with a non-zero exit status (never
// a signal), within a time bound, with one line on stderr naming the flag or file at fault.
//
// STRATA_TEST_BINARY=/path/to/strata runs the cases against another build (e.g. an older one,
// to see which of them it fails).
#pragma once
#include <sys/stat.h>
#include <sys/wait.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "support/run.h"
#include "support/temp_dir.h"

namespace strata::bad_input {

namespace fs = std::filesystem;

using strata::test::read_file;
using strata::test::TempDir;

inline std::string strata_binary() {
  const char* other = std::getenv("STRATA_TEST_BINARY");
  return other && *other ? other : STRATA_BINARY;
}

struct Outcome {
  int status = -1;  // exit status; -1 when a signal ended it
  int signal = 0;   // the signal, when one did
  bool timed_out = false;
  double seconds = 0;
  std::string out, err;
};

// Runs `sh -c "<prefix> exec strata <args>"` in its own process group (tests/support), killed
// with its group after limit_s. $D in args and prefix is the case's scratch directory.
inline Outcome run(const std::string& dir, std::string args, std::string prefix = "",
            double limit_s = 20) {
  for (std::string* s : {&args, &prefix})
    for (size_t at; (at = s->find("$D")) != std::string::npos;) s->replace(at, 2, dir);
  const std::string cmd = prefix + " exec " + strata_binary() + " " + args;
  const auto t0 = std::chrono::steady_clock::now();
  strata::test::Proc p =
      strata::test::run({"/bin/sh", "-c", cmd}, {}, limit_s, strata::test::Streams::separate);
  Outcome r;
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  r.timed_out = p.timed_out;
  if (WIFEXITED(p.status)) r.status = WEXITSTATUS(p.status);
  if (WIFSIGNALED(p.status)) r.signal = WTERMSIG(p.status);
  r.out = std::move(p.out);
  r.err = std::move(p.err);
  return r;
}

// The last line of stderr: the error main() prints.
inline std::string last_line(const std::string& text) {
  std::string t = text;
  while (!t.empty() && t.back() == '\n') t.pop_back();
  const size_t nl = t.rfind('\n');
  return nl == std::string::npos ? t : t.substr(nl + 1);
}

// A failure the way a person should see it: no signal, no hang, a non-zero status, and (unless
// the run printed progress before failing) exactly one stderr line, "strata: error: ..."
// naming every needle.
inline void expect_clean_failure(const Outcome& r, const std::vector<std::string>& needles,
                          bool one_line = true) {
  EXPECT_FALSE(r.timed_out) << "still running after " << r.seconds << " s\n" << r.err;
  EXPECT_EQ(r.signal, 0) << "killed by signal " << r.signal << "\n" << r.err;
  EXPECT_GT(r.status, 0) << "stdout:\n" << r.out << "stderr:\n" << r.err;
  const std::string line = last_line(r.err);
  EXPECT_EQ(line.rfind("strata: error: ", 0), 0u) << r.err;
  if (one_line) {
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  }
  for (const std::string& n : needles)
    EXPECT_NE(line.find(n), std::string::npos) << "'" << n << "' in\n" << r.err;
  for (const char* crash : {"bad_alloc", "basic_filebuf", "stoi", "nan%", "terminate called"})
    EXPECT_EQ(r.err.find(crash), std::string::npos) << r.err;
}

struct Case {
  std::string name;
  std::string args;                  // after `strata`; $D is the scratch directory
  std::vector<std::string> needles;  // in the error line
  std::function<void(const std::string& dir)> setup{};
  std::string prefix{};              // shell commands before exec (ulimit, environment)
  bool one_line = true;
};

inline void run_cases(const std::vector<Case>& cases) {
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name + ": strata " + c.args);
    TempDir dir(c.name);
    if (c.setup) c.setup(dir.str());
    std::vector<std::string> needles;
    for (std::string n : c.needles) {
      for (size_t at; (at = n.find("$D")) != std::string::npos;) n.replace(at, 2, dir.str());
      needles.push_back(n);
    }
    expect_clean_failure(run(dir.str(), c.args, c.prefix), needles, c.one_line);
  }
}

// A tiny model that trains a step in well under a second on one thread.
inline const std::string kTrain =
    "train --layers 1 --dim 32 --heads 2 --seq 16 --batch 2 --steps 2 --peak-gflops 10 "
    "--sample-tokens 0 --eval-batches 1 --data synthetic:20000 ";

inline void make_fifo(const std::string& dir) { ASSERT_EQ(::mkfifo((dir + "/fifo").c_str(), 0644), 0); }

// One run with a committed checkpoint, shared by the checkpoint cases.
inline const std::string& checkpointed_run() {
  static TempDir dir("ckptrun");
  static bool made = [] {
    Outcome r = run(dir.str(), kTrain + "--steps 2 --ckpt-every 2 --run-dir $D/run");
    EXPECT_EQ(r.status, 0) << r.err;
    return true;
  }();
  (void)made;
  static const std::string run_dir = dir.str() + "/run";
  return run_dir;
}

}  // namespace strata::bad_input
