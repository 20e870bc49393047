// One rank of a multi-process comm test, started by `strata launch` or mpirun:
//   comm_worker sweep            every collective on the world and a split (exit 0 = correct),
//                                then the world's hosts and all-reduce algorithms
//   comm_worker kill-mid         rank 2 SIGKILLs itself just before collective #3; survivors
//                                must fail naming it (exit 3) and dump their recorders
//   comm_worker hang             rank 1 "computes" (sleeps in backward of layer 2, step 3)
//                                instead of joining collective #2; rank 0 times out
//   comm_worker die-early        rank 1 exits(5) before joining the world
//   comm_worker env              prints the rank environment as one line
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <thread>

#include "comm/bootstrap.h"
#include "comm/flight_recorder.h"
#include "comm/hier/hier_transport.h"
#include "comm/process_group.h"
#include "core/phase.h"
#include "sweep.h"

using namespace strata;
using namespace strata::comm;

static int sweep() {
  Options o;
  o.small_max_bytes = 256;
  o.chunk_bytes = 4096;
  o.pipeline_depth = 2;
  o.p2p_slot_bytes = 512;
  GroupPtr pg = init_from_env(o);
  testing::Sweep s{*pg};
  s.run({0, 1, 7, 1000}, testing::kAllDTypes);
  GroupPtr sub = pg->split(pg->rank() % 2, pg->rank());
  testing::Sweep s2{*sub};
  s2.run({0, 5, 333}, {DType::f32, DType::bf16});
  for (auto& f : s.failures) std::printf("FAIL %s\n", f.c_str());
  for (auto& f : s2.failures) std::printf("FAIL %s (sub-group)\n", f.c_str());
  std::printf("checked %d, failures %zu\n", s.checked + s2.checked, s.failures.size() + s2.failures.size());
  std::printf("hosts: %s\n", multihost_summary(*pg).c_str());
  pg->barrier();
  return s.failures.empty() && s2.failures.empty() ? 0 : 1;
}

static int kill_mid() {
  GroupPtr pg = init_from_env();
  std::vector<float> x(100000, 1.0f);
  for (int step = 0; step < 10; ++step) {
    current_phase().set(step, 1, PhaseKind::backward);
    if (step == 3 && pg->rank() == 2) raise(SIGKILL);
    try {
      pg->all_reduce(x.data(), x.data(), x.size(), DType::f32, ReduceOp::sum);
    } catch (const Error& e) {
      std::printf("caught: %s\n", e.what());
      std::fflush(stdout);
      // Stay alive a moment so the test sees this rank's own exit code, not the launcher's
      // SIGTERM racing it.
      return 3;
    }
  }
  return 0;
}

static int hang() {
  GroupPtr pg = init_from_env();
  float v = 1;
  pg->all_reduce(&v, &v, 1, DType::f32, ReduceOp::sum);
  pg->barrier();
  std::printf("in the world\n");  // a test may act on the group once every rank said so
  std::fflush(stdout);
  if (pg->rank() == 1) {
    current_phase().set(3, 2, PhaseKind::backward);
    std::this_thread::sleep_for(std::chrono::seconds(60));
    return 0;
  }
  current_phase().set(3, -1, PhaseKind::optimizer);
  try {
    pg->all_reduce(&v, &v, 1, DType::f32, ReduceOp::sum);
  } catch (const TimeoutError& e) {
    std::printf("timeout: %s\n", e.what());
    return 4;
  }
  return 0;
}

static int env() {
  RankEnv e = detect_rank_env();
  std::printf("rank=%d world=%d local=%d/%d source=%s job=%s\n", e.rank, e.world_size, e.local_rank,
              e.local_world_size, e.source.c_str(), e.job_id.empty() ? "-" : "set");
  return 0;
}

int main(int argc, char** argv) {
  std::string what = argc > 1 ? argv[1] : "";
  try {
    if (what == "sweep") return sweep();
    if (what == "kill-mid") return kill_mid();
    if (what == "hang") return hang();
    if (what == "env") return env();
    if (what == "recorder-size") {
      std::printf("capacity %zu\n", flight_recorder().capacity());
      return 0;
    }
    if (what == "die-early") {
      if (detect_rank_env().rank == 1) return 5;
      init_from_env();
      return 0;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "comm_worker: %s\n", e.what());
    return 1;
  }
  std::fprintf(stderr, "usage: comm_worker sweep|kill-mid|hang|die-early|env\n");
  return 2;
}
