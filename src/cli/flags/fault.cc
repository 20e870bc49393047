#include "cli/flags/fault.h"

#include <cmath>

#include "CLI/CLI.hpp"
#include "cli/command.h"
#include "core/error.h"

namespace strata::cli {

void FaultFlags::add_to(CLI::App& app, const Only& only) {
  FamilyScope family(app, "Faults and timeouts", "fault", only);
  app_ = &app;
  app.add_option("--inject", inject,
                 cat("inject a fault for tests and demos: ", diag::fault_kinds_help()));
  app.add_option("--inject-rank", rank, "rank that the injected fault hits (default 0)");
  app.add_option("--inject-step", step, "step at which the injected fault fires (default 1)");
  // Bounded so that inf, 1e400 or 2^63 never become a wait that cannot end.
  app.add_option("--timeout", timeout_s,
                 "seconds any communication wait may take before the watchdog fires (sets STRATA_TIMEOUT)")
      ->check(finite_at_most(kMaxSeconds));
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

void RecoveryFlags::add_to(CLI::App& app, const Only& only) {
  FamilyScope family(app, "Recovery", "fault", only);
  app.add_option("--max-restarts", max_restarts,
                 "Restart the whole job after a failure, up to R times (a training job resumes from its "
                 "latest checkpoint; sets STRATA_RESTART)")
      ->capture_default_str();
  app.add_option("--recovery", recovery,
                 "When a rank dies: restart the whole job (restart, with --max-restarts); continue on "
                 "the surviving data-parallel ranks from the in-memory copies (shrink); or continue "
                 "on them while a replacement starts and joins at a step boundary (live). shrink "
                 "and live: one host, --nproc, --mem-ckpt-every, dp and ZeRO 0-2 only")
      ->capture_default_str();
  app.add_flag("--elastic", elastic,
               "With --max-restarts across hosts: restart on the remaining hosts when one fails, resharding "
               "the checkpoint and the data position onto the smaller world");
  app.add_flag("--preflight", preflight,
               "Before step 1, run the bandwidth doctor (strata doctor net) over the job's ranks and hosts");
}

}  // namespace strata::cli
