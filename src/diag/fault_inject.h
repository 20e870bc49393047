// Fault injection for tests and demos, shared by the trainer and the supervisor. The flags
// (cli/flags/fault.h) are
//
//   --inject KIND --inject-rank R --inject-step S [--timeout SECONDS]
//
// KIND (what rank R does at step S, counted as the trainer counts steps):
//   kill              SIGKILL itself at the start of the step (no dump from it; peers dump)
//   exit              exit(3) at the start of the step, without leaving its groups cleanly
//   hang              block forever in compute (the watchdog must fire on the others)
//   kill-during-save  SIGKILL itself in the middle of writing the step's checkpoint
//   skip-collective   skip one gradient collective of the step (the others wait at it)
//   wrong-count       call one gradient collective of the step with half the count
//   sleep:SECONDS     sleep SECONDS in forward (a straggler; a hang if > --timeout)
//   kill-during-mem-ckpt  SIGKILL itself half-way through copying the step's in-memory
//                     checkpoint (recovery/mem_checkpoints.h)
//   kill-during-mem-commit  SIGKILL itself in the commit of the step's in-memory copy, 1.5 s
//                     after the copy read the states (the next step runs on meanwhile: its
//                     peers finish it and start their next copy while this one is open)
//   corrupt-mem-ckpt  flip one byte of the step's complete in-memory copy, then SIGKILL itself
// --timeout SECONDS is the watchdog's limit for any communication wait (STRATA_TIMEOUT).
// An injection fires in the job's first attempt only (STRATA_RESTART unset or 0), so a job
// under the supervisor (--max-restarts) recovers from it instead of failing forever.
#pragma once
#include <cstdint>
#include <string>

namespace strata::diag {

// nan-grad and spike-grad scale the rank's loss gradient by NaN or by 1000 for the step (the
// spike and non-finite guards' tests and demos, train/spike_guard.h).
enum class FaultKind {
  none, kill, exit, hang, kill_during_save, skip_collective, wrong_count, sleep, nan_grad, spike_grad,
  kill_during_mem_ckpt, kill_during_mem_commit, corrupt_mem_ckpt
};

const char* fault_kind_name(FaultKind k);  // "kill", "sleep", ...
// Every accepted KIND, for messages: "kill, exit, hang, ..., sleep:SECONDS".
const char* fault_kinds_help();

struct FaultSpec {
  FaultKind kind = FaultKind::none;
  int rank = 0;
  int64_t step = 1;
  double sleep_s = 0;  // sleep only

  bool active() const { return kind != FaultKind::none; }
  bool fires(int rank_now, int64_t step_now) const {
    return active() && rank_now == rank && step_now == step;
  }
  // "skip-collective on rank 1 at step 3", "sleep 2.5 s on rank 0 at step 1", "none".
  std::string describe() const;
};

// Parses KIND ("kill", "sleep:2.5", ...). Throws Error naming the bad text and listing kinds.
FaultSpec parse_fault(const std::string& kind, int rank, int64_t step);

// Checks the spec against the job: rank in [0, world), step >= 0 and, when total_steps >= 0,
// step < total_steps (a later step would never fire). Throws Error naming the flag.
void validate_fault(const FaultSpec& f, int world, int64_t total_steps = -1);

// What the flags said: --inject KIND (empty: no injection), --inject-rank, --inject-step
// and whether those two were given at all.
struct FaultRequest {
  std::string inject;
  int rank = 0;
  int64_t step = 1;
  bool rank_given = false, step_given = false;
};

// Parses and validates against the job; --inject-rank/--inject-step without --inject is an
// error naming the flag.
FaultSpec resolve_fault(const FaultRequest& r, int world, int64_t total_steps = -1);

}  // namespace strata::diag
