// `strata trace merge RUN_DIR -o trace.json`: per-rank Chrome traces into one file.
// `strata trace overlap RUN_DIR`: per step, the communication time compute did not hide.
#include <cstdio>
#include <fstream>
#include <iostream>

#include "cli/command.h"
#include "core/error.h"
#include "diag/overlap.h"
#include "diag/trace_file.h"
#include "nlohmann/json.hpp"

namespace strata::cli {
namespace {

diag::TraceSet load_or_fail(const std::string& dir) {
  diag::TraceSet set = diag::load_traces(dir);
  for (auto& p : set.problems) std::fprintf(stderr, "strata trace: %s\n", p.c_str());
  if (set.ranks.empty()) {
    std::string why;
    for (auto& p : set.problems) why += "; " + p;
    fail("no usable trace (trace-rank<R>.json) in ", dir, why);
  }
  return set;
}

struct MergeArgs {
  std::string dir, out;
  bool align = false;
};

Register merge("trace merge", "Merge per-rank Chrome traces into one file, a track per rank and thread",
               [](CLI::App& app) {
                 auto a = std::make_shared<MergeArgs>();
                 app.add_option("run_dir", a->dir, "Run directory holding trace-rank<R>.json")
                     ->check(dir_path())
                     ->required();
                 app.add_option("-o,--output", a->out, "Merged trace file to write")
                     ->check(plain_path(false))
                     ->required();
                 app.add_flag("--align-start", a->align,
                              "Shift each rank so its first event is at 0 (traces from different hosts)");
                 app.callback([a] {
                   diag::TraceSet set = load_or_fail(a->dir);
                   nlohmann::json merged = diag::merge_traces(set, {a->align});
                   atomic_write_file(a->out, merged.dump() + "\n");
                   size_t events = 0;
                   for (auto& t : set.ranks) events += t.events.size();
                   std::printf("merged %zu ranks (%zu events) into %s\n", set.ranks.size(), events, a->out.c_str());
                 });
               });

struct OverlapArgs {
  std::string dir;
  bool json = false, per_rank = false;
};

Register overlap("trace overlap", "Per step: communication time exposed and the share hidden behind compute",
                 [](CLI::App& app) {
                   auto a = std::make_shared<OverlapArgs>();
                   app.add_option("run_dir", a->dir, "Run directory holding trace-rank<R>.json")
                     ->check(dir_path())
                     ->required();
                   app.add_flag("--json", a->json, "Print the report as JSON");
                   app.add_flag("--per-rank", a->per_rank, "Also print every rank's numbers per step");
                   app.callback([a] {
                     diag::TraceSet set = load_or_fail(a->dir);
                     std::map<int, std::vector<diag::Span>> spans;
                     for (auto& t : set.ranks) spans[t.rank] = t.spans;
                     diag::OverlapReport r = diag::compute_overlap(spans);
                     if (a->json) {
                       std::cout << diag::overlap_json(r).dump(2) << "\n";
                       return;
                     }
                     std::printf("%s: %zu ranks\n%s", a->dir.c_str(), set.ranks.size(), diag::format_overlap(r).c_str());
                     if (a->per_rank) {
                       std::printf("\n  step  rank    step ms  compute ms    comm ms  exposed ms\n");
                       for (auto& x : r.per_rank)
                         std::printf("%6lld  %4d  %9.3f  %10.3f  %9.3f  %10.3f\n", (long long)x.step, x.rank,
                                     x.step_ns * 1e-6, x.compute_ns * 1e-6, x.comm_ns * 1e-6, x.exposed_ns * 1e-6);
                     }
                   });
                 });

}  // namespace
}  // namespace strata::cli
