// The mpi backend runs the same sweep as the shm backend, through mpirun (kept small: mpirun
// start-up dominates). Skipped when this build or machine has no MPI.
#include <gtest/gtest.h>
#include <unistd.h>

#include "comm/mpi/mpi_transport.h"
#include "launcher/launcher.h"
#include "multiproc_checks.h"
#include "support/run.h"

namespace strata::comm {

using namespace strata::launcher;  // the launcher starts these tests' ranks
namespace {

bool have_mpirun() { return access("/usr/bin/mpirun", X_OK) == 0 && detail::mpi_available(); }

TEST(Mpi, SweepOnThreeRanks) {
  if (!have_mpirun()) GTEST_SKIP() << "no MPI";
  auto p = test::run({STRATA_BINARY, "launch", "-n", "3", "--backend", "mpi", "--timeout", "60",
                         "--", COMM_WORKER, "sweep"}, {}, 150);
  std::string out = p.output();
  EXPECT_EQ(p.exit_code(), 0) << out;
  EXPECT_NE(out.find("[rank 2] checked"), std::string::npos) << out;
  EXPECT_EQ(out.find("FAIL"), std::string::npos) << out;
}

TEST(Mpi, BenchCheckOnTwoRanks) {
  if (!have_mpirun()) GTEST_SKIP() << "no MPI";
  auto p = test::run({STRATA_BINARY, "bench", "comm", "--backend", "mpi", "--nproc", "2", "--op",
                         "all", "-b", "8", "-e", "64K", "-f", "16", "--iters", "2", "--warmup", "1",
                         "--check", "--dtype", "bfloat16"}, {}, 120);
  std::string out = p.output();
  ASSERT_EQ(p.exit_code(), 0) << out;
  EXPECT_NE(out.find("backend mpi, 2 ranks"), std::string::npos) << out;
  EXPECT_NE(out.find("bfloat16"), std::string::npos) << out;
  int rows = testing::expect_bench_rows_right(out);
  EXPECT_GE(rows, 14);
}

TEST(Mpi, FailingRankIsNamed) {
  if (!have_mpirun()) GTEST_SKIP() << "no MPI";
  auto p = test::run({STRATA_BINARY, "launch", "-n", "2", "--backend", "mpi", "--", "sh", "-c",
                         "if [ $OMPI_COMM_WORLD_RANK = 1 ]; then exit 6; fi; sleep 20"}, {}, 60);
  std::string out = p.output();
  EXPECT_NE(p.exit_code(), 0) << out;
  EXPECT_NE(out.find("strata launch: rank 1 exited with code 6"), std::string::npos) << out;
}

}  // namespace
}  // namespace strata::comm
