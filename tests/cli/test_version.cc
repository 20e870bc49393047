// `strata --version` and `-V`: the project version and the git commit the build was configured
// from (cmake/GitCommit.cmake), "unknown" outside a git checkout, "-dirty" with changes.
#include <gtest/gtest.h>

#include <regex>
#include <string>

#include "support/run.h"
#include "support/temp_dir.h"

namespace strata::test {
namespace {

// What cmake/GitCommit.cmake says about `dir`, run as a script (as configuring runs it).
std::string commit_of(const std::string& dir) {
  Proc p = run({STRATA_CMAKE, "-DDIR=" + dir, "-P", std::string(STRATA_SOURCE_DIR) + "/cmake/GitCommit.cmake"});
  EXPECT_EQ(p.exit_code(), 0) << p.out;
  std::string s = p.out;
  while (!s.empty() && s.back() == '\n') s.pop_back();
  return s;
}

int sh(const std::string& cmd) { return run({"/bin/sh", "-c", cmd}).exit_code(); }

TEST(Version, PrintsVersionAndCommit) {
  for (const char* flag : {"--version", "-V"}) {
    RunResult r = run_strata(flag, "", Streams::separate);
    EXPECT_EQ(r.status, 0) << r.err;
    EXPECT_TRUE(std::regex_match(r.out, std::regex(R"(strata \d+\.\d+(\.\d+)? \(commit ([0-9a-f]{4,}(-dirty)?|unknown)\)\n)")))
        << flag << ": " << r.out;
    EXPECT_EQ(r.err, "") << flag;
  }
}

TEST(Version, CommitOfACheckoutUnknownOutsideDirtyWithChanges) {
  TempDir tmp;
  EXPECT_EQ(commit_of(tmp.str()), "unknown");  // not a git checkout (and no git needed)
  if (sh("command -v git >/dev/null") != 0) GTEST_SKIP() << "no git here";
  const std::string git = "git -C " + tmp.str() + " -c user.name=t -c user.email=t@t ";
  ASSERT_EQ(sh(git + "init -q && echo a > " + tmp.file("f") + " && " + git + "add f && " + git +
               "commit -qm one"), 0);
  Proc head = run({"git", "-C", tmp.str(), "rev-parse", "--short", "HEAD"});
  std::string hash = head.out.substr(0, head.out.find('\n'));
  ASSERT_FALSE(hash.empty());
  EXPECT_EQ(commit_of(tmp.str()), hash);
  write_file(tmp.file("untracked"), "x");  // untracked files leave the tree clean
  EXPECT_EQ(commit_of(tmp.str()), hash);
  write_file(tmp.file("f"), "b");
  EXPECT_EQ(commit_of(tmp.str()), hash + "-dirty");
}

}  // namespace
}  // namespace strata::test
