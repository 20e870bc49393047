// The supervisor (`strata launch --max-restarts R`): restarts of the whole job with
// STRATA_RESTART set, one log line per restart, and a clear failure once R is exhausted.
#include <gtest/gtest.h>

#include "comm/bootstrap.h"
#include "launcher/launcher.h"
#include "support/run.h"

namespace strata::launcher {

using namespace strata::comm;
namespace {

using test::run;

TEST(LauncherRestart, RestartsUntilTheJobSucceeds) {
  // Rank 1 fails on the first two attempts; rank 0 would run long but is stopped each time.
  LaunchOptions o;
  o.nproc = 2;
  o.grace_s = 1;
  o.max_restarts = 3;
  o.prefix_output = false;
  o.command = {"sh", "-c",
               "if [ $STRATA_RESTART -lt 2 ]; then if [ $STRATA_RANK = 1 ]; then exit 5; fi; "
               "sleep 30; fi; exit 0"};
  std::vector<std::string> lines;
  o.log = [&](const std::string& l) { lines.push_back(l); };
  LaunchResult r = launch(o);
  EXPECT_EQ(r.exit_code, 0) << r.message;
  EXPECT_EQ(r.restarts, 2);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0], "strata launch: restart 1/3 after rank 1 exited with code 5");
  EXPECT_EQ(lines[1], "strata launch: restart 2/3 after rank 1 exited with code 5");
}

TEST(LauncherRestart, GivesUpAfterMaxRestartsWithAClearMessage) {
  auto p = run({STRATA_BINARY, "launch", "-n", "1", "--max-restarts", "2", "--", "sh", "-c",
                "echo attempt=$STRATA_RESTART; kill -9 $$"});
  std::string out = p.output();
  EXPECT_EQ(p.exit_code(), 128 + 9) << out;
  for (int k = 0; k <= 2; ++k)
    EXPECT_NE(out.find("[rank 0] attempt=" + std::to_string(k)), std::string::npos) << out;
  EXPECT_NE(out.find("strata launch: restart 1/2 after rank 0 was killed by signal 9"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("strata launch: restart 2/2 after rank 0 was killed by signal 9"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("strata launch: rank 0 was killed by signal 9 (Killed); giving up after 2 "
                     "restarts (--max-restarts 2)"),
            std::string::npos)
      << out;
}

TEST(LauncherRestart, NoRestartsByDefaultAndNoRestartVariable) {
  auto p = run({STRATA_BINARY, "launch", "-n", "1", "--", "sh", "-c",
                "echo restart=${STRATA_RESTART:-unset}; exit 4"});
  std::string out = p.output();
  EXPECT_EQ(p.exit_code(), 4) << out;
  EXPECT_NE(out.find("restart=unset"), std::string::npos) << out;
  EXPECT_EQ(out.find("strata launch: restart"), std::string::npos) << out;
}

TEST(LauncherRestart, NegativeMaxRestartsIsOneLine) {
  auto p = run({STRATA_BINARY, "launch", "-n", "1", "--max-restarts", "-1", "--", "true"});
  std::string out = p.output();
  EXPECT_EQ(p.exit_code(), 1) << out;
  EXPECT_NE(out.find("--max-restarts must not be negative"), std::string::npos) << out;
  EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 1) << out;
}

TEST(LauncherRestart, RestartAttemptReadsTheEnvironment) {
  ::setenv("STRATA_RESTART", "3", 1);
  EXPECT_EQ(restart_attempt(), 3);
  ::setenv("STRATA_RESTART", "-2", 1);
  EXPECT_THROW(restart_attempt(), Error);
  ::unsetenv("STRATA_RESTART");
  EXPECT_EQ(restart_attempt(), 0);
}

}  // namespace
}  // namespace strata::launcher
