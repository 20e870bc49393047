#include "cli/fault_flags.h"

#include <cmath>

#include "CLI/CLI.hpp"
#include "core/error.h"

namespace strata::cli {

void FaultFlags::add_to(CLI::App& app) {
  app_ = &app;
  app.add_option("--inject", inject,
                 cat("inject a fault for tests and demos: ", diag::fault_kinds_help()));
  app.add_option("--inject-rank", rank, "rank that the injected fault hits (default 0)");
  app.add_option("--inject-step", step, "step at which the injected fault fires (default 1)");
  app.add_option("--timeout", timeout_s,
                 "seconds any communication wait may take before the watchdog fires");
}

diag::FaultSpec FaultFlags::resolve(int world, int64_t total_steps) const {
  STRATA_CHECK(std::isfinite(timeout_s) && timeout_s >= 0,
               "--timeout must be a non-negative number of seconds, got ", timeout_s);
  diag::FaultRequest r;
  r.inject = inject;
  r.rank = rank;
  r.step = step;
  r.rank_given = app_ && app_->count("--inject-rank") > 0;
  r.step_given = app_ && app_->count("--inject-step") > 0;
  return diag::resolve_fault(r, world, total_steps);
}

}  // namespace strata::cli
