// The tcp backend: its rendezvous store, the sweep every backend passes, bench --check, a
// dead rank and a stopped rank named by their peers, and training that equals shm's losses.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <sstream>
#include <thread>

#include "comm/bootstrap.h"
#include "comm/process_group.h"
#include "comm/tcp/store.h"
#include "core/error.h"
#include "core/timer.h"
#include "launcher/launcher.h"
#include "multiproc_checks.h"
#include "nlohmann/json.hpp"
#include "support/run.h"
#include "support/temp_dir.h"

namespace strata::comm {

using namespace strata::launcher;  // the launcher starts these tests' ranks
namespace {

using tcp::StoreClient;
using tcp::StoreServer;

TEST(Tcp, StoreSetGetWaitAddAndTimeouts) {
  StoreServer server("127.0.0.1", 0);
  const std::string addr = cat("127.0.0.1:", server.port());
  StoreClient a(addr, 5), b(addr, 5);
  EXPECT_EQ(a.local_ip(), "127.0.0.1");
  a.set("k", "v1");
  EXPECT_EQ(b.try_get("k"), "v1");
  EXPECT_EQ(server.get("k"), "v1");
  EXPECT_FALSE(b.try_get("missing").has_value());
  // Binary values: zero bytes and a large value survive.
  std::string bin("a\0b\xff", 4), big(3 << 20, 'x');
  big[12345] = '\0';
  a.set("bin", bin);
  a.set("big", big);
  EXPECT_EQ(b.wait_get("bin", 1), bin);
  EXPECT_EQ(b.wait_get("big", 1), big);
  // A wait is released by a later set (a client's, then the hosting process's own).
  int64_t t0 = now_ns();
  std::thread setter([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(150));
    a.set("later", "here");
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    server.set("local", "too");
  });
  EXPECT_EQ(b.wait_get("later", 5), "here");
  EXPECT_GE(now_ns() - t0, 100'000'000);
  StoreClient c(addr, 5);
  EXPECT_EQ(c.wait_get("local", 5), "too");
  setter.join();
  // A wait that runs out names the key; the connection stays usable.
  try {
    b.wait_get("never", 0.2);
    ADD_FAILURE() << "no timeout";
  } catch (const TimeoutError& e) {
    EXPECT_NE(std::string(e.what()).find("'never'"), std::string::npos) << e.what();
  }
  EXPECT_EQ(b.try_get("k"), "v1");
  // Many clients on many threads count atomically.
  std::vector<std::thread> ts;
  for (int t = 0; t < 8; ++t)
    ts.emplace_back([&] {
      StoreClient cl(addr, 5);
      for (int i = 0; i < 50; ++i) cl.add("count", 1);
    });
  for (auto& t : ts) t.join();
  EXPECT_EQ(a.add("count", 0), 400);
  server.erase_prefix("b");
  EXPECT_FALSE(a.try_get("bin").has_value());
  EXPECT_FALSE(a.try_get("big").has_value());
  EXPECT_EQ(a.try_get("k"), "v1");
}

TEST(Tcp, StoreClientNamesAnUnreachableAddress) {
  int port;
  {
    StoreServer gone("127.0.0.1", 0);
    port = gone.port();
  }
  try {
    StoreClient c(cat("127.0.0.1:", port), 0.3);
    ADD_FAILURE() << "connected to a closed port";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(cat("127.0.0.1:", port)), std::string::npos) << e.what();
  }
}

TEST(Tcp, SweepOnThreeRanks) {
  auto p = test::run({STRATA_BINARY, "launch", "-n", "3", "--backend", "tcp", "--timeout", "60", "--",
                      COMM_WORKER, "sweep"}, {}, 150);
  std::string out = p.output();
  EXPECT_EQ(p.exit_code(), 0) << out;
  EXPECT_NE(out.find("[rank 2] checked"), std::string::npos) << out;
  EXPECT_EQ(out.find("FAIL"), std::string::npos) << out;
}

TEST(Tcp, BenchCheckOnTwoRanks) {
  auto p = test::run({STRATA_BINARY, "bench", "comm", "--backend", "tcp", "--nproc", "2", "--op", "all",
                      "-b", "8", "-e", "64K", "-f", "16", "--iters", "2", "--warmup", "1", "--check",
                      "--dtype", "bfloat16"}, {}, 120);
  std::string out = p.output();
  ASSERT_EQ(p.exit_code(), 0) << out;
  EXPECT_NE(out.find("backend tcp, 2 ranks"), std::string::npos) << out;
  int rows = testing::expect_bench_rows_right(out);
  EXPECT_GE(rows, 14);
}

// Ranks started by the test around a store it hosts, so each rank's own output is seen.
std::vector<test::Proc> start_ranks(int n, const std::string& what, const StoreServer& store,
                                    const std::string& timeout_s) {
  std::vector<test::Proc> ranks;
  std::string job = new_job_id();
  for (int r = 0; r < n; ++r)
    ranks.push_back(test::start({COMM_WORKER, what},
                                {{"STRATA_RANK", std::to_string(r)}, {"STRATA_WORLD_SIZE", std::to_string(n)},
                                 {"STRATA_JOB_ID", job}, {"STRATA_BACKEND", "tcp"},
                                 {"STRATA_STORE", cat("127.0.0.1:", store.port())},
                                 {"STRATA_TIMEOUT", timeout_s}}));
  return ranks;
}

// Rank 2 of 3 is SIGKILLed: the survivors fail within seconds naming it, not after the
// 60 s timeout.
TEST(Tcp, DeadRankIsNamedBySurvivorsQuickly) {
  StoreServer store("127.0.0.1", 0);
  int64_t t0 = now_ns();
  auto ranks = start_ranks(3, "kill-mid", store, "60");
  for (auto& p : ranks) ASSERT_TRUE(test::wait_for(p, 40));
  EXPECT_LT(double(now_ns() - t0) * 1e-9, 15.0);
  testing::expect_survivors_name_dead_rank(ranks, 2);
}

// Rank 1 is stopped (SIGSTOP): its connections stay open, so only the timeout can tell;
// rank 0 times out naming it.
TEST(Tcp, StoppedRankTimesOutNamingIt) {
  StoreServer store("127.0.0.1", 0);
  auto ranks = start_ranks(2, "hang", store, "3");
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  kill(ranks[1].pid, SIGSTOP);
  ASSERT_TRUE(test::wait_for(ranks[0], 40));
  kill(ranks[1].pid, SIGKILL);
  kill(ranks[1].pid, SIGCONT);
  test::wait_for(ranks[1], 10);
  std::string out = ranks[0].output();
  EXPECT_EQ(ranks[0].exit_code(), 4) << out;
  EXPECT_NE(out.find("timeout: "), std::string::npos) << out;
  EXPECT_NE(out.find("rank 1"), std::string::npos) << out;
}

// A world that cannot form names the rank that never published its address.
TEST(Tcp, MissingRankIsNamedAtConnect) {
  StoreServer store("127.0.0.1", 0);
  Options o;
  o.timeout_s = 0.5;
  try {
    connect_tcp(cat("127.0.0.1:", store.port()), "lonely", 0, 3, o);
    ADD_FAILURE() << "a world of 3 formed with one rank";
  } catch (const TimeoutError& e) {
    EXPECT_NE(std::string(e.what()).find("ranks 1, 2 never published"), std::string::npos) << e.what();
  }
}

// What live recovery does: the same processes (threads here) form a world, lose a member,
// and form a smaller one under a new job id through the same store; the old world's keys
// and listeners play no part.
TEST(Tcp, WorldFormsAgainUnderANewJobInProcess) {
  StoreServer store("127.0.0.1", 0);
  const std::string addr = cat("127.0.0.1:", store.port());
  Options o;
  o.timeout_s = 20;
  auto form_and_reduce = [&](const std::string& job, int size) {
    std::vector<std::thread> ts;
    std::vector<float> sums(static_cast<size_t>(size), 0);
    std::vector<std::string> errors(static_cast<size_t>(size));
    for (int r = 0; r < size; ++r)
      ts.emplace_back([&, r] {
        try {
          GroupPtr pg = connect_tcp(addr, job, r, size, o);
          float v = float(r + 1);
          pg->all_reduce(&v, &v, 1, DType::f32, ReduceOp::sum);
          sums[size_t(r)] = v;
        } catch (const std::exception& e) {
          errors[size_t(r)] = e.what();
        }
      });
    for (auto& t : ts) t.join();
    for (int r = 0; r < size; ++r) {
      EXPECT_EQ(errors[size_t(r)], "") << job;
      EXPECT_EQ(sums[size_t(r)], float(size * (size + 1) / 2)) << job << " rank " << r;
    }
  };
  form_and_reduce("job-a", 3);
  form_and_reduce("job-b", 2);
  EXPECT_TRUE(store.get("job-a/w/addr/2").has_value());
  EXPECT_FALSE(store.get("job-b/w/addr/2").has_value());
}

// With STRATA_TCP_CHECK_OPS=1, ranks calling different collectives or counts at one sequence
// number fail at once naming both, as under shm.
TEST(Tcp, CheckedOpsNameMismatchedRanks) {
  StoreServer store("127.0.0.1", 0);
  const std::string addr = cat("127.0.0.1:", store.port());
  setenv("STRATA_TCP_CHECK_OPS", "1", 1);
  Options o;
  o.timeout_s = 10;
  for (int variant = 0; variant < 2; ++variant) {
    std::vector<std::string> msgs(2);
    std::vector<std::thread> ts;
    for (int r = 0; r < 2; ++r)
      ts.emplace_back([&, r] {
        std::vector<float> x(64);
        try {
          GroupPtr pg = connect_tcp(addr, cat("check-", variant), r, 2, o);
          float v = 1;
          pg->all_reduce(&v, &v, 1, DType::f32, ReduceOp::sum);  // agreeing ops pass the check
          if (variant == 0)
            pg->all_reduce(x.data(), x.data(), r == 0 ? 10 : 11, DType::f32, ReduceOp::sum);
          else if (r == 0)
            pg->all_reduce(x.data(), x.data(), 8, DType::f32, ReduceOp::sum);
          else
            pg->broadcast(x.data(), 8, DType::f32, 0);
        } catch (const Error& e) {
          msgs[size_t(r)] = e.what();
        }
      });
    for (auto& t : ts) t.join();
    for (const std::string& m : msgs) {
      EXPECT_NE(m.find("mismatched collectives"), std::string::npos) << m;
      EXPECT_NE(m.find(variant == 0 ? "rank 0: allreduce #1 float sum count 10" : "rank 1: broadcast #1"),
                std::string::npos) << m;
    }
  }
  unsetenv("STRATA_TCP_CHECK_OPS");
}

// A restart (--max-restarts) forms its world under the fresh job id with the same store.
TEST(Tcp, LauncherRestartFormsANewWorld) {
  auto p = test::run({STRATA_BINARY, "launch", "-n", "2", "--backend", "tcp", "--timeout", "30",
                      "--max-restarts", "1", "--", "sh", "-c",
                      std::string("if [ \"$STRATA_RESTART\" = 0 ] && [ \"$STRATA_RANK\" = 1 ]; then exit 3; fi; "
                                  "exec ") + COMM_WORKER + " sweep"}, {}, 120);
  std::string out = p.output();
  EXPECT_EQ(p.exit_code(), 0) << out;
  EXPECT_NE(out.find("restart 1/1"), std::string::npos) << out;
  EXPECT_NE(out.find("[rank 1] checked"), std::string::npos) << out;
}

// Across hosts the launcher reaches each host before any rank starts (the ranks run there
// through the remote shell): one that does not answer is one line naming it.
TEST(Tcp, AnUnreachableHostIsOneLineBeforeAnyRankStarts) {
  auto p = test::run({STRATA_BINARY, "launch", "-n", "2", "--backend", "tcp", "--hosts", "a:1,b:1",
                      "--rsh-agent", "/bin/false", "--", "true"}, {}, 30);
  std::string out = p.output();
  EXPECT_NE(p.exit_code(), 0) << out;
  EXPECT_NE(out.find("host 'a' is unreachable: `/bin/false a` exited with code 1"), std::string::npos) << out;
}

// Two ranks on two namespace hosts (tools/netns-cluster); the store in this process, on the
// cluster's bridge. Host 1's interface goes down while rank 0 waits on rank 1: no FIN ever
// arrives, so the control connection's keepalive must name rank 1 dead within seconds,
// long before the 60 s timeout. Skipped without root or `ip netns`.
TEST(Tcp, VanishedHostIsNamedDeadByKeepalive) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root for network namespaces (tools/netns-cluster)";
  if (std::system("ip netns list >/dev/null 2>&1") != 0) GTEST_SKIP() << "`ip netns` is unavailable";
  const std::string cluster = std::string(STRATA_SOURCE_DIR) + "/tools/netns-cluster";
  const std::string name = cat("tcp", getpid() % 100000), state = "/tmp/netns-cluster-" + name;
  auto up = test::run({cluster, "up", "--name", name, "--hosts", "2", "--ranks-per-host", "1"}, {}, 60);
  ASSERT_EQ(up.exit_code(), 0) << up.output();
  struct Down {
    std::string cluster, name;
    ~Down() { test::run({cluster, "down", "--name", name}, {}, 60); }
  } down{cluster, name};
  StoreServer store("0.0.0.0", 0);
  std::string subnet = test::read_file(state + "/subnet");  // 10.77.K.0/24
  std::string bridge = subnet.substr(0, subnet.rfind('.')) + ".1";
  std::string job = new_job_id();
  std::vector<test::Proc> ranks;
  for (int r = 0; r < 2; ++r)
    ranks.push_back(test::start({state + "/rsh-agent", cat(name, "-h", r), "env", cat("STRATA_RANK=", r),
                                 "STRATA_WORLD_SIZE=2", "STRATA_JOB_ID=" + job, "STRATA_BACKEND=tcp",
                                 cat("STRATA_STORE=", bridge, ":", store.port()), "STRATA_TIMEOUT=60",
                                 "STRATA_TCP_KEEPALIVE_S=3", COMM_WORKER, "hang"}));
  // Both in the world (however long a loaded machine takes to start them); rank 1 "computes".
  for (int waited_ms = 0; waited_ms < 60000; waited_ms += 20) {
    if (test::read_file(ranks[0].out_path).find("in the world") != std::string::npos &&
        test::read_file(ranks[1].out_path).find("in the world") != std::string::npos)
      break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_NE(test::read_file(ranks[1].out_path).find("in the world"), std::string::npos)
      << "the ranks did not form their world within 60 s";
  int64_t t0 = now_ns();
  auto ifdown = test::run({cluster, "ifdown", "--host", "1", "--name", name}, {}, 60);
  ASSERT_EQ(ifdown.exit_code(), 0) << ifdown.output();
  ASSERT_TRUE(test::wait_for(ranks[0], 40));
  double took = double(now_ns() - t0) * 1e-9;
  kill(ranks[1].pid, SIGKILL);
  test::wait_for(ranks[1], 10);
  std::string out = ranks[0].output();
  EXPECT_NE(ranks[0].exit_code(), 0) << out;
  EXPECT_NE(out.find("rank 1 (world rank 1) died"), std::string::npos) << out;
  EXPECT_LT(took, 20.0) << out;
}

std::vector<double> losses(const std::string& out) {
  std::vector<double> l;
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);) {
    if (!nlohmann::json::accept(line)) continue;
    auto j = nlohmann::json::parse(line);
    if (j.contains("loss") && j.contains("step")) l.push_back(j["loss"].get<double>());
  }
  return l;
}

// Data-parallel training over tcp gives shm's losses bit for bit (both reduce each element's
// inputs at once in rank order).
TEST(Tcp, TrainMatchesShmBitForBit) {
  const std::string model =
      "train --layers 2 --dim 32 --heads 2 --seq 16 --vocab 256 --data synthetic --batch 12 "
      "--lr 3e-3 --eval-every 0 --eval-batches 1 --sample-tokens 0 --peak-gflops 100 --threads 1 "
      "--steps 4 --nproc 2 --json ";
  for (int zero : {0, 1, 2}) {
    test::TempDir a("tcp-train"), b("shm-train");
    auto shm = test::run_strata(model + "--zero " + std::to_string(zero) + " --backend shm --run-dir " + a.str(),
                                "", test::Streams::separate, 120);
    auto tcp = test::run_strata(model + "--zero " + std::to_string(zero) + " --backend tcp --run-dir " + b.str(),
                                "", test::Streams::separate, 120);
    ASSERT_EQ(shm.status, 0) << shm.err;
    ASSERT_EQ(tcp.status, 0) << tcp.err;
    auto ls = losses(shm.out), lt = losses(tcp.out);
    ASSERT_EQ(ls.size(), 4u) << shm.out;
    ASSERT_EQ(lt.size(), ls.size()) << tcp.out;
    for (size_t i = 0; i < ls.size(); ++i) EXPECT_EQ(ls[i], lt[i]) << "zero " << zero << " step " << i;
  }
}

}  // namespace
}  // namespace strata::comm
