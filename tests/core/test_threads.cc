#include <gtest/gtest.h>

#include <time.h>

#include <atomic>
#include <thread>

#include "core/threads.h"
#include "core/trace.h"

using namespace strata;

namespace {

// Spins until this thread has used `s` seconds of CPU (however loaded the machine).
void spin(double s) {
  auto used = [] {
    timespec t{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return double(t.tv_sec) + 1e-9 * double(t.tv_nsec);
  };
  const double until = used() + s;
  volatile double x = 0;
  while (used() < until) x = x + 1;
}

}  // namespace

// A named thread's CPU shows under its name (15 bytes kept), the main thread's under "main",
// and a thread that ended under "ended threads", which keeps the process's total whole.
TEST(Threads, CpuTimeIsFiledUnderEachThreadsName) {
  std::thread([] {
    tracer().name_thread("ended spinner");
    spin(0.15);
  }).join();
  std::atomic<bool> done{false}, named{false};
  std::thread busy([&] {
    tracer().name_thread("a busy thread named long");
    named = true;
    spin(0.3);
    while (!done) std::this_thread::yield();
  });
  while (!named) std::this_thread::yield();
  spin(0.3);
  const std::map<std::string, double> cpu = cpu_seconds_by_thread();
  done = true;
  busy.join();
  ASSERT_TRUE(cpu.count("a busy thread n")) << "the OS keeps the first 15 bytes";
  EXPECT_GT(cpu.at("a busy thread n"), 0.1);
  ASSERT_TRUE(cpu.count("main"));
  EXPECT_GT(cpu.at("main"), 0.1);
  EXPECT_EQ(cpu.count("ended spinner"), 0u);
  ASSERT_TRUE(cpu.count("ended threads"));
  EXPECT_GT(cpu.at("ended threads"), 0.05);
}
