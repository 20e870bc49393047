// Loader throughput: writes an llm.c .bin token file of --tokens tokens (default 100M) into a
// temporary directory, opens it (header check plus one validation pass over every token),
// then pulls a whole epoch of one rank's batches through Loader::next and reports tokens/s
// delivered and CPU use (getrusage user+sys over wall time). Variants: with prefetch (the
// default configuration) and synchronous, and a "paced" run in which the consumer spends a
// fixed time per step as a training step would, to show how long next() waits.
//
// --doc-mask fills every micro-batch's document starts (document token 50256, as --doc-mask
// does for GPT-2 data); --mixture writes two files of half the tokens each and reads them as
// the mixture "A:0.7,B:0.3" (data/mixture.h), so the cost of both features shows.
//
//   bench_loader [--tokens N] [--seq T] [--micro-batch b] [--world W] [--prefetch D]
//                [--paced-ms MS] [--dir DIR] [--doc-mask] [--mixture] [--json]
// The file is removed at exit. Prints one JSON object with --json.
#include <stdlib.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>

#include "core/error.h"
#include "core/rng.h"
#include "core/timer.h"
#include "data/dataset.h"
#include "data/token_file.h"

using namespace strata;
using namespace strata::data;

namespace {

struct Args {
  int64_t tokens = 100'000'000;
  int64_t seq = 256;
  int micro_batch = 8, world = 2, prefetch = 2;
  double paced_ms = 2.0;
  std::string dir = "/tmp";
  bool json = false;
  bool doc_mask = false, mixture = false;
};

double cpu_seconds() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return double(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
         1e-6 * double(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
}

struct Measure {
  double wall = 0, cpu = 0, wait = 0;
  int64_t tokens = 0, steps = 0;
  double tokens_per_s() const { return double(tokens) / wall; }
  double cores() const { return cpu / wall; }
};

// One epoch of rank 0's batches; the consumer checksums every token it receives (so nothing
// is optimised away) and optionally sleeps paced_ms per step like a training step.
Measure run_epoch(const TokenSource& src, const Args& a, int prefetch, double paced_ms,
                  int64_t max_steps, uint64_t* checksum) {
  SamplerConfig cfg;
  cfg.seq = a.seq;
  cfg.micro_batch = a.micro_batch;
  cfg.world = a.world;
  cfg.seed = 1;
  if (a.doc_mask) cfg.doc_token = int32_t(kGpt2Vocab - 1);
  Measure m;
  double cpu0 = cpu_seconds();
  Stopwatch sw;
  Loader loader(src, cfg, 0, {}, prefetch);
  const int64_t steps = std::min(loader.steps_per_epoch(), max_steps);
  for (int64_t k = 0; k < steps; ++k) {
    StepBatch sb = loader.next();
    for (const MicroBatch& mb : sb.micro) {
      for (int32_t t : mb.targets) *checksum += uint64_t(t);
      for (int32_t d : mb.doc_start) *checksum += uint64_t(d);
      m.tokens += int64_t(mb.targets.size());
    }
    if (paced_ms > 0) std::this_thread::sleep_for(std::chrono::microseconds(int64_t(paced_ms * 1e3)));
  }
  m.wall = sw.seconds();
  m.cpu = cpu_seconds() - cpu0;
  m.wait = loader.wait_seconds();
  m.steps = steps;
  return m;
}

void parse(int argc, char** argv, Args& a) {
  for (int i = 1; i < argc; ++i) {
    std::string k = argv[i];
    auto val = [&]() -> std::string {
      STRATA_CHECK(i + 1 < argc, "flag ", k, " needs a value");
      return argv[++i];
    };
    if (k == "--tokens") a.tokens = std::stoll(val());
    else if (k == "--seq") a.seq = std::stoll(val());
    else if (k == "--micro-batch") a.micro_batch = std::stoi(val());
    else if (k == "--world") a.world = std::stoi(val());
    else if (k == "--prefetch") a.prefetch = std::stoi(val());
    else if (k == "--paced-ms") a.paced_ms = std::stod(val());
    else if (k == "--dir") a.dir = val();
    else if (k == "--json") a.json = true;
    else if (k == "--doc-mask") a.doc_mask = true;
    else if (k == "--mixture") a.mixture = true;
    else fail("unknown flag ", k);
  }
}

}  // namespace

int main(int argc, char** argv) try {
  Args a;
  parse(argc, argv, a);
  std::string tmpl = a.dir + "/strata_bench_data_XXXXXX";
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back('\0');
  STRATA_CHECK(::mkdtemp(buf.data()), "cannot create a temporary directory under ", a.dir);
  const std::filesystem::path dir(buf.data());
  struct Cleanup {
    std::filesystem::path p;
    ~Cleanup() { std::filesystem::remove_all(p); }
  } cleanup{dir};
  const std::string path = (dir / "bench_tokens.bin").string();
  const std::string path_b = (dir / "bench_tokens_b.bin").string();

  Stopwatch gen;
  Rng rng(7, 0);
  auto write = [&](const std::string& p, int64_t n) {
    std::vector<uint16_t> tokens(static_cast<size_t>(n));
    for (auto& t : tokens) t = uint16_t(rng.next_u32() % kGpt2Vocab);
    write_bin(p, tokens);
  };
  write(path, a.mixture ? a.tokens / 2 : a.tokens);
  if (a.mixture) write(path_b, a.tokens - a.tokens / 2);
  const double gen_s = gen.seconds();

  Stopwatch open;
  Split split = open_split(a.mixture ? path + ":0.7," + path_b + ":0.3" : path, 0, 0.0);
  const double open_s = open.seconds();

  uint64_t checksum = 0;
  Measure warm = run_epoch(*split.train, a, a.prefetch, 0, 200, &checksum);  // page in
  Measure pre = run_epoch(*split.train, a, a.prefetch, 0, INT64_MAX, &checksum);
  Measure sync = run_epoch(*split.train, a, 0, 0, INT64_MAX, &checksum);
  Measure paced = run_epoch(*split.train, a, a.prefetch, a.paced_ms, 500, &checksum);
  (void)warm;

  auto line = [&](const char* name, const Measure& m) {
    std::printf("  %-22s %8lld steps %12.0f tokens/s  %5.2f cores (user+sys / wall)  "
                "next() waited %.3f s of %.2f s\n",
                name, (long long)m.steps, m.tokens_per_s(), m.cores(), m.wait, m.wall);
  };
  if (a.json) {
    auto obj = [](const Measure& m) {
      return cat("{\"steps\":", m.steps, ",\"tokens\":", m.tokens, ",\"wall_s\":", m.wall,
                 ",\"cpu_s\":", m.cpu, ",\"tokens_per_s\":", m.tokens_per_s(), ",\"cores\":",
                 m.cores(), ",\"wait_s\":", m.wait, "}");
    };
    std::printf("{\"doc_mask\":%s,\"mixture\":%s,\"file_tokens\":%lld,\"seq\":%lld,\"micro_batch\":%d,\"world\":%d,"
                "\"prefetch\":%d,\"generate_s\":%.3f,\"open_validate_s\":%.3f,"
                "\"prefetch_run\":%s,\"sync_run\":%s,\"paced_run\":%s,\"paced_ms\":%g,"
                "\"checksum\":%llu}\n",
                a.doc_mask ? "true" : "false", a.mixture ? "true" : "false", (long long)a.tokens,
                (long long)a.seq, a.micro_batch, a.world, a.prefetch, gen_s,
                open_s, obj(pre).c_str(), obj(sync).c_str(), obj(paced).c_str(), a.paced_ms,
                (unsigned long long)checksum);
  } else {
    std::printf("loader benchmark: %lld-token .bin %s, seq %lld, micro-batch %d, rank 0 of %d%s\n",
                (long long)a.tokens, a.mixture ? "mixture 0.7/0.3 of two files" : "file",
                (long long)a.seq, a.micro_batch, a.world, a.doc_mask ? ", document starts" : "");
    std::printf("  write file %.2f s; open + validate every token %.3f s (%.0f M tokens/s)\n",
                gen_s, open_s, double(a.tokens) / open_s / 1e6);
    line("prefetch (epoch)", pre);
    line("synchronous (epoch)", sync);
    line("prefetch, paced", paced);
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "bench_loader: error: %s\n", e.what());
  return 1;
}
