// The fault families, TOML section [fault]:
// - FaultFlags: fault injection (diag/fault_inject.h) and the communication timeout, for
//   `strata train` and for test programs that stand in for the trainer:
//     --inject KIND --inject-rank R --inject-step S --timeout SECONDS
// - RecoveryFlags: what the job does when a rank dies (train/config.h Recovery):
//     --max-restarts R --recovery restart|shrink|live --elastic --preflight
#pragma once
#include <cstdint>
#include <string>

#include "cli/flags/family.h"
#include "diag/fault_inject.h"

namespace CLI {
class App;
}

namespace strata::cli {

struct FaultFlags {
  std::string inject;  // empty: no injection
  int rank = 0;
  int64_t step = 1;
  double timeout_s = 0;  // 0: not given (STRATA_TIMEOUT or the default applies)

  void add_to(CLI::App& app, const Only& only = {});
  // After parsing: checks --timeout, then diag::resolve_fault against the job.
  diag::FaultSpec resolve(int world, int64_t total_steps = -1) const;

 private:
  CLI::App* app_ = nullptr;  // to tell given flags from defaults
};

struct RecoveryFlags {
  int max_restarts = 0;
  std::string recovery = "restart";
  bool elastic = false, preflight = false;

  void add_to(CLI::App& app, const Only& only = {});
};

}  // namespace strata::cli
