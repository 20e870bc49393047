// Measuring this host for the planner (terms in calibrate.h).
#include "report/calibrate.h"

#include <cblas.h>
#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <thread>
#include <vector>

#include "core/error.h"
#include "core/files.h"
#include "core/stats.h"
#include "plan/hardware.h"
#include "report/run_data.h"
#include "report/subprocess.h"
#include "train/peak.h"

namespace strata::report {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// Best GB/s (bytes read + written) of copying 64 MiB, over 8 tries, on this thread.
double copy_bandwidth_gbps() {
  const size_t n = size_t(64) << 20;
  std::vector<char> a(n, 1), b(n, 2);
  double best = 0;
  for (int i = 0; i < 8; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    std::memcpy(b.data(), a.data(), n);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    a[size_t(i)] = b[n - 1 - size_t(i)];  // keep the copies observable
    best = std::max(best, 2.0 * double(n) / s / 1e9);
  }
  return best;
}

// α and β of the host's all-reduce. plan::fit_link_from_bench takes β from the fastest row,
// which on a CPU is a cache-resident message (256 KiB at several times the bandwidth of
// memory); gradient buckets are MiB-sized, so β here is the median bus bandwidth of the
// rows of 1 MiB and more (the largest row when there are none). α: the shortest time over
// the ring's 2(n-1) latency steps.
struct HostLink {
  double gbps = 0, alpha_us = 0;
  int rows = 0, ranks = 0;
};

HostLink fit_host_link(const std::string& path) {
  std::ifstream in(path);
  std::vector<json> rows;
  for (std::string line; std::getline(in, line);) {
    json j = json::parse(line, nullptr, false);
    if (!j.is_discarded() && j.is_object() && j.value("op", "") == "allreduce" &&
        number(j, "bytes") > 0 && number(j, "time_us") > 0 && number(j, "algbw") > 0)
      rows.push_back(j);
  }
  STRATA_CHECK(!rows.empty(), path, ": no all-reduce rows with bytes, time_us, algbw and busbw");
  std::sort(rows.begin(), rows.end(), [](const json& a, const json& b) {
    return number(a, "bytes") < number(b, "bytes");
  });
  std::vector<double> big;
  double least = number(rows[0], "time_us");
  for (const json& r : rows) {
    least = std::min(least, number(r, "time_us"));
    if (number(r, "bytes") >= 1048576) big.push_back(number(r, "busbw"));
  }
  if (big.empty()) big.push_back(number(rows.back(), "busbw"));
  HostLink h;
  h.rows = int(rows.size());
  const double factor = number(rows.back(), "busbw") / number(rows.back(), "algbw");  // 2(n-1)/n
  STRATA_CHECK(factor > 0 && factor < 2, path, ": busbw/algbw = ", factor, " is not an all-reduce bus factor");
  h.ranks = int(std::lround(1.0 / (1.0 - factor / 2)));
  h.gbps = median(big);
  h.alpha_us = least / (2.0 * (h.ranks - 1));
  return h;
}

double physical_memory_gib() {
  const double pages = double(sysconf(_SC_PHYS_PAGES)), page = double(sysconf(_SC_PAGESIZE));
  return pages > 0 && page > 0 ? pages * page / (1024.0 * 1024 * 1024) : 1.0;
}

std::string today() {
  char b[32];
  const std::time_t t = std::time(nullptr);
  std::strftime(b, sizeof b, "%Y-%m-%d", std::gmtime(&t));
  return b;
}

}  // namespace

Calibration calibrate(const CalibrateOptions& o) {
  STRATA_CHECK(o.threads >= 1, "--threads must be at least 1 (got ", o.threads, ")");
  STRATA_CHECK(o.comm_ranks >= 2, "--nproc must be at least 2 to fit a link (got ", o.comm_ranks, ")");
  Calibration c;
  c.path = o.out.empty() ? plan::local_gpu_path() : o.out;
  fs::path dir = o.work_dir.empty() ? fs::path(c.path).parent_path() : fs::path(o.work_dir);
  if (dir.empty()) dir = ".";
  std::error_code ec;
  fs::create_directories(dir, ec);
  STRATA_CHECK(fs::is_directory(dir), "cannot create ", dir.string(), " for the calibration");

  omp_set_num_threads(o.threads);
  openblas_set_num_threads(o.threads);
  const double probe_gflops = train::measure_sgemm_gflops(o.probe_s);
  const double gbps = copy_bandwidth_gbps();

  const std::string bench = (dir / "local-comm.jsonl").string(), bench_err = bench + ".err";
  ChildResult br = run_strata({"bench", "comm", "--nproc", std::to_string(o.comm_ranks), "--op",
                               "allreduce", "-b", "1K", "-e", "16M", "-f", "4", "--json"},
                              {{"OMP_NUM_THREADS", std::to_string(o.threads)}}, bench, bench_err);
  STRATA_CHECK(br.status == 0, "strata bench comm failed (exit ", br.status, "): ", last_line(bench_err));
  const HostLink link = fit_host_link(bench);

  // The compute efficiency: one rank training the calibration model against this peak.
  const std::string run = (dir / "local-calibration-run").string();
  fs::remove_all(run, ec);
  std::vector<std::string> args = {"train", "--model", "tiny", "--seq", "64", "--batch", "4",
                                   "--steps", "16", "--data", "synthetic:200000", "--eval-every",
                                   "0", "--eval-batches", "1", "--sample-tokens", "0"};
  for (const std::string& a : o.train_args) {
    STRATA_CHECK(a != "--nproc" && a != "--threads" && a != "--run-dir" && a != "--peak-gflops",
                 a, " is set by the calibration (one rank, --threads, its own run directory)");
    args.push_back(a);
  }
  for (const std::string& a : {std::string("--threads"), std::to_string(o.threads),
                               std::string("--peak-gflops"), std::to_string(probe_gflops),
                               std::string("--run-dir"), run})
    args.push_back(a);
  ChildResult tr = run_strata(args, {}, run + ".out", run + ".err");
  STRATA_CHECK(tr.status == 0, "the calibration run failed (exit ", tr.status, "): ", last_line(run + ".err"));
  const RunData rd = load_run(run);
  const double mfu = number(rd.summary, "median_mfu");
  STRATA_CHECK(mfu > 0, "the calibration run reported no MFU (", run, "/summary.json)");
  // A probe taken while other work shares the cores reads low, and the run then beats it
  // (MFU > 1): the run's own rate stands in for the peak. What the planner multiplies,
  // peak x efficiency, is the model's measured rate either way.
  const double gflops = probe_gflops * std::max(1.0, mfu), eff = std::min(1.0, mfu);

  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  const int per_node = std::max(1, int(cores) / o.threads);
  c.gpu = {{"name", "local"},
           {"source", "strata plan calibrate, " + today() + ": " + train::cpu_model() + ", " +
                          std::to_string(o.threads) + " thread(s) per rank; efficiency from " + rd.model_text()},
           {"memory_gib", physical_memory_gib() / per_node},
           {"peak_tflops", gflops / 1e3},
           {"hbm_gbps", gbps},
           {"intra_node_gbps", link.gbps},
           {"intra_node_latency_us", link.alpha_us},
           {"inter_node_gbps", link.gbps},
           {"inter_node_latency_us", link.alpha_us},
           {"gpus_per_node", per_node},
           {"compute_efficiency", eff}};
  plan::gpu_from_json(c.gpu, c.path);  // what the planner will read must validate
  const fs::path parent = fs::path(c.path).parent_path();
  if (!parent.empty()) fs::create_directories(parent, ec);
  atomic_write_file(c.path, c.gpu.dump(2) + "\n");
  char b[2048];
  std::snprintf(b, sizeof b,
                "strata plan calibrate: %s, %u cores, %d thread(s) per rank\n"
                "  sgemm peak         %.1f GFLOP/s per rank (probe %.1f)\n"
                "  memory bandwidth   %.1f GB/s (64 MiB copy, read + write)\n"
                "  link (shm)         %.2f GB/s (median busbw of rows >= 1 MiB), %.2f us per step (%d all-reduce rows on %d ranks)\n"
                "  compute efficiency %.1f%% (median MFU of one rank training %s)\n"
                "  ranks per host     %d\n"
                "wrote %s (use: strata plan --gpu local, strata bench scaling)\n",
                train::cpu_model().c_str(), cores, o.threads, gflops, probe_gflops, gbps, link.gbps,
                link.alpha_us, link.rows, link.ranks, 100 * eff, rd.model_text().c_str(), per_node,
                c.path.c_str());
  c.text = b;
  return c;
}

}  // namespace strata::report
