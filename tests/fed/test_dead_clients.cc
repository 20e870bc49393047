// Federated clients whose processes really die (SIGKILL, --inject-kill) through the real
// binary: each is a dropout of its round, the same as an announced one (--inject-drop), and
// below the threshold the run stops in one line. Every run is checked for orphan processes
// and for segments left in /dev/shm.
#include <dirent.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <regex>
#include <sstream>
#include <string>

#include "nlohmann/json.hpp"
#include "support/run.h"
#include "support/temp_dir.h"

namespace strata::fed::test_dead_clients {
namespace {

struct JobRun {
  int status = -1;
  std::string out, err;
  nlohmann::json summary;
  int launcher_pid = -1;
};

// `strata fed train ARGS` as a child of this test, so its pid is the launcher's: what names
// its job's segments ("strata-j<pid>-...") and what its ranks carry in STRATA_LAUNCHER_PID.
// A hang fails the test at the time limit instead of blocking it.
JobRun fed_train(const std::string& args) {
  test::TempDir dir("fed");
  std::vector<std::string> argv = {STRATA_BINARY, "fed", "train"};
  std::istringstream words(args);
  for (std::string w; words >> w;) argv.push_back(w);
  argv.insert(argv.end(), {"--summary", dir.file("summary.json")});
  test::Proc p = test::start(argv, {}, test::Streams::separate);
  const bool finished = test::wait_for(p, 120);
  EXPECT_TRUE(finished) << args << ": still running after 120 s\n" << p.out << p.err;
  JobRun r;
  r.status = finished ? p.exit_code() : -1;
  r.out = p.out;
  r.err = p.err;
  r.launcher_pid = int(p.pid);
  if (r.status == 0) r.summary = nlohmann::json::parse(test::read_file(dir.file("summary.json")));
  return r;
}

// Segments of the launcher's job still in /dev/shm.
std::vector<std::string> leftover_segments(int launcher_pid) {
  const std::string prefix = "strata-j" + std::to_string(launcher_pid) + "-";
  std::vector<std::string> left;
  if (DIR* d = opendir("/dev/shm")) {
    while (dirent* e = readdir(d))
      if (std::string(e->d_name).rfind(prefix, 0) == 0) left.push_back(e->d_name);
    closedir(d);
  }
  return left;
}

// Processes still running that the launcher started (its ranks carry its pid).
std::vector<int> orphans(int launcher_pid) {
  const std::string mark = "STRATA_LAUNCHER_PID=" + std::to_string(launcher_pid);
  std::vector<int> found;
  for (const auto& e : std::filesystem::directory_iterator("/proc")) {
    const std::string name = e.path().filename().string();
    if (name.empty() || !std::all_of(name.begin(), name.end(), ::isdigit)) continue;
    std::string env = test::read_file(e.path().string() + "/environ");
    std::replace(env.begin(), env.end(), '\0', '\n');
    if (("\n" + env).find("\n" + mark + "\n") != std::string::npos) found.push_back(std::stoi(name));
  }
  return found;
}

void expect_nothing_left(const JobRun& r) {
  ASSERT_GT(r.launcher_pid, 0);
  EXPECT_TRUE(leftover_segments(r.launcher_pid).empty()) << leftover_segments(r.launcher_pid).front();
  EXPECT_TRUE(orphans(r.launcher_pid).empty()) << "pid " << orphans(r.launcher_pid).front();
}

const char* kTiny = " --data synthetic:8193 --seq 16 --dim 16 --heads 2 --local-batch 8 --local-steps 2 "
                    "--clients 5 --per-round 5 --rounds 4 --eval-every 1 ";

// Round by round, a run with client 1 killed in round 2 against one with it dropped out from
// round 2 on: the same survivors, and the same model (the held-out loss after every round,
// bit for bit; plain aggregation also the survivors' mean local loss).
void expect_kill_equals_drop(const std::string& mode) {
  const JobRun killed = fed_train(mode + kTiny + "--inject-kill 1:2");
  ASSERT_EQ(killed.status, 0) << killed.out << killed.err;
  expect_nothing_left(killed);
  const JobRun dropped = fed_train(mode + kTiny + "--inject-drop 1:2");
  ASSERT_EQ(dropped.status, 0) << dropped.out << dropped.err;
  const auto& k = killed.summary["per_round_records"];
  const auto& d = dropped.summary["per_round_records"];
  ASSERT_EQ(k.size(), 4u);
  ASSERT_EQ(d.size(), 4u);
  for (size_t i = 0; i < 4; ++i) {
    SCOPED_TRACE("round " + std::to_string(i + 1));
    EXPECT_TRUE(k[i]["applied"].get<bool>());
    EXPECT_EQ(k[i]["survivors"], i == 0 ? 5 : 4);
    EXPECT_EQ(k[i]["dropped"], i == 0 ? 0 : 1);
    EXPECT_EQ(k[i]["died"], i == 0 ? 0 : 1);
    EXPECT_EQ(d[i]["died"], 0);
    EXPECT_EQ(k[i]["survivors"], d[i]["survivors"]);
    EXPECT_EQ(k[i]["dropped"], d[i]["dropped"]);
    EXPECT_EQ(k[i]["eval_loss"].get<double>(), d[i]["eval_loss"].get<double>());
    EXPECT_EQ(k[i]["train_loss"].get<double>(), d[i]["train_loss"].get<double>());
  }
  EXPECT_EQ(killed.summary["eval_loss"].get<double>(), dropped.summary["eval_loss"].get<double>());
  // The death is seen within the point-to-point engine's liveness check (every 200 ms).
  std::smatch m;
  ASSERT_TRUE(std::regex_search(killed.err, m, std::regex("round 2/4: client 1 died \\(.*\\), seen after ([0-9.]+) s")))
      << killed.err;
  EXPECT_LT(std::stod(m[1]), 1.0) << killed.err;
  EXPECT_NE(killed.err.find("rank 2 was killed by signal 9"), std::string::npos) << killed.err;
  EXPECT_NE(killed.out.find("round 2/4: 4 of 5 clients (1 dropped of which 1 died"), std::string::npos)
      << killed.out;
}

TEST(DeadClients, KilledClientUnderSecureAggregationIsADropoutLikeASimulatedOne) {
  expect_kill_equals_drop("--secure-agg --threshold 3 --clip-norm 0.5 --noise-multiplier 1");
}

TEST(DeadClients, KilledClientUnderPlainAggregationIsADropoutLikeASimulatedOne) {
  expect_kill_equals_drop("");
}

TEST(DeadClients, KillingMoreThanTheThresholdAllowsFailsTheRoundInOneLine) {
  const JobRun r = fed_train(std::string("--secure-agg --threshold 3") + kTiny + "--inject-kill 1,2,3:2");
  EXPECT_EQ(r.status, 1) << r.out << r.err;
  const std::string want =
      "strata: error: round 2/4: secure aggregation aborted: only 2 of 5 clients sent their masked "
      "update, below the threshold 3; nothing applied; clients 1, 2, 3 died and 2 of 5 remain, below "
      "the threshold 3: no later round can complete\n";
  EXPECT_NE(r.err.find(want), std::string::npos) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1 + 3 + 3)
      << "the error, and per death the launcher's and the server's line\n" << r.err;
  EXPECT_NE(r.out.find("round 1/4: 5 of 5 clients"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("round 3/4"), std::string::npos) << r.out;
  expect_nothing_left(r);
}

TEST(DeadClients, BadInjectionsAreOneLine) {
  const std::pair<std::string, std::string> cases[] = {
      {"--inject-kill 7:2", "--inject-kill: client 7 is not in [0, --clients = 5)"},
      {"--inject-drop 1:9", "--inject-drop: round 9 is not in [1, --rounds = 4]"},
      {"--inject-kill 1/2", "--inject-kill takes CLIENT[,CLIENT...]:ROUND (got '1/2')"},
      {"--inject-kill 1x,2:3", "--inject-kill takes CLIENT[,CLIENT...]:ROUND (got '1x,2:3')"},
  };
  for (const auto& [args, want] : cases) {
    const JobRun r = fed_train(kTiny + args);
    EXPECT_EQ(r.status, 1) << args;
    EXPECT_NE(r.err.find(want), std::string::npos) << args << ": " << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << args << ": " << r.err;
  }
}

}  // namespace
}  // namespace strata::fed::test_dead_clients
