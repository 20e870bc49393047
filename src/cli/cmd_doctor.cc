// `strata doctor hang RUN_DIR`: names what wedged a job, from its flight-recorder dumps.
#include <cstdio>
#include <iostream>

#include "cli/command.h"
#include "core/error.h"
#include "diag/flight_dump.h"
#include "diag/hang_doctor.h"
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
                    ->required();
                app.add_flag("--json", a->json, "Print the findings as JSON");
                app.callback([a] { run_doctor_hang(*a); });
              });

}  // namespace
}  // namespace strata::cli
