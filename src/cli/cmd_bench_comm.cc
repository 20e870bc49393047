// strata bench comm [--backend shm|mpi] [--nproc N] [--op OP|all] [-b 8 -e 256M -f 2]
//                   [--iters K] [--warmup K] [--check] [--json] [--in-place]
// nccl-tests-style collective benchmark. Started by hand, it launches --nproc ranks of itself
// (through the launcher: forked ranks for shm, mpirun for mpi); inside a launched job it runs
// as one rank and rank 0 prints the table.
#include <unistd.h>

#include <cstdio>
#include <memory>

#include "cli/command.h"
#include "comm/benchmark.h"
#include "comm/bootstrap.h"
#include "comm/process_group.h"
#include "core/error.h"
#include "launcher/launcher.h"
#include "launcher/rank_status.h"

namespace strata::cli {

namespace {

struct BenchArgs {
  std::string backend = "shm";
  int nproc = 2;
  std::string op = "allreduce";
  std::string min_bytes = "8", max_bytes = "256M";
  int factor = 2;
  int iters = 20, warmup = 5;
  bool check = false, json = false, in_place = false;
  std::string dtype = "float", redop = "sum";
  double timeout = 0;
};

// Runs as one rank of a launched job.
void run_rank(const BenchArgs& a, const std::vector<comm::BenchOp>& ops,
              const std::vector<size_t>& sizes, comm::BenchConfig cfg) {
  comm::Options opt;
  opt.backend = comm::parse_backend(a.backend);
  opt.timeout_s = a.timeout;
  comm::GroupPtr pg = comm::init_from_env(opt);
  bool print = pg->rank() == 0;
  if (print && !a.json)
    std::printf("# strata bench comm: backend %s, %d ranks, %d iters, %d warmup\n",
                comm::backend_name(pg->backend()), pg->size(), cfg.iters, cfg.warmup);
  double sum_busbw = 0;
  int rows = 0;
  for (comm::BenchOp op : ops) {
    if (print && !a.json) std::printf("#\n# op: %s\n%s\n", comm::bench_op_name(op), comm::bench_header().c_str());
    for (size_t bytes : sizes) {
      comm::BenchRow r = comm::bench_one(*pg, op, bytes, cfg);
      if (r.count == 0) continue;  // below one element per rank
      sum_busbw += r.busbw;
      ++rows;
      if (print) std::printf("%s\n", (a.json ? comm::bench_json(r) : comm::bench_format(r)).c_str());
      if (print) std::fflush(stdout);
    }
  }
  if (print && !a.json) std::printf("# Avg bus bandwidth    : %g\n#\n", rows ? sum_busbw / rows : 0.0);
  pg->barrier();
}

}  // namespace

static Register reg_bench_comm("bench comm", "Collective bandwidth and latency (nccl-tests format)", [](CLI::App& app) {
  auto a = std::make_shared<BenchArgs>();
  app.add_option("--backend", a->backend, "shm, mpi or tcp");
  app.add_option("--nproc", a->nproc, "ranks to launch");
  app.add_option("--op", a->op,
                 "allreduce, allgather, reducescatter, alltoall, broadcast, reduce, sendrecv or all");
  app.add_option("-b,--minbytes", a->min_bytes, "smallest size (e.g. 8, 1K)");
  app.add_option("-e,--maxbytes", a->max_bytes, "largest size (e.g. 256M)");
  app.add_option("-f,--stepfactor", a->factor, "size multiplier between rows");
  app.add_option("--iters", a->iters, "timed iterations per size");
  app.add_option("--warmup", a->warmup, "untimed iterations per size");
  app.add_flag("--check", a->check, "verify results and count wrong elements");
  app.add_flag("--json", a->json, "one JSON object per row");
  app.add_flag("--in-place", a->in_place, "all-reduce in place (send == recv)");
  app.add_option("--dtype", a->dtype, "float, bfloat16, double, int32, int64, uint8");
  app.add_option("--redop", a->redop, "sum, avg, max, min");
  app.add_option("--timeout", a->timeout, "seconds a collective may wait for its peers");
  app.callback([a] {
    // Validate everything before launching anything.
    comm::Backend backend = comm::parse_backend(a->backend);
    std::vector<comm::BenchOp> ops = comm::parse_bench_ops(a->op);
    STRATA_CHECK(a->factor >= 2, "the size factor (-f) must be at least 2, got ", a->factor);
    auto size_flag = [](const char* flag, const std::string& v) {  // names the flag at fault
      try {
        return comm::parse_size(v);
      } catch (const Error& e) {
        fail(flag, ": ", e.what());  // which quotes the value
      }
    };
    std::vector<size_t> sizes = comm::bench_sizes(size_flag("-b/--minbytes", a->min_bytes),
                                                  size_flag("-e/--maxbytes", a->max_bytes), size_t(a->factor));
    STRATA_CHECK(a->nproc >= 1, "--nproc must be at least 1, got ", a->nproc);
    STRATA_CHECK(a->iters >= 1, "--iters must be at least 1, got ", a->iters);
    STRATA_CHECK(a->warmup >= 0, "--warmup must not be negative, got ", a->warmup);
    comm::BenchConfig cfg;
    cfg.iters = a->iters;
    cfg.warmup = a->warmup;
    cfg.check = a->check;
    cfg.dtype = parse_dtype(a->dtype);
    cfg.redop = comm::parse_reduce_op(a->redop);
    STRATA_CHECK(!a->in_place || ops == std::vector<comm::BenchOp>{comm::BenchOp::allreduce},
                 "--in-place applies to --op allreduce only, got --op ", a->op);
    cfg.in_place = a->in_place;
    if (comm::launched_as_rank()) {
      comm::refuse_stale_rank_env("strata bench comm");
      return run_rank(*a, ops, sizes, cfg);
    }

    launcher::LaunchOptions o;
    o.nproc = a->nproc;
    o.backend = backend;
    o.prefix_output = false;
    o.timeout_s = a->timeout;
    o.rank_exec = launcher::self_executable();
    o.command = {launcher::self_executable(), "bench", "comm", "--backend", a->backend, "--op", a->op,
                 "-b", a->min_bytes, "-e", a->max_bytes, "-f", std::to_string(a->factor),
                 "--iters", std::to_string(a->iters), "--warmup", std::to_string(a->warmup),
                 "--dtype", a->dtype, "--redop", a->redop};
    if (a->check) o.command.push_back("--check");
    if (a->json) o.command.push_back("--json");
    if (a->in_place) o.command.push_back("--in-place");
    if (a->timeout > 0) {
      o.command.push_back("--timeout");
      o.command.push_back(std::to_string(a->timeout));
    }
    launcher::LaunchResult r = launcher::launch(o);
    if (r.exit_code != 0) {
      std::fprintf(stderr, "strata bench comm: %s\n", r.message.c_str());
      throw ExitCode{r.exit_code};
    }
  });
});

}  // namespace strata::cli
