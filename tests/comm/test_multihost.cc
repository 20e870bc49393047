// Several hosts: a namespace cluster of 2 hosts x 2 ranks (tools/netns-cluster) runs the
// collective sweep through mpirun, hierarchical collectives forced, and must match the
// single-host reference; bad host lists fail before any rank starts. Skipped (with the
// reason) without root, `ip netns` or MPI.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <regex>

#include "comm/hier/topology.h"
#include "comm/hostlist.h"
#include "comm/mpi/mpi_transport.h"
#include "support/run.h"

namespace strata::comm {
namespace {

TEST(HostList, ParsesAndRejects) {
  auto h = parse_hosts("a:2,b,c.example:3");
  ASSERT_EQ(h.size(), 3u);
  EXPECT_EQ(format_hosts(h), "a:2,b:1,c.example:3");
  EXPECT_EQ(total_slots(h), 6);
  EXPECT_NO_THROW(check_hosts(h, 6, "--hosts"));
  EXPECT_THROW(check_hosts(h, 7, "--hosts"), Error);
  EXPECT_THROW(check_hosts(parse_hosts("a:1,a:1"), 2, "--hosts"), Error);
  for (const char* bad : {"", "a:0", "a:x", "a:2,,b", "a b:1", "a:-1"})
    EXPECT_THROW(parse_hosts(bad), Error) << bad;
}

TEST(HostLayout, FromNames) {
  HostLayout l = layout_from_names({"x", "y", "x", "y"});
  EXPECT_EQ(l.num_hosts(), 2);
  EXPECT_EQ(l.host_of, (std::vector<int>{0, 1, 0, 1}));
  EXPECT_EQ(l.local_rank, (std::vector<int>{0, 0, 1, 1}));
  EXPECT_TRUE(l.uniform());
  EXPECT_EQ(l.describe(), "2 hosts x 2 ranks (x: 0 2; y: 1 3)");
  EXPECT_FALSE(layout_from_names({"x", "x", "y"}).uniform());
}

const std::string kCluster = std::string(STRATA_SOURCE_DIR) + "/tools/netns-cluster";

class MultiHost : public ::testing::Test {
 public:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "needs root for network namespaces (tools/netns-cluster)";
    if (std::system("ip netns list >/dev/null 2>&1") != 0) GTEST_SKIP() << "`ip netns` is unavailable";
    if (access("/usr/bin/mpirun", X_OK) != 0 || !detail::mpi_available()) GTEST_SKIP() << "no MPI";
    name_ = cat("smt", getpid() % 100000);
    state_ = "/tmp/netns-cluster-" + name_;
  }
  void up(int hosts) {
    auto p = test::run({kCluster, "up", "--name", name_, "--hosts", std::to_string(hosts),
                           "--ranks-per-host", "2"}, {}, 60);
    ASSERT_EQ(p.exit_code(), 0) << p.output();
    up_ = true;
  }
  void TearDown() override {
    if (up_) test::run({kCluster, "down", "--name", name_}, {}, 60);
  }
  std::vector<std::string> launch(const std::vector<std::string>& where) {
    std::vector<std::string> a = {STRATA_BINARY, "launch", "--backend", "mpi", "--rsh-agent",
                                  state_ + "/rsh-agent", "--timeout", "60"};
    a.insert(a.end(), where.begin(), where.end());
    return a;
  }
  std::string h(int i) const { return cat(name_, "-h", i); }
  std::string name_, state_;
  bool up_ = false;
};

// The sweep (its reference is the single-host result) with every all-reduce, reduce-scatter
// and all-gather hierarchical; each rank reports the hosts it saw and the algorithms it ran.
void sweep_on_hosts(MultiHost& t, int hosts) {
  auto args = t.launch({"--hostfile", t.state_ + "/hostfile", "--", COMM_WORKER, "sweep"});
  auto p = test::run(args, {{"STRATA_HIER", "hierarchical"}}, 180);
  std::string out = p.output();
  ASSERT_EQ(p.exit_code(), 0) << out;
  EXPECT_EQ(out.find("FAIL"), std::string::npos) << out;
  std::string placement;
  for (int h = 0; h < hosts; ++h) placement += cat(h ? "; " : "", t.h(h), ": ", 2 * h, " ", 2 * h + 1);
  for (int r = 0; r < 2 * hosts; ++r) {
    EXPECT_NE(out.find(cat("[rank ", r, "] checked")), std::string::npos) << out;
    std::regex hier(cat(R"(\[rank )", r, R"(\] hosts: )", hosts, R"( hosts x 2 ranks \()", placement,
                        R"(\); hierarchical/flat: all-reduce [1-9]\d*/\d+, reduce-scatter [1-9]\d*/\d+, )",
                        R"(all-gather [1-9]\d*/\d+ )"));
    EXPECT_TRUE(std::regex_search(out, hier)) << "rank " << r << ":\n" << out;
  }
}

TEST_F(MultiHost, SweepOnTwoHostsMatchesOneHost) {
  up(2);
  sweep_on_hosts(*this, 2);
}

TEST_F(MultiHost, SweepOnThreeHostsMatchesOneHost) {
  up(3);
  sweep_on_hosts(*this, 3);
}

TEST_F(MultiHost, BadHostListsFailBeforeAnyRankStarts) {
  up(2);
  std::string marker = cat("/tmp/strata-multihost-marker-", getpid());
  unlink(marker.c_str());
  const std::vector<std::string> prog = {"--", "sh", "-c", "touch " + marker};
  struct Case {
    std::vector<std::string> where;
    std::string message;
  };
  std::string bad_file = state_ + "/twice";
  FILE* f = std::fopen(bad_file.c_str(), "w");
  ASSERT_TRUE(f);
  std::fprintf(f, "%s slots=2\n%s slots=1\n", h(0).c_str(), h(0).c_str());
  std::fclose(f);
  const Case cases[] = {
      {{"--hostfile", bad_file}, cat("hostfile ", bad_file, ": host '", h(0), "' appears twice")},
      {{"--hosts", cat(h(0), ":2,", h(1), ":2"), "-n", "5"},
       cat("--hosts: 5 ranks but only 4 slots (", h(0), ":2,", h(1), ":2)")},
      {{"--hosts", cat(h(0), ":2,", name_, "-h7:2")}, cat("host '", name_, "-h7' is unreachable")},
  };
  for (const Case& c : cases) {
    std::vector<std::string> args = launch(c.where);
    args.insert(args.end(), prog.begin(), prog.end());
    auto p = test::run(args, {}, 60);
    std::string out = p.output();
    EXPECT_NE(p.exit_code(), 0) << out;
    EXPECT_NE(out.find(c.message), std::string::npos) << out;
    EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 1) << "one line expected:\n" << out;
  }
  struct stat st {};
  EXPECT_NE(stat(marker.c_str(), &st), 0) << "a rank ran despite the bad host list";
}

}  // namespace
}  // namespace strata::comm
