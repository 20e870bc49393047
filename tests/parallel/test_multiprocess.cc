// Ranks as real processes (fork + the shm backend): per-process memory tracker equals the
// ZeRO formula, ranks agree on the loss, and with tracing on every gradient bucket but the
// last is issued while backward is still computing (communication overlaps compute).
#include <omp.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>

#include "comm/bootstrap.h"
#include "comm/process_group.h"
#include "core/memory.h"
#include "core/rng.h"
#include "core/trace.h"
#include "cost/memory.h"
#include "gtest/gtest.h"
#include "harness.h"
#include "launcher/launcher.h"
#include "nlohmann/json.hpp"
#include "parallel/overlap.h"
#include "parallel/zero_comm.h"
#include "support/temp_dir.h"

namespace strata::ptest {

using namespace strata::launcher;  // the launcher starts these tests' ranks
namespace {

using nlohmann::json;
using parallel::DataParallelOptions;

// One rank: trains `steps` steps of the small model on its rows and writes what it saw.
json rank_main(const std::string& job, int rank, int world, const DataParallelOptions& o) {
  omp_set_num_threads(1);
  tracer().enable(rank);
  comm::Options copt;
  copt.timeout_s = 60;
  comm::GroupPtr pg = comm::connect_shm(job, rank, world, copt);
  RunSpec s;
  const int micro = s.batch / world;
  model::GPT gpt(s.model, micro, false);
  parallel::DataParallelEngine engine(gpt, *pg, o, s.optim, s.seed);
  std::vector<double> losses;
  Rng rng(9, uint64_t(rank));
  std::vector<int32_t> tok(size_t(micro) * s.T), tgt(tok.size());
  for (int step = 0; step < 4; ++step) {
    for (size_t i = 0; i < tok.size(); ++i) {
      tok[i] = int32_t(rng.below(uint64_t(s.model.vocab)));
      tgt[i] = int32_t(rng.below(uint64_t(s.model.vocab)));
    }
    engine.begin_step();
    engine.begin_micro(0, 1);
    double loss = gpt.forward(tok.data(), tgt.data(), nullptr, micro, s.T);
    gpt.backward(float(1.0 / (double(s.batch) * s.T)));
    engine.end_backward();
    engine.step(1e-3f);
    losses.push_back(parallel::sum_over_ranks(*pg, loss));
  }
  // The last step's trace: when did backward end, when were gradient buckets issued?
  const auto events = tracer().events();
  int64_t last_backward_end = 0, step_start = 0;
  for (const TraceEvent& e : events)
    if (e.cat == "compute" && e.name.rfind("forward embed", 0) == 0) step_start = e.start_ns;
  for (const TraceEvent& e : events)
    if (e.cat == "compute" && e.name.rfind("backward", 0) == 0 && e.start_ns >= step_start)
      last_backward_end = std::max(last_backward_end, e.start_ns + e.dur_ns);
  int issued_in_backward = 0, issued = 0;
  for (const TraceEvent& e : events)
    if (e.cat == "comm_issue" && e.name.find("grad bucket") != std::string::npos &&
        e.start_ns >= step_start) {
      ++issued;
      if (e.start_ns < last_backward_end) ++issued_in_backward;
    }
  const MemoryTracker& mt = memory_tracker();
  const auto f = cost::zero_model_state_bytes(gpt.num_params(), world, o.stage, o.precision);
  json out = {
      {"losses", losses},
      {"buckets", engine.buckets().size()},
      {"issued", issued},
      {"issued_in_backward", issued_in_backward},
      {"hidden_share", parallel::overlap(events, parallel::gradient_comm_filter()).hidden_share()},
      {"mem",
       {mt.current(MemCategory::parameters), mt.current(MemCategory::gradients),
        mt.current(MemCategory::optimizer)}},
      {"formula", {f.parameters, f.gradients, f.optimizer}}};
  return out;
}

std::vector<json> run_processes(int world, const DataParallelOptions& o) {
  const std::string job = comm::new_job_id();
  test::TempDir tmp;
  const std::string dir = tmp.str();
  std::vector<pid_t> pids;
  for (int r = 0; r < world; ++r) {
    pid_t pid = fork();
    if (pid == 0) {
      int code = 0;
      try {
        json j = rank_main(job, r, world, o);
        std::ofstream(dir + "/zr_rank" + std::to_string(r) + ".json") << j.dump();
      } catch (const std::exception& e) {
        fprintf(stderr, "rank %d: %s\n", r, e.what());
        code = 1;
      }
      _exit(code);
    }
    pids.push_back(pid);
  }
  std::vector<json> out;
  for (int r = 0; r < world; ++r) {
    int status = 0;
    waitpid(pids[r], &status, 0);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "rank " << r << " failed";
  }
  comm::remove_job_segments(job);
  for (int r = 0; r < world; ++r) {
    std::ifstream in(dir + "/zr_rank" + std::to_string(r) + ".json");
    out.push_back(in ? json::parse(in) : json());
  }
  return out;
}

TEST(ZeroProcesses, MemoryMatchesTheFormulaAndGradientsOverlapBackward) {
  for (int stage : {0, 2, 3}) {
    DataParallelOptions o;
    o.stage = stage;
    o.bucket_mb = 0.1;  // 3 buckets on the small model
    o.precision = stage == 2 ? cost::Precision::bf16 : cost::Precision::fp32;
    const std::vector<json> ranks = run_processes(3, o);
    for (size_t r = 0; r < ranks.size(); ++r) {
      const json& j = ranks[r];
      ASSERT_FALSE(j.is_null()) << "rank " << r << " wrote no result";
      SCOPED_TRACE(testing::Message() << "stage " << stage << " rank " << r);
      EXPECT_EQ(j["mem"], j["formula"]);
      EXPECT_EQ(j["losses"], ranks[0]["losses"]);
      const int buckets = j["buckets"];
      EXPECT_GE(buckets, 3);
      EXPECT_EQ(j["issued"].get<int>(), buckets);
      // Every bucket but the last (unit 0, final only after the embedding backward) starts
      // while backward still runs.
      EXPECT_EQ(j["issued_in_backward"].get<int>(), buckets - 1);
      printf("stage %d rank %zu: gradient communication hidden %.0f%%\n", stage, r,
             100 * j["hidden_share"].get<double>());
    }
  }
}

}  // namespace
}  // namespace strata::ptest
