// The OpenMP wait policy strata starts with (core/wait_policy.h): the environment it adds,
// what libgomp reads back in the `strata` binary, that the user's choice wins, that processes
// strata starts inherit it, and what it buys: the CPU time a waiting thread burns, measured
// with getrusage (CPU time, not wall time, so a loaded machine cannot make it fail).
#include <fcntl.h>
#include <omp.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "core/wait_policy.h"
#include "support/run.h"

extern char** environ;

using namespace strata;

namespace {

std::vector<char*> pointers(std::vector<std::string>& env) {
  std::vector<char*> p;
  for (std::string& s : env) p.push_back(s.data());
  p.push_back(nullptr);
  return p;
}

// This process's environment without any OpenMP setting, as a user who set none has it.
std::vector<std::string> plain_env() {
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e)
    if (std::strncmp(*e, "OMP_", 4) != 0 && std::strncmp(*e, "GOMP_", 5) != 0) env.emplace_back(*e);
  return env;
}

// libgomp's own report of its settings (OMP_DISPLAY_ENV=verbose, printed when it starts) for
// `strata --help-env` run with `env` (assignments for /usr/bin/env) added to a plain one.
std::string libgomp_setting(const std::string& env, const std::string& name) {
  test::RunResult r = test::run_strata(
      "--help-env", "env -u OMP_WAIT_POLICY -u GOMP_SPINCOUNT OMP_DISPLAY_ENV=verbose " + env,
      test::Streams::separate, 60);
  EXPECT_EQ(r.status, 0) << r.err;
  std::smatch m;
  const std::regex re("  " + name + " = '([^']*)'");
  return std::regex_search(r.err, m, re) ? m[1].str() : "(not printed: " + r.err + ")";
}

}  // namespace

TEST(WaitPolicy, AddsShortSpinToAPlainEnvironment) {
  std::vector<std::string> env = plain_env();
  std::vector<char*> p = pointers(env);
  std::vector<std::string> got = env_with_wait_policy(p.data());
  ASSERT_EQ(got.size(), env.size() + 1);
  EXPECT_EQ(got.back(), std::string("GOMP_SPINCOUNT=") + kDefaultSpinCount);
  for (size_t i = 0; i < env.size(); ++i) EXPECT_EQ(got[i], env[i]);
}

TEST(WaitPolicy, LeavesAUsersChoiceAlone) {
  for (const char* chosen : {"OMP_WAIT_POLICY=active", "OMP_WAIT_POLICY=PASSIVE",
                             "GOMP_SPINCOUNT=300000", "GOMP_SPINCOUNT=", "OMP_WAIT_POLICY="}) {
    std::vector<std::string> env = plain_env();
    env.insert(env.begin() + long(env.size() / 2), chosen);
    std::vector<char*> p = pointers(env);
    EXPECT_TRUE(env_with_wait_policy(p.data()).empty()) << chosen;
  }
  // A longer name that starts with one of them is not a choice.
  std::vector<std::string> env = plain_env();
  env.push_back("GOMP_SPINCOUNTER=5");
  std::vector<char*> p = pointers(env);
  EXPECT_EQ(env_with_wait_policy(p.data()).size(), env.size() + 1);
}

TEST(WaitPolicy, LibgompInTheBinaryRunsWithTheShortSpin) {
  // libgomp's default, 300000, before strata chose one.
  EXPECT_EQ(libgomp_setting("", "GOMP_SPINCOUNT"), kDefaultSpinCount);
}

// ctest gives every test binary GOMP_SPINCOUNT (cmake/Strata.cmake), so that the strata runs
// of the tests skip the re-execution: it must be the spin strata would set itself.
TEST(WaitPolicy, TheTestsEnvironmentHoldsTheDefaultSpin) {
  if (const char* spin = std::getenv("GOMP_SPINCOUNT")) {
    EXPECT_STREQ(spin, kDefaultSpinCount) << "GOMP_SPINCOUNT in strata_test's ENVIRONMENT";
  }
}

TEST(WaitPolicy, TheUsersSettingWinsInTheBinary) {
  EXPECT_EQ(libgomp_setting("GOMP_SPINCOUNT=42", "GOMP_SPINCOUNT"), "42");
  EXPECT_EQ(libgomp_setting("OMP_WAIT_POLICY=active", "OMP_WAIT_POLICY"), "ACTIVE");
  EXPECT_EQ(libgomp_setting("OMP_WAIT_POLICY=active", "GOMP_SPINCOUNT"), "30000000000");
}

TEST(WaitPolicy, ProcessesStrataStartsInheritIt) {
  test::RunResult r = test::run_strata(
      "launch -n 2 --no-prefix -- sh -c 'echo spin=$GOMP_SPINCOUNT'",
      "env -u OMP_WAIT_POLICY -u GOMP_SPINCOUNT", test::Streams::merged, 60);
  ASSERT_EQ(r.status, 0) << r.out;
  const std::string line = std::string("spin=") + kDefaultSpinCount + "\n";
  size_t n = 0;
  for (size_t at = r.out.find(line); at != std::string::npos; at = r.out.find(line, at + 1)) ++n;
  EXPECT_EQ(n, 2u) << r.out;
}

// Run by WaitingThreadSleeps in a child process (disabled in ordinary runs): 300 parallel
// regions of two threads in which the master sleeps 2 ms and the other thread has nothing to
// do but wait for the region's end, i.e. 0.6 s of waiting.
TEST(WaitPolicyChild, DISABLED_TwoThreadsOneWaits) {
  int threads = 0;
  for (int i = 0; i < 300; ++i) {
#pragma omp parallel num_threads(2)
    {
      if (omp_get_thread_num() == 0) {
        threads = omp_get_num_threads();
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
      }
    }
  }
  ASSERT_EQ(threads, 2);
}

TEST(WaitPolicy, WaitingThreadSleeps) {
  // The child gets exactly the environment the strata binary re-executes itself with.
  std::vector<std::string> plain = plain_env();
  std::vector<char*> pp = pointers(plain);
  std::vector<std::string> env = env_with_wait_policy(pp.data());
  ASSERT_FALSE(env.empty());
  std::vector<char*> e = pointers(env);
  std::string self = "/proc/self/exe", filter = "--gtest_filter=WaitPolicyChild.*",
              disabled = "--gtest_also_run_disabled_tests";
  char* argv[] = {self.data(), filter.data(), disabled.data(), nullptr};
  posix_spawn_file_actions_t quiet;  // the child's own test report is of no interest
  posix_spawn_file_actions_init(&quiet);
  posix_spawn_file_actions_addopen(&quiet, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
  pid_t pid = -1;
  const int spawned = posix_spawn(&pid, self.c_str(), &quiet, nullptr, argv, e.data());
  posix_spawn_file_actions_destroy(&quiet);
  ASSERT_EQ(spawned, 0);
  int status = 0;
  rusage ru{};
  ASSERT_EQ(wait4(pid, &status, 0, &ru), pid);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child status " << status;
  const double cpu = double(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
                     1e-6 * double(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
  // Spinning through the 0.6 s of waits costs about 0.6 s of CPU (libgomp's default spin,
  // several ms, outlasts each 2 ms wait); sleeping costs a few ms plus the process's start.
  EXPECT_LT(cpu, 0.2) << "CPU seconds of a process whose second thread only waits";
}
