// The progress line: on a terminal one line updated in place (step, loss, tokens/s, ETA);
// into a pipe or file, one line per record exactly as before.
#include <gtest/gtest.h>

#include "cli_util.h"

namespace strata::test {
namespace {

const char* kArgs = "train --layers 1 --dim 32 --heads 2 --seq 16 --batch 2 --steps 6 --threads 1 "
                    "--sample-tokens 0 --eval-every 0 --eval-batches 1 --peak-gflops 1";

TEST(Progress, PipeGetsOneLinePerStep) {
  RunResult r = run_strata(kArgs, "", Streams::separate);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out.find('\r'), std::string::npos);
  EXPECT_EQ(r.out.find('\033'), std::string::npos);
  EXPECT_EQ(r.out.find("ETA"), std::string::npos);
  int steps = 0;
  std::stringstream ss(r.out);
  for (std::string line; std::getline(ss, line);)
    if (line.rfind("step ", 0) == 0) {
      ++steps;
      EXPECT_NE(line.find(" | lr "), std::string::npos) << line;
      EXPECT_NE(line.find(" tok/s | MFU "), std::string::npos) << line;
    }
  EXPECT_EQ(steps, 6);
  EXPECT_NE(r.out.find("\neval  step 6 | loss "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\ndone: 6 steps"), std::string::npos) << r.out;
}

// Runs `strata ARGS` on a pseudo-terminal (util-linux `script`) and returns what it printed.
std::string on_terminal(const std::string& args) {
  TempDir io("tty");
  const std::string cmd = "script -qec \"" + std::string(STRATA_BINARY) + " " + args +
                          "\" /dev/null > " + (io.file("out")) + " 2>&1";
  EXPECT_EQ(std::system(cmd.c_str()), 0) << read_file(io.file("out"));
  return read_file(io.file("out"));
}

void expect_live_line(const std::string& out) {
  EXPECT_NE(out.find("\r\033[2Kstep     1/6 | loss "), std::string::npos) << out;
  EXPECT_NE(out.find("\r\033[2Kstep     6/6 | loss "), std::string::npos) << out;
  EXPECT_NE(out.find(" tok/s | MFU "), std::string::npos) << out;
  EXPECT_NE(out.find(" | ETA "), std::string::npos) << out;
  // A redraw is replaced by the next one (which starts with \r); only the last one is ended
  // by a newline (a terminal shows \n as \r\n), when the summary follows.
  size_t drawn = 0, ended = 0;
  for (size_t p = 0; (p = out.find("\r\033[2Kstep ", p)) != std::string::npos; ++p) {
    ++drawn;
    const size_t end = out.find_first_of("\r\n", p + 1);
    if (end != std::string::npos && (out[end] == '\n' || out.compare(end, 2, "\r\n") == 0)) ++ended;
  }
  EXPECT_GE(drawn, 2u) << out;
  EXPECT_EQ(ended, 1u) << out;
  EXPECT_NE(out.find("eval  step 6 | loss "), std::string::npos) << out;
  EXPECT_NE(out.find("done: 6 steps"), std::string::npos) << out;
}

bool have_script() { return std::system("command -v script >/dev/null 2>&1") == 0; }

TEST(Progress, TerminalGetsOneLineUpdatedInPlace) {
  if (!have_script()) GTEST_SKIP() << "SKIPPED: util-linux `script` (a pseudo-terminal) is not installed";
  expect_live_line(on_terminal(kArgs));
}

// Ranks write into the launcher's pipe; rank 0 still draws the line on the launcher's terminal.
TEST(Progress, TerminalLineThroughTheLauncher) {
  if (!have_script()) GTEST_SKIP() << "SKIPPED: util-linux `script` (a pseudo-terminal) is not installed";
  std::string args = kArgs;
  args += " --nproc 2";
  expect_live_line(on_terminal(args));
}

}  // namespace
}  // namespace strata::test
