// `strata doctor hang RUN_DIR`: names what wedged a job, from its flight-recorder dumps.
// `strata doctor net`: bandwidth and latency of every pair of ranks, busbw of collectives,
// and the links or collectives below a threshold; across hosts (--hosts, --hostfile) also
// each host link against its expectation, the interfaces MPI used, a host whose link is
// degraded or down, and tp groups spread over hosts (diag/host_net.h). Started by hand it
// launches --nproc ranks of itself (the launcher: forked ranks for shm, mpirun for mpi) and
// prints their findings.
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "cli/command.h"
#include "cli/flags/hosts.h"
#include "comm/benchmark.h"
#include "comm/bootstrap.h"
#include "comm/process_group.h"
#include "core/error.h"
#include "core/files.h"
#include "diag/flight_dump.h"
#include "diag/hang_doctor.h"
#include "diag/json_salvage.h"
#include "diag/net_check.h"
#include "diag/net_doctor.h"
#include "launcher/launcher.h"
#include "launcher/rank_status.h"
#include "nlohmann/json.hpp"

namespace strata::cli {
namespace {

struct HangArgs {
  std::string dir;
  bool json = false;
};

void run_doctor_hang(const HangArgs& a) {
  diag::DumpSet set = diag::load_flight_dumps(a.dir);
  if (set.dumps.empty()) {
    std::string why;
    for (auto& p : set.problems) why += "; " + p;
    fail("no usable flight-recorder dump (flight-rank<R>.json) in ", a.dir, why);
  }
  diag::HangReport report = diag::diagnose_hang(set);
  if (a.json) std::cout << diag::hang_report_json(report).dump(2) << "\n";
  else std::cout << diag::format_hang_report(report);
  std::cout.flush();
  if (!report.cause_found) throw ExitCode{1};
}

Register hang("doctor hang", "Name the rank, group and operation a wedged job is stuck on",
              [](CLI::App& app) {
                auto a = std::make_shared<HangArgs>();
                app.add_option("run_dir", a->dir, "Run directory holding flight-rank<R>.json dumps")
                    ->check(dir_path())
                    ->required();
                app.add_flag("--json", a->json, "Print the findings as JSON");
                app.callback([a] { run_doctor_hang(*a); });
              });

struct NetArgs {
  int nproc = 4;
  std::string backend = "shm";
  double expect_busbw = 0, threshold = 0.5, timeout = 0;
  bool json = false;
  std::string bytes = "4M", coll_bytes = "16M";
  int reps = 10, iters = 8;
  std::string result_file;  // set by the launching process: rank 0 writes its findings here
  HostFlags host_flags;
  int tp = 0;
  double expect_link = 0;
  bool nproc_given = false, tp_given = false;  // 0 is a value to refuse, not "unset"
};

// A message size flag, bounded before any buffer is sized by it: every rank holds buffers of
// this size in shared memory (past 4 GiB, or 64-bit wrap, was bad_alloc or max_size()).
size_t size_flag(const char* flag, const std::string& text) {
  constexpr size_t kMax = size_t(4) << 30;
  size_t v = 0;
  try {
    v = comm::parse_size(text);
  } catch (const std::exception& e) {
    fail(flag, ": ", e.what());
  }
  STRATA_CHECK(v <= kMax, flag, " ", text, " is more than the 4 GiB a buffer may hold");
  return v;
}

diag::NetConfig net_config(const NetArgs& a, int world) {
  diag::NetConfig cfg;
  cfg.p2p_bytes = size_flag("--bytes", a.bytes);
  cfg.coll_bytes = size_flag("--coll-bytes", a.coll_bytes);
  STRATA_CHECK(cfg.p2p_bytes >= 1, "--bytes must be at least 1 byte, got ", a.bytes);
  STRATA_CHECK(cfg.coll_bytes >= 4 * size_t(world), "--coll-bytes must be at least 4 bytes per rank, got ",
               a.coll_bytes, " for ", world, " ranks");
  STRATA_CHECK(a.reps >= 1, "--reps must be at least 1, got ", a.reps);
  STRATA_CHECK(a.iters >= 1, "--iters must be at least 1, got ", a.iters);
  cfg.reps = a.reps;
  cfg.coll_iters = a.iters;
  cfg.throttle = diag::link_throttle_from_env(world);
  return cfg;
}

void print_net(const nlohmann::json& report, bool json) {
  if (diag::print_net_check(report, json, std::cout) > 0) throw ExitCode{1};
}

// One rank of the launched job.
void run_net_rank(const NetArgs& a) {
  comm::Options opt;
  opt.backend = comm::parse_backend(a.backend);
  opt.timeout_s = a.timeout;
  comm::GroupPtr pg = comm::init_from_env(opt);
  diag::NetCheckOptions o;
  o.net = net_config(a, pg->size());
  o.host.bytes = o.net.p2p_bytes;
  o.host.reps = std::min(a.reps, 3);
  o.host.tp = a.tp;
  if (!a.host_flags.iface.empty()) o.host.wanted_ifaces = launcher::parse_iface_list(a.host_flags.iface);
  o.threshold = a.threshold;
  o.expect_busbw = a.expect_busbw;
  o.expect_link_gbps = a.expect_link;
  nlohmann::json report = diag::run_net_check(*pg, o);
  pg->barrier();
  if (pg->rank() != 0) return;
  if (a.result_file.empty()) return print_net(report, a.json);  // started by mpirun / srun directly
  atomic_write_file(a.result_file, report.dump() + "\n");
}

void run_doctor_net(const NetArgs& a) {
  STRATA_CHECK(a.threshold > 0 && a.threshold <= 1, "--threshold must be in (0, 1], got ", a.threshold);
  STRATA_CHECK(a.expect_busbw >= 0, "--expect-busbw must not be negative, got ", a.expect_busbw);
  STRATA_CHECK(a.timeout >= 0, "--timeout must not be negative, got ", a.timeout);
  comm::Backend backend = comm::parse_backend(a.backend);
  if (comm::launched_as_rank()) {
    comm::refuse_stale_rank_env("strata doctor net");
    return run_net_rank(a);
  }
  launcher::LaunchOptions o;
  HostFlags::Resolved h = a.host_flags.resolve();
  o.hosts = h.hosts;
  o.hosts_source = h.source;
  o.ifaces = h.ifaces;
  STRATA_CHECK(a.tp >= 0, "--tp must not be negative, got ", a.tp);
  STRATA_CHECK(a.expect_link >= 0, "--expect-link-gbps must not be negative, got ", a.expect_link);
  o.rsh_agent = h.rsh_agent;
  STRATA_CHECK(!a.nproc_given || a.nproc >= 2, "--nproc must be at least 2 (pairs of ranks), got ", a.nproc);
  STRATA_CHECK(!a.tp_given || a.tp >= 1, "--tp must be at least 1, got ", a.tp);
  const int nproc = a.nproc_given ? a.nproc : o.hosts.empty() ? 4 : launcher::total_slots(o.hosts);
  STRATA_CHECK(nproc >= 2, "--nproc must be at least 2 (pairs of ranks), got ", nproc);
  STRATA_CHECK(a.tp <= 1 || nproc % a.tp == 0, "--tp ", a.tp, " does not divide the ", nproc, " ranks");
  STRATA_CHECK(o.hosts.empty() || backend == comm::Backend::mpi,
               "--hosts/--hostfile need --backend mpi (only MPI runs across hosts)");
  net_config(a, nproc);  // validate sizes and STRATA_THROTTLE_LINK before launching

  std::string result = (std::filesystem::temp_directory_path() /
                        cat("strata-doctor-net-", getpid(), ".json")).string();
  o.nproc = nproc;
  o.backend = backend;
  o.timeout_s = a.timeout;
  o.rank_exec = launcher::self_executable();
  o.command = {launcher::self_executable(), "doctor", "net", "--backend", a.backend, "--threshold", cat(a.threshold),
               "--expect-busbw", cat(a.expect_busbw), "--bytes", a.bytes, "--coll-bytes", a.coll_bytes,
               "--reps", cat(a.reps), "--iters", cat(a.iters), "--result-file", result, "--tp", cat(a.tp),
               "--expect-link-gbps", cat(a.expect_link)};
  if (!a.host_flags.iface.empty()) o.command.insert(o.command.end(), {"--iface", a.host_flags.iface});
  if (const char* t = std::getenv("STRATA_THROTTLE_LINK")) o.extra_env.emplace_back("STRATA_THROTTLE_LINK", t);
  launcher::LaunchResult lr = launcher::launch(o);
  std::string text, error;
  diag::ParsedJson parsed;
  bool ok = lr.exit_code == 0 && diag::read_text_file(result, text, error) && diag::parse_json_salvaging(text, parsed, error);
  std::filesystem::remove(result);
  STRATA_CHECK(lr.exit_code == 0, "doctor net: ", lr.message);
  STRATA_CHECK(ok && !parsed.truncated, "doctor net: rank 0 left no result (", error, ")");
  print_net(parsed.value, a.json);
}

Register net("doctor net", "Bandwidth and latency of every pair of ranks and busbw of collectives; flags slow ones",
             [](CLI::App& app) {
               auto a = std::make_shared<NetArgs>();
               a->nproc = 0;  // unset: 4, or every slot of --hosts / --hostfile
               CLI::Option* nproc_opt =
                   app.add_option("--nproc", a->nproc, "ranks to launch (default 4, or all slots of --hosts)");
               a->host_flags.add_to(app);
               CLI::Option* tp_opt = app.add_option("--tp", a->tp, "check that tensor-parallel groups of this size stay within a host");
               app.add_option("--expect-link-gbps", a->expect_link,
                              "expected bandwidth of each host link, GB/s (default: the fastest link measured)");
               app.add_option("--backend", a->backend, "shm, mpi or tcp");
               app.add_option("--expect-busbw", a->expect_busbw, "expected bus bandwidth, GB/s (flags below threshold x it)");
               app.add_option("--threshold", a->threshold, "flag below this fraction of the median or expected (default 0.5)");
               app.add_option("--bytes", a->bytes, "point-to-point message size (default 4M)");
               app.add_option("--coll-bytes", a->coll_bytes, "collective buffer size (default 16M)");
               app.add_option("--reps", a->reps, "rounds over all pairs; the best repetition counts (default 10)");
               app.add_option("--iters", a->iters, "timed iterations per collective; the best counts (default 8)");
               app.add_option("--timeout", a->timeout, "seconds a communication wait may take");
               app.add_flag("--json", a->json, "Print the findings as JSON");
               app.add_option("--result-file", a->result_file)->group("");  // set when launching ranks
               app.callback([a, nproc_opt, tp_opt] {
                 a->nproc_given = nproc_opt->count() > 0;
                 a->tp_given = tp_opt->count() > 0;
                 run_doctor_net(*a);
               });
             });

}  // namespace
}  // namespace strata::cli
