// Sub-groups from split, and asynchronous operations on several groups at once.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "comm/process_group.h"
#include "core/timer.h"
#include "sweep.h"

namespace strata::comm {
namespace {

TEST(Groups, SplitByParityWithReversedKeys) {
  for (int world : {2, 5, 8}) {
    run_threads(world, [world](ProcessGroup& pg) {
      int color = pg.rank() % 2;
      GroupPtr sub = pg.split(color, -pg.rank());  // reversed order inside each color
      ASSERT_TRUE(sub);
      int members = (world + 1 - color) / 2;
      EXPECT_EQ(sub->size(), members);
      // Highest world rank of the color comes first.
      EXPECT_EQ(sub->world_ranks().front(), color == 0 ? (world - 1) / 2 * 2 : (world - 2) / 2 * 2 + 1);
      EXPECT_EQ(sub->world_ranks()[size_t(sub->rank())], pg.rank());
      EXPECT_EQ(sub->name(), "world." + std::to_string(color));
      testing::Sweep s{*sub};
      s.run({0, 1, 9, 300}, {DType::f32, DType::i32});
      for (const std::string& f : s.failures) ADD_FAILURE() << f;
      // A split of the split.
      GroupPtr sub2 = sub->split(0, sub->rank(), "inner");
      ASSERT_TRUE(sub2);
      int64_t v = pg.rank();
      sub2->all_reduce(&v, &v, 1, DType::i64, ReduceOp::sum);
      int64_t want = 0;
      for (int r = color; r < world; r += 2) want += r;
      EXPECT_EQ(v, want);
    });
  }
}

TEST(Groups, NegativeColorJoinsNothing) {
  run_threads(4, [](ProcessGroup& pg) {
    GroupPtr sub = pg.split(pg.rank() == 3 ? -1 : 7, 0);
    if (pg.rank() == 3) {
      EXPECT_FALSE(sub);
    } else {
      ASSERT_TRUE(sub);
      EXPECT_EQ(sub->size(), 3);
      float x = 1;
      sub->all_reduce(&x, &x, 1, DType::f32, ReduceOp::sum);
      EXPECT_EQ(x, 3.0f);
    }
    pg.barrier();
  });
}

// Async ops on the world and on a sub-group at once: each group has its own communication
// thread, so they progress independently; results must all be right.
TEST(Groups, ConcurrentAsyncOpsOnTwoGroups) {
  run_threads(4, [](ProcessGroup& pg) {
    GroupPtr half = pg.split(pg.rank() / 2, pg.rank());
    const size_t n = 20000;
    std::vector<std::vector<float>> a(6, std::vector<float>(n)), b(6, std::vector<float>(n));
    std::vector<WorkPtr> works;
    for (int k = 0; k < 6; ++k) {
      for (size_t i = 0; i < n; ++i) a[size_t(k)][i] = float(pg.rank() + k), b[size_t(k)][i] = float(pg.rank() * k);
      works.push_back(pg.all_reduce_async(a[size_t(k)].data(), a[size_t(k)].data(), n, DType::f32, ReduceOp::sum));
      works.push_back(half->all_reduce_async(b[size_t(k)].data(), b[size_t(k)].data(), n, DType::f32, ReduceOp::max));
    }
    for (auto& w : works) w->wait();
    int hi = pg.rank() / 2 * 2 + 1;
    for (int k = 0; k < 6; ++k) {
      EXPECT_EQ(a[size_t(k)][n - 1], float(0 + 1 + 2 + 3 + 4 * k));
      EXPECT_EQ(b[size_t(k)][7], float(hi * k));
    }
  });
}

// Ops run on the communication thread while the caller keeps computing.
TEST(Groups, AsyncOpRunsWhileTheCallerComputes) {
  run_threads(2, [](ProcessGroup& pg) {
    std::vector<double> x(1 << 16, 1.0);
    WorkPtr w = pg.all_reduce_async(x.data(), x.data(), x.size(), DType::f64, ReduceOp::sum);
    if (pg.rank() == 1) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    // Rank 0 is free to do other things; its op completes once rank 1 joins.
    w->wait(10);
    EXPECT_TRUE(w->test());
    EXPECT_EQ(x[123], 2.0);
  });
}

TEST(Groups, PointToPointTagsAndOrder) {
  run_threads(3, [](ProcessGroup& pg) {
    if (pg.rank() == 0) {
      std::vector<int32_t> big(100000);
      for (size_t i = 0; i < big.size(); ++i) big[i] = int32_t(i);
      std::vector<WorkPtr> w;
      w.push_back(pg.send_async(big.data(), big.size(), DType::i32, 1, 5));
      int32_t small = 77;
      w.push_back(pg.send_async(&small, 1, DType::i32, 2, 6));
      w.push_back(pg.send_async(&small, 0, DType::i32, 1, 9));  // empty message
      for (auto& x : w) x->wait();
    } else if (pg.rank() == 1) {
      std::vector<int32_t> big(100000);
      pg.recv(big.data(), big.size(), DType::i32, 0, 5);
      EXPECT_EQ(big[99999], 99999);
      pg.recv(nullptr, 0, DType::i32, 0, 9);
    } else {
      int32_t v = 0;
      pg.recv(&v, 1, DType::i32, 0, 6);
      EXPECT_EQ(v, 77);
    }
    // Both directions at once with messages larger than a channel: needs the engine to
    // progress the send and the recv together.
    int peer = pg.rank() == 0 ? 1 : pg.rank() == 1 ? 0 : 2;
    std::vector<uint8_t> out(1 << 20, uint8_t(pg.rank())), in(1 << 20);
    auto ws = pg.send_async(out.data(), out.size(), DType::u8, peer, 1);
    auto wr = pg.recv_async(in.data(), in.size(), DType::u8, peer, 1);
    ws->wait();
    wr->wait();
    EXPECT_EQ(in[12345], uint8_t(peer));
  });
}

TEST(Groups, RecvOfTheWrongSizeFailsNamingBoth) {
  Options o;
  o.timeout_s = 10;
  EXPECT_THROW(run_threads(2, [](ProcessGroup& pg) {
    std::vector<float> x(16);
    if (pg.rank() == 0) {
      pg.send(x.data(), 16, DType::f32, 1, 4);
    } else {
      try {
        pg.recv(x.data(), 8, DType::f32, 0, 4);
      } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("expected tag 4 and 32 bytes"), std::string::npos) << e.what();
        throw;
      }
    }
  }, o), Error);
}


// The training's operations count from submission to completion, a background group's do not
// (replicas of in-memory checkpoints wait for a moment when none is in flight), and a waiter
// for that moment wakes when the last one ends.
TEST(Groups, ForegroundOpsCountAndAWaiterWakesWhenTheyEnd) {
  ASSERT_EQ(foreground_ops_in_flight(), 0);
  ASSERT_TRUE(wait_foreground_idle(0));
  std::atomic<int> posted{0};
  std::atomic<bool> checked{false};
  run_threads(2, [&](ProcessGroup& pg) {
    std::shared_ptr<ProcessGroup> background = pg.split(0, pg.rank(), "background");
    background->set_background();
    float x = 1, y = 0;
    if (pg.rank() == 0) {
      EXPECT_TRUE(wait_foreground_idle(10));  // rank 1's split may end a moment later
      // Rank 1 holds back: the background all-reduce stays in flight and counts for nothing.
      WorkPtr b = background->all_reduce_async(&x, &y, 1, DType::f32, ReduceOp::sum);
      EXPECT_EQ(foreground_ops_in_flight(), 0);
      EXPECT_TRUE(wait_foreground_idle(0.01));
      posted = 1;
      while (posted.load() != 2) std::this_thread::yield();
      b->wait();
      // Now a foreground one, which rank 1 joins late.
      WorkPtr f = pg.all_reduce_async(&x, &y, 1, DType::f32, ReduceOp::sum);
      EXPECT_GE(foreground_ops_in_flight(), 1);
      EXPECT_FALSE(wait_foreground_idle(0.05));
      checked = true;
      Stopwatch sw;
      EXPECT_TRUE(wait_foreground_idle(30));  // wakes when both ranks' all-reduces end
      EXPECT_LT(sw.seconds(), 10);
      f->wait();
      EXPECT_EQ(y, 2);
    } else {
      while (posted.load() != 1) std::this_thread::yield();
      background->all_reduce(&x, &y, 1, DType::f32, ReduceOp::sum);
      posted = 2;
      while (!checked.load()) std::this_thread::yield();
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      pg.all_reduce(&x, &y, 1, DType::f32, ReduceOp::sum);
    }
  });
  EXPECT_EQ(foreground_ops_in_flight(), 0);
}

}  // namespace
}  // namespace strata::comm
