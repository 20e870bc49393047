// `strata launch`: rank environment, prefixed output, failure reports, bad input.
#include <gtest/gtest.h>

#include "comm/bootstrap.h"
#include "launcher/launcher.h"
#include "support/run.h"

namespace strata::launcher {

using namespace strata::comm;
namespace {

using test::run;

TEST(Launcher, SetsTheRankEnvironmentAndPrefixesOutput) {
  auto p = run({STRATA_BINARY, "launch", "-n", "3", "--", COMM_WORKER, "env"});
  std::string out = p.output();
  EXPECT_EQ(p.exit_code(), 0) << out;
  for (int r = 0; r < 3; ++r)
    EXPECT_NE(out.find("[rank " + std::to_string(r) + "] rank=" + std::to_string(r) +
                       " world=3 local=" + std::to_string(r) + "/3 source=strata job=set"),
              std::string::npos) << out;
}

TEST(Launcher, ReportsTheFailingRankAndItsExitCode) {
  auto p = run({STRATA_BINARY, "launch", "-n", "3", "--grace", "1", "--", "sh", "-c",
                "if [ $STRATA_RANK = 1 ]; then echo bye; exit 7; fi; sleep 30"});
  std::string out = p.output();
  EXPECT_EQ(p.exit_code(), 7) << out;
  EXPECT_NE(out.find("[rank 1] bye"), std::string::npos) << out;
  EXPECT_NE(out.find("strata launch: rank 1 exited with code 7"), std::string::npos) << out;
}

TEST(Launcher, PartialLinesAndStderrArePrefixed) {
  auto p = run({STRATA_BINARY, "launch", "-n", "2", "--", "sh", "-c", "printf 'a\\nb'; echo err >&2"});
  std::string out = p.output();
  EXPECT_EQ(p.exit_code(), 0) << out;
  EXPECT_NE(out.find("[rank 0] a\n"), std::string::npos) << out;
  EXPECT_NE(out.find("[rank 1] b\n"), std::string::npos) << out;
  EXPECT_NE(out.find("[rank 1] err\n"), std::string::npos) << out;
}

TEST(Launcher, BadInputGivesOneLine) {
  struct Case {
    std::vector<std::string> args;
    std::string expect;
  };
  std::vector<Case> cases = {
      {{"launch", "-n", "0", "--", "true"}, "at least 1, got 0"},
      {{"launch", "-n", "2", "--", "no-such-program-xyz"}, "program 'no-such-program-xyz' not found in PATH"},
      {{"launch", "-n", "2", "--backend", "gloo", "--", "true"}, "unknown communication backend 'gloo' (expected shm, mpi or tcp)"},
      {{"launch", "-n", "2", "--timeout", "-1", "--", "true"}, "--timeout must not be negative"},
  };
  for (auto& c : cases) {
    std::vector<std::string> argv = {STRATA_BINARY};
    argv.insert(argv.end(), c.args.begin(), c.args.end());
    auto p = run(argv);
    std::string out = p.output();
    EXPECT_EQ(p.exit_code(), 1) << out;
    EXPECT_NE(out.find(c.expect), std::string::npos) << out;
    EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 1) << out;
  }
}

TEST(Launcher, MissingMpirunIsReported) {
  auto p = run({STRATA_BINARY, "launch", "-n", "2", "--backend", "mpi", "--", "/bin/true"},
               {{"PATH", "/nonexistent"}});
  std::string out = p.output();
  EXPECT_EQ(p.exit_code(), 1) << out;
  EXPECT_NE(out.find("'mpirun' not found"), std::string::npos) << out;
}

TEST(Launcher, RestartsCleanlyInALoop) {
  // A supervisor calls launch() repeatedly; no state leaks between runs.
  for (int i = 0; i < 3; ++i) {
    LaunchOptions o;
    o.nproc = 2;
    o.command = {COMM_WORKER, "env"};
    o.prefix_output = false;
    LaunchResult r = launch(o);
    EXPECT_EQ(r.exit_code, 0);
    EXPECT_EQ(r.failed_rank, -1);
  }
}

TEST(Bootstrap, RecognisesOtherLaunchers) {
  struct Case {
    std::vector<std::pair<std::string, std::string>> env;
    std::string want;
  };
  std::vector<Case> cases = {
      {{{"OMPI_COMM_WORLD_RANK", "2"}, {"OMPI_COMM_WORLD_SIZE", "4"}, {"OMPI_COMM_WORLD_LOCAL_RANK", "0"},
        {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}}, "rank=2 world=4 local=0/2 source=ompi"},
      {{{"PMI_RANK", "1"}, {"PMI_SIZE", "3"}}, "rank=1 world=3 local=1/3 source=pmi"},
      {{{"SLURM_PROCID", "5"}, {"SLURM_NTASKS", "8"}, {"SLURM_LOCALID", "1"}, {"SLURM_JOB_ID", "77"}},
       "rank=5 world=8 local=1/8 source=slurm job=set"},
      {{{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "1"}, {"LOCAL_WORLD_SIZE", "2"}},
       "rank=1 world=2 local=1/2 source=torchrun"},
      {{}, "rank=0 world=1 local=0/1 source=none"},
  };
  for (auto& c : cases) {
    auto p = run({COMM_WORKER, "env"}, c.env);
    EXPECT_NE(p.output().find(c.want), std::string::npos) << p.output() << " want " << c.want;
  }
  auto bad = run({COMM_WORKER, "env"}, {{"STRATA_RANK", "3"}, {"STRATA_WORLD_SIZE", "2"}});
  EXPECT_NE(bad.output().find("STRATA_RANK=3 is not below STRATA_WORLD_SIZE=2"), std::string::npos)
      << bad.output();
}

}  // namespace
}  // namespace strata::launcher
