// The fault-injection flag family (diag/fault_inject.h) on a CLI11 command, for `strata
// train` and for test programs that stand in for the trainer:
//   --inject KIND --inject-rank R --inject-step S --timeout SECONDS
#pragma once
#include <cstdint>
#include <string>

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

  void add_to(CLI::App& app);
  // After parsing: checks --timeout, then diag::resolve_fault against the job.
  diag::FaultSpec resolve(int world, int64_t total_steps = -1) const;

 private:
  CLI::App* app_ = nullptr;  // to tell given flags from defaults
};

}  // namespace strata::cli
