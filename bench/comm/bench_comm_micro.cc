// Building blocks of the communicator, one process:
//   BM_Reduce/<dtype>/<bytes>/<level>
//                                 reduce_inputs over 2 inputs (GB/s of output) on each
//                                 instruction-set level the CPU has (0 x86-64-v2, 1 v3, 2 v4)
//   BM_Memcpy/<bytes>             the memcpy the staging copies use, for reference
//   BM_FlightRecorder             cost of recording one op (record + started + completed)
//   BM_ThreadAllReduce/<bytes>    all_reduce between 2 ranks as threads of this process
#include <benchmark/benchmark.h>

#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "comm/flight_recorder.h"
#include "comm/process_group.h"
#include "comm/reduce_kernels.h"
#include "kernels/isa.h"

using namespace strata;
using namespace strata::comm;

static void BM_Reduce(benchmark::State& st) {
  DType t = DType(st.range(0));
  size_t bytes = size_t(st.range(1)), n = bytes / dtype_size(t);
  std::vector<char> a(bytes, 1), b(bytes, 2), out(bytes);
  const void* in[2] = {a.data(), b.data()};
  const auto level = kernels::Isa(st.range(2));
  if (!kernels::isa_available(level)) {
    st.SkipWithError("this CPU lacks the level");
    return;
  }
  kernels::ScopedIsa on(level);
  for (auto _ : st) {
    reduce_inputs(out.data(), nullptr, in, 2, n, t, ReduceOp::sum, 2);
    benchmark::DoNotOptimize(out.data());
  }
  st.SetBytesProcessed(int64_t(st.iterations()) * int64_t(bytes));
  st.SetLabel(std::string(dtype_name(t)) + " " + kernels::isa_name(level));
}
BENCHMARK(BM_Reduce)->ArgsProduct({{int(DType::f32), int(DType::bf16), int(DType::f64)},
                                   {64 << 10, 64 << 20},
                                   {int(kernels::Isa::baseline), int(kernels::Isa::v3),
                                    int(kernels::Isa::v4)}});

static void BM_Memcpy(benchmark::State& st) {
  size_t bytes = size_t(st.range(0));
  std::vector<char> a(bytes, 1), out(bytes);
  for (auto _ : st) {
    std::memcpy(out.data(), a.data(), bytes);
    benchmark::DoNotOptimize(out.data());
  }
  st.SetBytesProcessed(int64_t(st.iterations()) * int64_t(bytes));
}
BENCHMARK(BM_Memcpy)->Arg(64 << 10)->Arg(64 << 20);

static void BM_FlightRecorder(benchmark::State& st) {
  FlightRecorder r(2000);
  FlightEntry e;
  e.group = r.intern("world", {0, 1});
  e.op = OpType::allreduce;
  for (auto _ : st) {
    e.phase = current_phase().get();
    uint64_t id = r.record(e);
    r.update(id, OpState::started);
    r.update(id, OpState::completed);
  }
}
BENCHMARK(BM_FlightRecorder);

static void BM_ThreadAllReduce(benchmark::State& st) {
  size_t bytes = size_t(st.range(0)), n = bytes / 4;
  std::vector<GroupPtr> g = make_thread_world(2);
  std::vector<float> a(n), b(n);
  // Rank 1 mirrors rank 0; element 0 of the sum says whether another op follows
  // (rank 0 contributes 1 to continue, -1e9 to stop).
  std::thread peer([&] {
    for (;;) {
      b[0] = 0;
      g[1]->all_reduce(b.data(), b.data(), n, DType::f32, ReduceOp::sum);
      if (b[0] < 0) return;
    }
  });
  for (auto _ : st) {
    a[0] = 1;
    g[0]->all_reduce(a.data(), a.data(), n, DType::f32, ReduceOp::sum);
  }
  a[0] = -1e9f;
  g[0]->all_reduce(a.data(), a.data(), n, DType::f32, ReduceOp::sum);
  peer.join();
  st.SetBytesProcessed(int64_t(st.iterations()) * int64_t(bytes));
}
BENCHMARK(BM_ThreadAllReduce)->Arg(8)->Arg(64 << 10)->Arg(16 << 20)->UseRealTime();


// The runtime's own cost per op (sequence number, recorder, hand-off): a world of one.
static void BM_SoloAllReduce(benchmark::State& st) {
  std::vector<GroupPtr> g = make_thread_world(1);
  float x = 1;
  for (auto _ : st) g[0]->all_reduce(&x, &x, 1, DType::f32, ReduceOp::sum);
}
BENCHMARK(BM_SoloAllReduce);

BENCHMARK_MAIN();
