// Every collective x dtype x world size x count on the shm backend, ranks as threads.
// Shrunk staging (small path <= 256 B, 4 KiB chunks, 2 slots) drives the pipelined
// algorithms through many rounds and slot reuse with small buffers; default options check
// the sizes the real defaults choose.
#include <gtest/gtest.h>

#include <cstdlib>

#include "comm/process_group.h"
#include "comm/shm/shm_transport.h"
#include "core/error.h"
#include "support/run.h"
#include "sweep.h"

namespace strata::comm {
namespace {

const std::vector<size_t> kCounts = {0, 1, 2, 7, 13, 64, 100, 1031, 5000};

Options shrunk() {
  Options o;
  o.small_max_bytes = 256;
  o.chunk_bytes = 4096;
  o.pipeline_depth = 2;
  o.p2p_slot_bytes = 256;
  o.p2p_slots = 2;
  o.timeout_s = 60;
  return o;
}

void sweep(int world, const Options& opt, const std::vector<size_t>& counts,
           const std::vector<DType>& dtypes) {
  std::vector<std::string> failures;
  std::mutex mu;
  run_threads(world, [&](ProcessGroup& pg) {
    testing::Sweep s{pg};
    s.run(counts, dtypes);
    std::lock_guard lk(mu);
    failures.insert(failures.end(), s.failures.begin(), s.failures.end());
  }, opt);
  for (const std::string& f : failures) ADD_FAILURE() << f;
}

class CollectivesTest : public ::testing::TestWithParam<int> {};

TEST_P(CollectivesTest, ShrunkStagingAllDTypes) {
  sweep(GetParam(), shrunk(), kCounts, testing::kAllDTypes);
}

TEST_P(CollectivesTest, DefaultStagingLargeCounts) {
  Options o;
  o.timeout_s = 60;
  // 70000 f32 = 280 KB: beyond the 64 KiB flat path and over one 256 KiB chunk.
  sweep(GetParam(), o, {3, 70000}, {DType::f32, DType::bf16});
}

TEST_P(CollectivesTest, ForcedFlatAndPipelined) {
  for (ShmAlgo algo : {ShmAlgo::flat, ShmAlgo::pipelined}) {
    Options o = shrunk();
    o.small_max_bytes = 64 << 10;
    o.algo = algo;
    sweep(GetParam(), o, {0, 1, 33, 999}, {DType::f32, DType::i64});
  }
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, CollectivesTest, ::testing::Values(1, 2, 3, 4, 5, 8));

// Which algorithm ran, by the process-wide counts: 3 ranks (threads) per collective. A
// 256-byte all-reduce fits the 1 KiB flat staging, a 16 KiB one does not.
TEST(CollectivesAlgo, ForcedFlatIsNotAutomatic) {
  auto runs = [](ShmAlgo algo, size_t count, std::string* error) {
    Options o = shrunk();
    o.small_max_bytes = 1024;
    o.algo = algo;
    shm::AlgoRuns before = shm::algo_runs();
    run_threads(3, [&](ProcessGroup& pg) {
      std::vector<float> x(count, 1.0f);
      try {
        pg.all_reduce(x.data(), x.size());
        EXPECT_EQ(x[count - 1], 3.0f);
      } catch (const Error& e) {
        if (pg.rank() == 0) *error = e.what();
      }
    }, o);
    shm::AlgoRuns after = shm::algo_runs();
    return std::make_pair(after.flat - before.flat, after.other - before.other);
  };
  std::string err;
  using P = std::pair<uint64_t, uint64_t>;
  EXPECT_EQ(runs(ShmAlgo::automatic, 64, &err), P(3, 0));
  EXPECT_EQ(runs(ShmAlgo::flat, 64, &err), P(3, 0));
  EXPECT_EQ(runs(ShmAlgo::pipelined, 64, &err), P(0, 3));
  EXPECT_EQ(runs(ShmAlgo::automatic, 4096, &err), P(0, 3));
  EXPECT_EQ(runs(ShmAlgo::pipelined, 4096, &err), P(0, 3));
  EXPECT_TRUE(err.empty()) << err;
  // Forced flat never falls back: the message that does not fit fails, naming both sizes.
  EXPECT_EQ(runs(ShmAlgo::flat, 4096, &err), P(0, 0));
  EXPECT_NE(err.find("the flat algorithm was forced"), std::string::npos) << err;
  EXPECT_NE(err.find("16384 bytes exceeds the flat staging of 1024 bytes"), std::string::npos) << err;
}

TEST(Collectives, TypedConveniences) {
  run_threads(3, [](ProcessGroup& pg) {
    std::vector<float> x(10, float(pg.rank() + 1));
    pg.all_reduce(x.data(), x.size());
    EXPECT_EQ(x[9], 6.0f);
    std::vector<int64_t> y(4, pg.rank() == 2 ? 42 : 0);
    pg.broadcast(y.data(), y.size(), 2);
    EXPECT_EQ(y[3], 42);
    auto w = pg.all_reduce_async(x.data(), x.size(), ReduceOp::max);
    w->wait();
    EXPECT_TRUE(w->ok());
    EXPECT_EQ(x[0], 6.0f);
  });
}

TEST(Collectives, SequenceNumbersCountCollectivesOnly) {
  run_threads(2, [](ProcessGroup& pg) {
    EXPECT_EQ(pg.next_seq(), 0u);
    pg.barrier();
    float v = 1;
    auto w = pg.all_reduce_async(&v, &v, 1, DType::f32, ReduceOp::sum);
    EXPECT_EQ(w->seq(), 1u);
    w->wait();
    auto s = pg.rank() == 0 ? pg.send_async(&v, 1, DType::f32, 1) : pg.recv_async(&v, 1, DType::f32, 0);
    EXPECT_EQ(s->seq(), 0u);  // point-to-point has its own numbering
    s->wait();
    EXPECT_EQ(pg.next_seq(), 2u);
  });
}

TEST(Collectives, BadArgumentsNameTheProblem) {
  run_threads(2, [](ProcessGroup& pg) {
    std::vector<float> a(8);
    EXPECT_THROW(pg.broadcast(a.data(), 8, DType::f32, 5), Error);
    EXPECT_THROW(pg.all_reduce(a.data(), a.data() + 1, 4, DType::f32, ReduceOp::sum), Error);
    EXPECT_THROW(pg.all_gather_v(a.data(), a.data() + 4, {1, 2, 3}, DType::f32), Error);
    EXPECT_THROW(pg.send(a.data(), 1, DType::f32, 1, -3), Error);
    try {
      pg.reduce(nullptr, a.data(), 3, DType::f32, ReduceOp::sum, 0);
      ADD_FAILURE() << "null send accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("send is null"), std::string::npos) << e.what();
    }
    pg.barrier();  // the group still works: bad arguments never reach the peers
  });
}

}  // namespace
}  // namespace strata::comm

// The same sweep with ranks as processes (separate mappings, real pids), as the mpi test
// runs it through mpirun.
namespace strata::comm {
namespace {
TEST(Processes, ShmSweepOnFiveProcesses) {
  auto p = test::run({STRATA_BINARY, "launch", "-n", "5", "--timeout", "60", "--", COMM_WORKER,
                         "sweep"}, {}, 150);
  std::string out = p.output();
  EXPECT_EQ(p.exit_code(), 0) << out;
  EXPECT_NE(out.find("[rank 4] checked"), std::string::npos) << out;
  EXPECT_EQ(out.find("FAIL"), std::string::npos) << out;
}
}  // namespace
}  // namespace strata::comm
