// Measured per-rank memory of the data-parallel engine against the ZeRO arithmetic.
//
// For each precision, stage and world size N, forks N rank processes (shm backend); each
// builds the model without its own state, the engine, runs one training step on random
// tokens, and reports its process memory tracker (current parameters, gradients, optimizer;
// peak comm and activations). Rank 0's row is printed beside cost::zero_model_state_bytes.
//
//   zero_memory_table [model] [micro_batch] [bucket_mb]     (defaults: tiny 4 4)
#include <omp.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include "comm/bootstrap.h"
#include "comm/process_group.h"
#include "core/memory.h"
#include "core/rng.h"
#include "cost/memory.h"
#include "launcher/launcher.h"
#include "model/gpt.h"
#include "nlohmann/json.hpp"
#include "parallel/data_parallel.h"

using namespace strata;
using nlohmann::json;

static json rank_main(const std::string& job, int rank, int world, const model::GPTConfig& cfg,
                      int micro, const parallel::DataParallelOptions& o) {
  omp_set_num_threads(1);
  comm::GroupPtr pg = comm::connect_shm(job, rank, world);
  model::GPT gpt(cfg, micro, parallel::model_owns_state(o));
  parallel::DataParallelEngine engine(gpt, *pg, o, {}, 1);
  std::vector<int32_t> tok(size_t(micro) * cfg.seq), tgt(tok.size());
  Rng rng(3, uint64_t(rank));
  for (size_t i = 0; i < tok.size(); ++i) {
    tok[i] = int32_t(rng.below(uint64_t(cfg.vocab)));
    tgt[i] = int32_t(rng.below(uint64_t(cfg.vocab)));
  }
  engine.begin_step();
  engine.begin_micro(0, 1);
  gpt.forward(tok.data(), tgt.data(), nullptr, micro, cfg.seq);
  gpt.backward(1.0f / float(tok.size() * world));
  engine.end_backward();
  engine.step(1e-4f);
  const MemoryTracker& mt = memory_tracker();
  const parallel::MemoryReport r = engine.memory_report();
  return {{"parameters", mt.current(MemCategory::parameters)},
          {"gradients", mt.current(MemCategory::gradients)},
          {"optimizer", mt.current(MemCategory::optimizer)},
          {"comm_peak", mt.peak(MemCategory::comm)},
          {"activations_peak", mt.peak(MemCategory::activations)},
          {"engine_comm", r.comm},
          {"engine_scratch", r.activations},
          {"psi", gpt.num_params()}};
}

static json run(int world, const model::GPTConfig& cfg, int micro,
                const parallel::DataParallelOptions& o) {
  const std::string job = comm::new_job_id();
  const std::string file = "/tmp/zero_memory_" + job + "_rank0.json";
  std::vector<pid_t> pids;
  for (int r = 0; r < world; ++r) {
    const pid_t pid = fork();
    if (pid == 0) {
      int code = 0;
      try {
        json j = rank_main(job, r, world, cfg, micro, o);
        if (r == 0) std::ofstream(file) << j.dump();
      } catch (const std::exception& e) {
        fprintf(stderr, "rank %d: %s\n", r, e.what());
        code = 1;
      }
      _exit(code);
    }
    pids.push_back(pid);
  }
  bool ok = true;
  for (pid_t p : pids) {
    int st = 0;
    waitpid(p, &st, 0);
    ok = ok && WIFEXITED(st) && WEXITSTATUS(st) == 0;
  }
  comm::remove_job_segments(job);
  std::ifstream in(file);
  json j = ok && in ? json::parse(in) : json();
  std::remove(file.c_str());
  return j;
}

static std::string mib(int64_t b) {
  char buf[32];
  snprintf(buf, sizeof buf, "%.2f", double(b) / (1 << 20));
  return buf;
}

int main(int argc, char** argv) {
  const std::string name = argc > 1 ? argv[1] : "tiny";
  const int micro = argc > 2 ? std::atoi(argv[2]) : 4;
  const double bucket = argc > 3 ? std::atof(argv[3]) : 4;
  const model::GPTConfig cfg = model::GPTConfig::preset(name);
  printf(
      "model %s, micro-batch %d, bucket %.3g MiB; MiB per rank (rank 0), measured by the "
      "process memory tracker after one step\n",
      name.c_str(), micro, bucket);
  printf("%-5s %5s %2s | %10s %10s %10s %10s | %10s %6s | %9s %9s\n", "prec", "stage", "N",
         "params", "grads", "optim", "states", "formula", "equal", "comm", "scratch");
  for (auto p : {cost::Precision::bf16, cost::Precision::fp32})
    for (int stage = 0; stage <= 3; ++stage)
      for (int world : {1, 2, 3, 4}) {
        parallel::DataParallelOptions o;
        o.stage = stage;
        o.precision = p;
        o.bucket_mb = bucket;
        const json j = run(world, cfg, micro, o);
        if (j.is_null()) {
          printf("%-5s %5d %2d | failed\n", parallel::precision_name(p), stage, world);
          continue;
        }
        const int64_t states = j["parameters"].get<int64_t>() + j["gradients"].get<int64_t>() +
                               j["optimizer"].get<int64_t>();
        const auto f = cost::zero_model_state_bytes(j["psi"], world, stage, p);
        printf("%-5s %5d %2d | %10s %10s %10s %10s | %10s %6s | %9s %9s\n",
               parallel::precision_name(p), stage, world, mib(j["parameters"]).c_str(),
               mib(j["gradients"]).c_str(), mib(j["optimizer"]).c_str(), mib(states).c_str(),
               mib(f.total()).c_str(), states == f.total() ? "yes" : "NO",
               mib(j["engine_comm"]).c_str(), mib(j["engine_scratch"]).c_str());
      }
  return 0;
}
