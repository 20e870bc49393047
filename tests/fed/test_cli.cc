// `strata fed train` and `strata privacy` through the real binary: the server and clients as
// separate processes, summaries, and one-line errors for bad input.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "nlohmann/json.hpp"

namespace strata::fed {
namespace {

struct Result {
  int status = -1;
  std::string out, err;
};

std::string slurp(const std::string& p) {
  std::ifstream in(p);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

Result strata(const std::string& args) {
  const std::string base = (std::filesystem::temp_directory_path() /
                            ("strata_fed_cli_" + std::to_string(::getpid()))).string();
  const std::string cmd = std::string(STRATA_BINARY) + " " + args + " >" + base + ".out 2>" + base + ".err";
  const int rc = std::system(cmd.c_str());
  Result r{WIFEXITED(rc) ? WEXITSTATUS(rc) : -1, slurp(base + ".out"), slurp(base + ".err")};
  std::filesystem::remove(base + ".out");
  std::filesystem::remove(base + ".err");
  return r;
}

const char* kTiny = " --data synthetic:8193 --seq 16 --dim 16 --heads 2 --local-batch 8 --local-steps 2 ";

TEST(FedCli, SecureAggregationWithDropoutsAcrossProcesses) {
  const std::string summary = (std::filesystem::temp_directory_path() /
                               ("strata_fed_sum_" + std::to_string(::getpid()) + ".json")).string();
  Result r = strata(std::string("fed train --clients 5 --per-round 5 --rounds 3 --secure-agg ") +
                    "--threshold 3 --dropout 0.2 --clip-norm 0.5 --noise-multiplier 1 --summary " +
                    summary + kTiny);
  ASSERT_EQ(r.status, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("round 3/3"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("client-level epsilon"), std::string::npos) << r.out;
  const auto s = nlohmann::json::parse(slurp(summary));
  std::filesystem::remove(summary);
  EXPECT_EQ(s["rounds"], 3);
  EXPECT_TRUE(s["secure_agg"].get<bool>());
  EXPECT_GT(s["epsilon"].get<double>(), 0);
  EXPECT_GT(s["eval_loss"].get<double>(), 0);
  int dropped = 0;
  for (const auto& rec : s["per_round_records"]) dropped += rec["dropped"].get<int>();
  EXPECT_GT(dropped, 0) << "seed 1 should drop someone at p = 0.2 over 15 client-rounds";
}

TEST(FedCli, MalformedUpdateIsRejectedAndCounted) {
  Result r = strata(std::string("fed train --clients 3 --per-round 3 --rounds 2 --inject-bad-update 1:2") + kTiny);
  ASSERT_EQ(r.status, 0) << r.out << r.err;
  EXPECT_NE(r.err.find("round 1: rejected client 1's message: update of"), std::string::npos) << r.err;
  EXPECT_NE(r.out.find("round 2/2: 2 of 3 clients (0 dropped, 0 late, 1 rejected)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("1 rejected"), std::string::npos);
}

// Many clients, few per round: at the end every client exits while the server still runs, and
// no clean exit may read as "rank N died" (the race itself is pinned down deterministically
// by Failures.CleanExitDuringTheLivenessCheckIsNotADeath; this is the whole command, 5 runs).
TEST(FedCli, ManyClientsEndCleanlyEveryRun) {
  for (int run = 0; run < 5; ++run) {
    Result r = strata(std::string("fed train --clients 64 --per-round 2 --rounds 1") + kTiny);
    ASSERT_EQ(r.status, 0) << "run " << run << "\n" << r.out << r.err;
    EXPECT_EQ(r.err.find("died"), std::string::npos) << "run " << run << "\n" << r.err;
    EXPECT_NE(r.out.find("held-out loss"), std::string::npos) << r.out;
  }
}

TEST(FedCli, BadInputIsOneLine) {
  const std::pair<std::string, std::string> cases[] = {
      {"--clients 4 --per-round 3 --secure-agg --threshold 4",
       "--threshold 4 is larger than the clients per round (3)"},
      {"--clients 4 --clip-norm 1 --noise-multiplier 0", "--noise-multiplier must be > 0 (got 0)"},
      {"--clients 4 --clip-norm -2 --noise-multiplier 1", "--clip-norm must be > 0 (got -2)"},
      {"--clients 40 --per-round 3 --data synthetic:200", "--clients 40 is more than the data's shards"},
      {"--clients 4 --partition dirichlet:-1", "--partition dirichlet:A needs A > 0"},
  };
  for (const auto& [args, want] : cases) {
    Result r = strata("fed train " + args);
    EXPECT_EQ(r.status, 1) << args;
    EXPECT_NE(r.err.find(want), std::string::npos) << args << ": " << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << args << ": " << r.err;
  }
}

TEST(FedCli, CompareRunsAllFiveSettings) {
  Result r = strata("fed compare --clients 3 --per-round 3 --rounds 2 --local-steps 1 --local-batch 4 "
                    "--data synthetic:4097 --dim 16 --eval-windows 8");
  ASSERT_EQ(r.status, 0) << r.out << r.err;
  for (const char* row : {"centralized SGD ", "centralized DP-SGD ", "FedAvg iid ", "FedAvg dirichlet:0.1 ",
                          "FedAvg dirichlet:0.1 + DP + secure agg "})
    EXPECT_NE(r.out.find(row), std::string::npos) << row << "\n" << r.out;
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 6) << r.out;
}

TEST(PrivacyCli, PrintsEpsilonAndTheInverse) {
  Result r = strata("privacy --samples 60000 --batch 256 --noise-multiplier 1.1 --epochs 60 "
                    "--delta 1e-5 --conversion classic");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out.rfind("epsilon 3.01 at delta 1e-05", 0), 0u) << r.out;
  r = strata("privacy --samples 60000 --batch 256 --target-epsilon 3.01 --epochs 60 --conversion classic --json");
  ASSERT_EQ(r.status, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_NEAR(j["noise_multiplier"].get<double>(), 1.1, 0.01);
  r = strata("privacy --samples 100 --batch 10 --noise-multiplier -1 --epochs 1");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("--noise-multiplier must be > 0 (got -1)"), std::string::npos) << r.err;
  r = strata("privacy --samples 100 --batch 200 --noise-multiplier 1 --epochs 1");
  EXPECT_NE(r.err.find("--batch must be in [1, --samples = 100] (got 200)"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace strata::fed
