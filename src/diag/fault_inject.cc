#include "diag/fault_inject.h"

#include <cmath>
#include <cstdlib>

#include "core/error.h"
#include "core/finite.h"

namespace strata::diag {

const char* fault_kind_name(FaultKind k) {
  switch (k) {
    case FaultKind::none: return "none";
    case FaultKind::kill: return "kill";
    case FaultKind::exit: return "exit";
    case FaultKind::hang: return "hang";
    case FaultKind::kill_during_save: return "kill-during-save";
    case FaultKind::skip_collective: return "skip-collective";
    case FaultKind::wrong_count: return "wrong-count";
    case FaultKind::sleep: return "sleep";
    case FaultKind::nan_grad: return "nan-grad";
    case FaultKind::spike_grad: return "spike-grad";
    case FaultKind::kill_during_mem_ckpt: return "kill-during-mem-ckpt";
    case FaultKind::kill_during_mem_commit: return "kill-during-mem-commit";
    case FaultKind::corrupt_mem_ckpt: return "corrupt-mem-ckpt";
  }
  return "?";
}

const char* fault_kinds_help() {
  return "kill, exit, hang, kill-during-save, skip-collective, wrong-count, nan-grad, spike-grad, "
         "kill-during-mem-ckpt, kill-during-mem-commit, corrupt-mem-ckpt, sleep:SECONDS";
}

std::string FaultSpec::describe() const {
  if (!active()) return "none";
  std::string what = kind == FaultKind::sleep ? cat("sleep ", sleep_s, " s") : std::string(fault_kind_name(kind));
  return cat(what, " on rank ", rank, " at step ", step);
}

FaultSpec parse_fault(const std::string& text, int rank, int64_t step) {
  FaultSpec f;
  f.rank = rank;
  f.step = step;
  static const FaultKind plain[] = {FaultKind::kill, FaultKind::exit, FaultKind::hang, FaultKind::kill_during_save,
                                    FaultKind::skip_collective, FaultKind::wrong_count,
                                    FaultKind::nan_grad, FaultKind::spike_grad,
                                    FaultKind::kill_during_mem_ckpt, FaultKind::kill_during_mem_commit,
                                    FaultKind::corrupt_mem_ckpt};
  for (FaultKind k : plain)
    if (text == fault_kind_name(k)) {
      f.kind = k;
      return f;
    }
  if (text.rfind("sleep:", 0) == 0) {
    // sleep_for converts to nanoseconds in 64 bits: past ~292 years it wraps and never sleeps.
    constexpr double kMaxSleepS = 7 * 86400.0;
    const std::string num = text.substr(6);
    const std::string problem = number_problem(num, NumberRange{0, kMaxSleepS, true});
    STRATA_CHECK_SETTING(problem.empty(), setting("inject"), " ", text, ": SECONDS ", problem,
                         " (a positive number of seconds, at most a week, e.g. sleep:2.5)");
    const double s = std::strtod(num.c_str(), nullptr);
    f.kind = FaultKind::sleep;
    f.sleep_s = s;
    return f;
  }
  STRATA_CHECK_SETTING(text != "sleep", setting("inject"),
                       " sleep needs a duration: sleep:SECONDS (e.g. sleep:2.5)");
  fail_setting(setting("inject"), " ", text.empty() ? "''" : text,
               " is not a fault kind; use one of ", fault_kinds_help());
}

void validate_fault(const FaultSpec& f, int world, int64_t total_steps) {
  if (!f.active()) return;
  STRATA_CHECK_SETTING(f.rank >= 0 && f.rank < world, setting("inject-rank"), " ", f.rank,
                       " is not a rank of this job (ranks 0-", world - 1, ")");
  STRATA_CHECK_SETTING(f.step >= 0, setting("inject-step"), " must not be negative, got ", f.step);
  STRATA_CHECK_SETTING(total_steps < 0 || f.step < total_steps, setting("inject-step"), " ", f.step,
                       " is past the last step (", total_steps - 1,
                       "): the fault would never fire");
}

FaultSpec resolve_fault(const FaultRequest& r, int world, int64_t total_steps) {
  if (r.inject.empty()) {
    STRATA_CHECK_SETTING(!r.rank_given && !r.step_given,
                         r.rank_given ? setting("inject-rank") : setting("inject-step"), " needs ",
                         setting("inject"), " KIND (", fault_kinds_help(), ")");
    return {};
  }
  FaultSpec f = parse_fault(r.inject, r.rank, r.step);
  validate_fault(f, world, total_steps);
  return f;
}

}  // namespace strata::diag
