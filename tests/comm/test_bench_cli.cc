// `strata bench comm`: the table, --json rows, --check, bad input.
#include <gtest/gtest.h>

#include <sstream>

#include "nlohmann/json.hpp"
#include "support/run.h"

namespace strata::comm {
namespace {

// Expects every --json row of `out` to report no wrong element; returns the number of rows.
int rows_all_correct(const std::string& out) {
  std::istringstream in(out);
  int rows = 0;
  for (std::string line; std::getline(in, line); ++rows)
    EXPECT_EQ(nlohmann::json::parse(line)["wrong"], 0) << line;
  return rows;
}

TEST(BenchComm, JsonRowsWithCheckAreCorrect) {
  auto p = test::run({STRATA_BINARY, "bench", "comm", "--nproc", "3", "--op", "all", "-b", "8",
                         "-e", "256K", "-f", "8", "--iters", "2", "--warmup", "1", "--check", "--json"});
  std::string out = p.output();
  ASSERT_EQ(p.exit_code(), 0) << out;
  std::istringstream in(out);
  std::set<std::string> ops;
  int rows = 0;
  for (std::string line; std::getline(in, line);) {
    auto j = nlohmann::json::parse(line);
    for (const char* k : {"op", "bytes", "time_us", "algbw", "busbw", "wrong"}) ASSERT_TRUE(j.contains(k)) << line;
    EXPECT_EQ(j["wrong"], 0) << line;
    EXPECT_GT(j["time_us"].get<double>(), 0) << line;
    ops.insert(j["op"]);
    ++rows;
  }
  EXPECT_EQ(ops.size(), 7u);
  EXPECT_GT(rows, 30);
}

// --in-place runs all-reduce with send == recv; --check then verifies the in-place result.
TEST(BenchComm, InPlaceAllReduceIsChecked) {
  auto p = test::run({STRATA_BINARY, "bench", "comm", "--nproc", "2", "--op", "allreduce", "-b", "8",
                         "-e", "1M", "-f", "32", "--iters", "2", "--warmup", "1", "--check", "--json",
                         "--in-place"});
  std::string out = p.output();
  ASSERT_EQ(p.exit_code(), 0) << out;
  EXPECT_EQ(rows_all_correct(out), 4) << out;  // 8 B, 256 B, 8 KiB, 256 KiB
  auto bad = test::run({STRATA_BINARY, "bench", "comm", "--op", "all", "--in-place"});
  EXPECT_EQ(bad.exit_code(), 1) << bad.output();
  EXPECT_NE(bad.output().find("--in-place applies to --op allreduce only"), std::string::npos) << bad.output();
}

// Processes copy through the staging slots by default; STRATA_SHM_CMA=1 switches all-gather
// and broadcast to reading peers' buffers with cross-memory attach where the kernel allows
// it (else they stay staged). Both must give the same, correct results.
TEST(BenchComm, CrossMemoryAttachPathIsCorrect) {
  for (const char* op : {"allgather", "broadcast"}) {
    auto p = test::run({STRATA_BINARY, "bench", "comm", "--nproc", "3", "--op", op, "-b", "96K",
                           "-e", "3M", "-f", "4", "--iters", "2", "--warmup", "1", "--check",
                           "--json"},
                          {{"STRATA_SHM_CMA", "1"}});
    std::string out = p.output();
    ASSERT_EQ(p.exit_code(), 0) << out;
    EXPECT_EQ(rows_all_correct(out), 3) << out;
  }
}

TEST(BenchComm, TableHasNcclTestsColumnsAndBusFactors) {
  auto p = test::run({STRATA_BINARY, "bench", "comm", "--nproc", "4", "--op", "allreduce", "-b",
                         "1M", "-e", "1M", "--iters", "3", "--warmup", "1"});
  std::string out = p.output();
  ASSERT_EQ(p.exit_code(), 0) << out;
  EXPECT_NE(out.find("size(B)"), std::string::npos) << out;
  EXPECT_NE(out.find("busbw(GB/s)"), std::string::npos) << out;
  EXPECT_NE(out.find("# Avg bus bandwidth"), std::string::npos) << out;
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream f(line);
    size_t bytes, count;
    std::string type, redop, wrong;
    double t, alg, bus;
    f >> bytes >> count >> type >> redop >> t >> alg >> bus >> wrong;
    EXPECT_EQ(bytes, 1u << 20);
    EXPECT_EQ(count, (1u << 20) / 4);
    EXPECT_EQ(type, "float");
    EXPECT_EQ(redop, "sum");
    EXPECT_NEAR(bus, alg * 2.0 * 3 / 4, 0.002);  // all-reduce: 2(n-1)/n (3 decimals printed)
    EXPECT_EQ(wrong, "N/A");
  }
}

// STRATA_RANK/STRATA_WORLD_SIZE left from another job: refused in one line naming them,
// instead of joining that job as one rank and waiting out the timeout.
TEST(BenchComm, LeftoverRankEnvironmentIsRefused) {
  auto p = test::run({STRATA_BINARY, "bench", "comm", "--nproc", "2"},
                        {{"STRATA_RANK", "0"}, {"STRATA_WORLD_SIZE", "2"}, {"STRATA_JOB_ID", "leftover-bench"},
                         {"STRATA_TIMEOUT", "1"}, {"STRATA_LAUNCHER_PID", "1"}});
  std::string out = p.output();
  EXPECT_EQ(p.exit_code(), 1) << out;
  EXPECT_NE(out.find("strata bench comm: the environment holds STRATA_RANK=0 STRATA_WORLD_SIZE=2 "
                     "STRATA_JOB_ID=leftover-bench, but no strata launcher started this process"),
            std::string::npos) << out;
  EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 1) << out;
}

TEST(BenchComm, BadInputGivesOneLine) {
  struct Case {
    std::vector<std::string> args;
    std::string expect;
  };
  std::vector<Case> cases = {
      {{"--op", "gather"}, "unknown op 'gather'"},
      {{"--backend", "ib"}, "unknown communication backend 'ib'"},
      {{"-b", "1M", "-e", "1K"}, "size range is empty"},
      {{"-b", "0"}, "at least 1 byte"},
      {{"-e", "12Q"}, "unknown unit"},
      {{"-f", "1"}, "factor (-f) must be at least 2, got 1"},
      {{"-f", "-2"}, "factor (-f) must be at least 2, got -2"},
      {{"--nproc", "0"}, "--nproc must be at least 1, got 0"},
      {{"--dtype", "f16"}, "unknown dtype 'f16'"},
  };
  for (auto& c : cases) {
    std::vector<std::string> argv = {STRATA_BINARY, "bench", "comm"};
    argv.insert(argv.end(), c.args.begin(), c.args.end());
    auto p = test::run(argv);
    std::string out = p.output();
    EXPECT_EQ(p.exit_code(), 1) << out;
    EXPECT_NE(out.find(c.expect), std::string::npos) << out;
    EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 1) << out;
  }
}

// The shm spin knobs go through the environment registry: listed by --help-env, taken
// when well-formed (the collectives stay correct), refused by name when not.
TEST(BenchComm, ShmSpinKnobsAreRegisteredAndChecked) {
  auto help = test::run({STRATA_BINARY, "--help-env"});
  ASSERT_EQ(help.exit_code(), 0) << help.output();
  for (const char* name : {"STRATA_SHM_SPIN_MIN_US", "STRATA_SHM_YIELD_AFTER_US", "STRATA_SHM_SPIN_US"})
    EXPECT_NE(help.output().find(name), std::string::npos) << name << "\n" << help.output();
  const std::vector<std::string> bench = {STRATA_BINARY, "bench", "comm", "--nproc", "2", "--op",
                                          "allreduce", "-b", "4K", "-e", "4K", "--iters", "2",
                                          "--warmup", "1", "--check", "--json"};
  auto ok = test::run(bench, {{"STRATA_SHM_SPIN_MIN_US", "0"}, {"STRATA_SHM_YIELD_AFTER_US", "20"}});
  ASSERT_EQ(ok.exit_code(), 0) << ok.output();
  EXPECT_EQ(nlohmann::json::parse(ok.output())["wrong"], 0) << ok.output();
  for (auto [name, value] : {std::pair{"STRATA_SHM_SPIN_MIN_US", "-5"}, {"STRATA_SHM_YIELD_AFTER_US", "soon"}}) {
    auto bad = test::run(bench, {{name, value}});
    EXPECT_NE(bad.exit_code(), 0) << bad.output();
    EXPECT_NE(bad.output().find(name), std::string::npos) << bad.output();
  }
}

}  // namespace
}  // namespace strata::comm
