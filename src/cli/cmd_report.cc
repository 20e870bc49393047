// `strata report RUN_DIR [RUN_DIR...] -o report.html`: one self-contained HTML page of
// charts over the runs (report/report.h).
#include <chrono>
#include <cstdio>

#include "cli/command.h"
#include "ckpt/fsutil.h"
#include "core/error.h"
#include "core/files.h"
#include "report/report.h"

namespace strata::cli {
namespace {

struct ReportArgs {
  std::vector<std::string> dirs;
  std::string out = "report.html";
};

void run(const ReportArgs& a) {
  const auto t0 = std::chrono::steady_clock::now();
  require_replaceable_file(a.out, "-o");  // before any run is read: a wrong -o fails at once
  std::vector<std::string> warnings;
  std::vector<report::RunData> runs = report::load_runs(a.dirs, warnings);
  report::Report rep = report::build_report(runs);
  warnings.insert(warnings.end(), rep.warnings.begin(), rep.warnings.end());
  // Through a temporary file and a rename, as checkpoints are written: a FIFO, device or
  // directory named by -o is refused (never opened, never replaced), and a failed write
  // leaves neither a partial report nor a .tmp behind.
  try {
    ckpt::atomic_write_file(a.out, rep.html);
  } catch (const std::exception& e) {
    fail("-o ", a.out, ": cannot write the report: ", e.what());
  }
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  for (const std::string& w : warnings) std::fprintf(stderr, "strata report: warning: %s\n", w.c_str());
  std::printf("wrote %s: %zu run(s), %.1f KiB, in %.0f ms\n", a.out.c_str(), runs.size(),
              double(rep.html.size()) / 1024, ms);
}

static Register reg_report("report", "One self-contained HTML page of charts over run directories",
                    [](CLI::App& app) {
                      auto a = std::make_shared<ReportArgs>();
                      app.add_option("RUN_DIR", a->dirs, "Run directories (or scaling studies)")
                          ->check(dir_path())
                          ->required();
                      app.add_option("-o,--output", a->out, "HTML file to write")->capture_default_str();
                      app.callback([a] { run(*a); });
                    });

}  // namespace
}  // namespace strata::cli
