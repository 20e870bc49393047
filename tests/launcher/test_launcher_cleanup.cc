// The launcher's exception safety: a failure after it installed its signal handlers and
// started ranks (a throw from the on_spawn hook; pipe2 failing for want of descriptors)
// leaves no handler installed, no child running and no descriptor open. And a rank started
// by hand with leftover STRATA_RANK/STRATA_WORLD_SIZE/STRATA_JOB_ID (no launcher) removes
// the segment it created when it times out or is stopped by SIGTERM. A stopped rank does not
// hold a failed job for the grace period, and what the job owns across attempts goes with it.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <stdexcept>

#include "comm/bootstrap.h"
#include "comm/shm/segment.h"
#include "core/error.h"
#include "core/timer.h"
#include "launcher/launcher.h"
#include "launcher/run_segments.h"
#include "support/run.h"
#include "support/temp_dir.h"

namespace strata::launcher {

using namespace strata::comm;
namespace {

void* handler_of(int sig) {
  struct sigaction now {};
  sigaction(sig, nullptr, &now);
  return reinterpret_cast<void*>(now.sa_handler);
}

int open_fds() {
  int n = 0;
  for (auto& e : std::filesystem::directory_iterator("/proc/self/fd")) (void)e, ++n;
  return n;
}

LaunchOptions sleepers(int n) {
  LaunchOptions o;
  o.nproc = n;
  o.command = {"sleep", "30"};
  o.log = [](const std::string&) {};
  return o;
}

TEST(LauncherCleanup, ThrowAfterSpawnStopsChildrenAndRestoresHandlers) {
  void* before_int = handler_of(SIGINT);
  void* before_term = handler_of(SIGTERM);
  int fds = open_fds();
  std::vector<int64_t> pids;
  LaunchOptions o = sleepers(3);
  o.on_spawn = [&](int rank, int64_t pid) {
    pids.push_back(pid);
    // The handlers are the launcher's while it runs.
    EXPECT_NE(handler_of(SIGINT), before_int);
    if (rank == 1) throw std::runtime_error("injected after rank 1 started");
  };
  EXPECT_THROW(launch(o), std::runtime_error);
  ASSERT_EQ(pids.size(), 2u);
  EXPECT_EQ(handler_of(SIGINT), before_int);
  EXPECT_EQ(handler_of(SIGTERM), before_term);
  for (int64_t pid : pids) {
    // Reaped: no such process, and no zombie left for us to wait on.
    EXPECT_NE(kill(pid_t(pid), 0), 0) << "pid " << pid << " still exists";
    EXPECT_EQ(waitpid(pid_t(pid), nullptr, WNOHANG), -1);
  }
  EXPECT_EQ(open_fds(), fds);
}

TEST(LauncherCleanup, PipeFailureRestoresHandlersAndClosesDescriptors) {
  void* before_int = handler_of(SIGINT);
  int fds = open_fds();
  rlimit old {};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &old), 0);
  // Room for a few pipes, not for the 2 x 8 a job of 8 ranks needs.
  rlimit low = old;
  low.rlim_cur = rlim_t(fds + 8);
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &low), 0);
  bool spawned = false;
  LaunchOptions o = sleepers(8);
  o.on_spawn = [&](int, int64_t) { spawned = true; };
  std::string msg;
  try {
    launch(o);
  } catch (const Error& e) {
    msg = e.what();
  }
  setrlimit(RLIMIT_NOFILE, &old);
  EXPECT_NE(msg.find("pipe failed"), std::string::npos) << msg;
  EXPECT_FALSE(spawned);
  EXPECT_EQ(handler_of(SIGINT), before_int);
  EXPECT_EQ(open_fds(), fds);
}

// Rank 0 of a world of 2 whose rank 1 never comes: `comm_worker die-early` as rank 0 waits
// for rank 1 to attach to the segment it created.
std::vector<std::pair<std::string, std::string>> lone_rank_env(const std::string& job, const char* timeout) {
  return {{"STRATA_RANK", "0"}, {"STRATA_WORLD_SIZE", "2"}, {"STRATA_JOB_ID", job}, {"STRATA_TIMEOUT", timeout}};
}

bool segment_exists(const std::string& job) {
  return std::filesystem::exists("/dev/shm" + shm::segment_name(job, "w"));
}

TEST(LauncherCleanup, LoneRankRemovesItsSegmentAfterTheTimeout) {
  std::string job = "lone-timeout-" + new_job_id();
  auto p = test::run({COMM_WORKER, "die-early"}, lone_rank_env(job, "1"), 30);
  EXPECT_EQ(p.exit_code(), 1) << p.output();
  EXPECT_NE(p.output().find("only 1 of 2 ranks joined before the timeout"), std::string::npos) << p.output();
  EXPECT_FALSE(segment_exists(job));
  remove_job_segments(job);
}

TEST(LauncherCleanup, LoneRankRemovesItsSegmentOnSigterm) {
  std::string job = "lone-term-" + new_job_id();
  auto p = test::start({COMM_WORKER, "die-early"}, lone_rank_env(job, "60"));
  for (int i = 0; i < 2000 && !segment_exists(job); ++i) usleep(5000);
  ASSERT_TRUE(segment_exists(job)) << p.output();
  usleep(50000);  // into its wait for rank 1
  kill(p.pid, SIGTERM);
  ASSERT_TRUE(test::wait_for(p, 30)) << p.output();
  EXPECT_EQ(p.exit_code(), 128 + SIGTERM) << p.output();
  EXPECT_FALSE(segment_exists(job));
  remove_job_segments(job);
}

// A rank stopped (SIGSTOP) when another fails acts on the launcher's SIGTERM only once
// continued: the launcher sends SIGCONT with it, so the job ends now, not after the grace
// period (30 s here) and a SIGKILL.
TEST(LauncherCleanup, StoppedRankIsContinuedToActOnSigterm) {
  LaunchOptions o;
  o.nproc = 2;
  o.grace_s = 30;
  o.command = {"sh", "-c", "if [ \"$STRATA_RANK\" = 1 ]; then kill -STOP $$; sleep 60; else sleep 0.3; exit 3; fi"};
  o.log = [](const std::string&) {};
  Stopwatch sw;
  const LaunchResult r = launch(o);
  EXPECT_EQ(r.exit_code, 3) << r.message;
  EXPECT_EQ(r.failed_rank, 0) << r.message;
  EXPECT_LT(sw.seconds(), 10) << "the stopped rank held the job for the grace period";
}

// Objects a supervised job owns across its attempts (launcher/run_segments.h: a marker
// /dev/shm/strata-<run id>-owns-NAME beside /dev/shm/NAME) go when the job ends, here after
// its last restart failed too; an object without a marker of this job stays.
TEST(LauncherCleanup, RunOwnedObjectsGoWhenTheJobEnds) {
  const std::string tag = "strata-test-owned-" + new_job_id();
  const std::string other = "/dev/shm/" + tag + "-other";
  { std::ofstream(other) << "x"; }
  LaunchOptions o;
  o.nproc = 2;
  o.max_restarts = 1;
  o.command = {"sh", "-c",
               "n=" + tag + "-$STRATA_RANK-$STRATA_RESTART; : > /dev/shm/strata-$STRATA_RUN_ID-owns-$n; "
               ": > /dev/shm/$n; [ \"$STRATA_RANK\" = 0 ] || exit 5"};
  o.log = [](const std::string&) {};
  const LaunchResult r = launch(o);
  EXPECT_EQ(r.exit_code, 5) << r.message;
  EXPECT_EQ(r.restarts, 1);
  std::string left;
  for (const auto& e : std::filesystem::directory_iterator("/dev/shm")) {
    const std::string n = e.path().filename().string();
    if (n.find(tag) != std::string::npos && "/dev/shm/" + n != other) left += n + " ";
  }
  EXPECT_EQ(left, "");
  EXPECT_TRUE(std::filesystem::exists(other));
  std::filesystem::remove(other);
}

// A launcher killed by SIGKILL removes nothing; the next launcher on the host removes what
// that job owned (its record /dev/shm/strata-<run id>-owner names the launcher's pid, which is
// gone), and leaves alone what a job whose launcher lives owns.
TEST(LauncherCleanup, ObjectsOfAKilledLaunchersJobGoWithTheNextLauncher) {
  const std::string tag = "strata-test-orphan-" + new_job_id();
  const std::string obj = "/dev/shm/" + tag;
  test::Proc killed = test::start(
      {STRATA_BINARY, "launch", "-n", "1", "--", "sh", "-c",
       ": > /dev/shm/strata-$STRATA_RUN_ID-owns-" + tag + "; echo $$ > " + obj + ".pid; mv " + obj +
           ".pid " + obj + "; exec sleep 60"},
      {}, test::Streams::separate);
  for (int i = 0; i < 600 && !std::filesystem::exists(obj); ++i) usleep(50000);
  ASSERT_TRUE(std::filesystem::exists(obj)) << "the rank never made its object";
  const long rank_pid = std::stol(test::read_file(obj));
  ::kill(killed.pid, SIGKILL);  // the launcher alone, as `kill -9` of it
  test::wait_for(killed, 30);
  ::kill(pid_t(rank_pid), SIGKILL);  // its rank, which may outlive it
  std::string marker;
  for (const auto& e : std::filesystem::directory_iterator("/dev/shm"))
    if (e.path().filename().string().find("-owns-" + tag) != std::string::npos) marker = e.path().string();
  ASSERT_FALSE(marker.empty()) << "no marker left by the killed job";
  const std::string run_id = marker.substr(16, marker.find("-owns-") - 16);  // /dev/shm/strata-<id>-owns-
  EXPECT_TRUE(std::filesystem::exists("/dev/shm/strata-" + run_id + "-owner"));
  // A live launcher's job (this process stands for it) keeps its objects.
  const std::string live_id = "j" + std::to_string(getpid()) + "-livejob" + std::to_string(getpid());
  const std::string live_obj = "/dev/shm/" + tag + "-live";
  for (const std::string& f : {live_obj, "/dev/shm/strata-" + live_id + "-owns-" + tag + "-live",
                               "/dev/shm/strata-" + live_id + "-owner"})
    std::ofstream(f) << "";

  LaunchOptions o;
  o.nproc = 1;
  o.command = {"true"};
  std::vector<std::string> lines;
  o.log = [&](const std::string& l) { lines.push_back(l); };
  EXPECT_EQ(launch(o).exit_code, 0);
  EXPECT_FALSE(std::filesystem::exists(obj));
  EXPECT_FALSE(std::filesystem::exists(marker));
  EXPECT_FALSE(std::filesystem::exists("/dev/shm/strata-" + run_id + "-owner"));
  bool said = false;
  for (const std::string& l : lines) said |= l.find("job " + run_id + ": launcher pid ") != std::string::npos;
  EXPECT_TRUE(said) << ::testing::PrintToString(lines);
  EXPECT_TRUE(std::filesystem::exists(live_obj));
  EXPECT_EQ(remove_run_owned(live_id), 1);
  EXPECT_FALSE(std::filesystem::exists(live_obj));
}

}  // namespace
}  // namespace strata::launcher
