// Step time of the data-parallel engine alone (no data loading, no trainer): N forked rank
// processes on the shm backend train the given model on random tokens and rank 0 prints
// one JSON line with the median step time, tokens/s and, with --trace, the share of
// gradient communication hidden behind compute on each rank (parallel::overlap).
//
//   zero_step_bench --nproc 2 --zero 0 --model tiny --batch 8 --steps 20 [--precision bf16]
//                   [--bucket-mb 4] [--prefetch 1] [--no-reshard] [--trace DIR]
#include <omp.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "comm/bootstrap.h"
#include "comm/process_group.h"
#include "core/rng.h"
#include "core/stats.h"
#include "core/timer.h"
#include "core/trace.h"
#include "launcher/launcher.h"
#include "model/gpt.h"
#include "nlohmann/json.hpp"
#include "parallel/data_parallel.h"
#include "parallel/overlap.h"

using namespace strata;
using nlohmann::json;

struct Args {
  int nproc = 2, batch = 8, steps = 20, threads = 1;
  std::string model = "tiny", trace;
  parallel::DataParallelOptions opts;
};

static json rank_main(const std::string& job, int rank, const Args& a) {
  omp_set_num_threads(a.threads);
  if (!a.trace.empty()) tracer().enable(rank);
  comm::GroupPtr pg = comm::connect_shm(job, rank, a.nproc);
  const model::GPTConfig cfg = model::GPTConfig::preset(a.model);
  const int micro = a.batch / a.nproc;
  model::GPT gpt(cfg, micro, parallel::model_owns_state(a.opts));
  parallel::DataParallelEngine engine(gpt, *pg, a.opts, {}, 1);
  std::vector<int32_t> tok(size_t(micro) * cfg.seq), tgt(tok.size());
  std::vector<double> ms;
  for (int step = 0; step < a.steps; ++step) {
    Rng rng(7, uint64_t(step) * 64 + uint64_t(rank));
    for (size_t i = 0; i < tok.size(); ++i) {
      tok[i] = int32_t(rng.below(uint64_t(cfg.vocab)));
      tgt[i] = int32_t(rng.below(uint64_t(cfg.vocab)));
    }
    pg->barrier();
    Stopwatch sw;
    engine.begin_step();
    engine.begin_micro(0, 1);
    gpt.forward(tok.data(), tgt.data(), nullptr, micro, cfg.seq);
    gpt.backward(1.0f / float(int64_t(a.batch) * cfg.seq));
    engine.end_backward();
    engine.step(1e-4f);
    ms.push_back(sw.ms());
  }
  const double med = median(std::vector<double>(ms.begin() + (ms.size() > 1), ms.end()));
  json out = {{"nproc", a.nproc},
              {"zero", a.opts.stage},
              {"options", a.opts.describe()},
              {"model", a.model},
              {"batch", a.batch},
              {"median_ms", med},
              {"tokens_per_s", double(a.batch) * cfg.seq / (med * 1e-3)}};
  if (!a.trace.empty()) {
    const auto ev = tracer().events();
    const parallel::OverlapStats s = parallel::overlap(ev, parallel::gradient_comm_filter());
    out["hidden_share"] = s.hidden_share();
    out["grad_comm_ms"] = double(s.comm_ns) * 1e-6;
    out["exposed_ms"] = double(s.exposed_ns()) * 1e-6;
    tracer().write(a.trace + "/trace-rank" + std::to_string(rank) + ".json");
  }
  return out;
}

int main(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    std::string k = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        fprintf(stderr, "%s needs a value\n", k.c_str());
        exit(2);
      }
      return argv[++i];
    };
    if (k == "--nproc")
      a.nproc = std::atoi(next().c_str());
    else if (k == "--zero")
      a.opts.stage = std::atoi(next().c_str());
    else if (k == "--model")
      a.model = next();
    else if (k == "--batch")
      a.batch = std::atoi(next().c_str());
    else if (k == "--steps")
      a.steps = std::atoi(next().c_str());
    else if (k == "--threads")
      a.threads = std::atoi(next().c_str());
    else if (k == "--precision")
      a.opts.precision = parallel::parse_precision(next());
    else if (k == "--bucket-mb")
      a.opts.bucket_mb = std::atof(next().c_str());
    else if (k == "--prefetch")
      a.opts.prefetch = std::atoi(next().c_str());
    else if (k == "--no-reshard")
      a.opts.reshard_after_forward = false;
    else if (k == "--trace")
      a.trace = next();
    else {
      fprintf(stderr, "unknown argument %s\n", k.c_str());
      return 2;
    }
  }
  a.opts.validate();
  const std::string job = comm::new_job_id();
  const std::string dir = a.trace.empty() ? "/tmp" : a.trace;
  std::vector<pid_t> pids;
  for (int r = 0; r < a.nproc; ++r) {
    const pid_t pid = fork();
    if (pid == 0) {
      int code = 0;
      try {
        std::ofstream(dir + "/step_bench_" + job + "_" + std::to_string(r) + ".json")
            << rank_main(job, r, a).dump();
      } catch (const std::exception& e) {
        fprintf(stderr, "rank %d: %s\n", r, e.what());
        code = 1;
      }
      _exit(code);
    }
    pids.push_back(pid);
  }
  int rc = 0;
  for (pid_t p : pids) {
    int st = 0;
    waitpid(p, &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) rc = 1;
  }
  comm::remove_job_segments(job);
  json all = json::array();
  for (int r = 0; r < a.nproc; ++r) {
    const std::string f = dir + "/step_bench_" + job + "_" + std::to_string(r) + ".json";
    std::ifstream in(f);
    if (in) all.push_back(json::parse(in));
    std::remove(f.c_str());
  }
  if (!all.empty()) {
    json out = all[0];
    if (!a.trace.empty()) {
      json shares = json::array();
      for (auto& j : all) shares.push_back(j.value("hidden_share", 0.0));
      out["hidden_share_per_rank"] = shares;
    }
    printf("%s\n", out.dump().c_str());
  }
  return rc;
}
