// Running programs from tests: the built `strata` binary, worker programs and ranks, each
// with its own environment, output captured, killed (with everything it started) when it
// outlives its time limit.
#pragma once
#include <sys/types.h>

#include <string>
#include <utility>
#include <vector>

namespace strata::test {

using Env = std::vector<std::pair<std::string, std::string>>;

// Where a program's stderr goes: after stdout into one text, as a terminal shows it
// (merged), or into a text of its own (separate).
enum class Streams { merged, separate };

// A started program. stdout and stderr go to temporary files that wait_for() reads into
// out/err and removes; merged (the default), both land in out, interleaved as written.
struct Proc {
  pid_t pid = -1;
  int status = 0;             // as waitpid gives it
  std::string out, err;       // filled by wait_for()
  std::string out_path, err_path;
  bool timed_out = false;

  const std::string& output() const { return out; }
  // The exit code, or 128 + the signal that killed it (as a shell reports it).
  int exit_code() const;
};

// Starts argv (searched in PATH) with `env` added to this process's environment, in its own
// process group.
Proc start(const std::vector<std::string>& argv, const Env& env = {},
           Streams streams = Streams::merged);

// Waits up to timeout_s; past it, SIGKILLs the program's process group and records that.
// Returns false on a timeout.
bool wait_for(Proc& p, double timeout_s = 120);

// start + wait_for.
Proc run(const std::vector<std::string>& argv, const Env& env = {}, double timeout_s = 120,
         Streams streams = Streams::merged);

struct RunResult {
  int status = -1;  // exit code; -1 when killed by a signal or timed out
  std::string out;  // stdout, and stderr too when merged
  std::string err;  // stderr when separate
};

// Runs `strata ARGS` through /bin/sh (ARGS is a trusted test string: quoting, redirections
// and globs work), with `env` prefixed to the command line (e.g. "STRATA_TIMEOUT=5").
RunResult run_strata(const std::string& args, const std::string& env = "",
                     Streams streams = Streams::merged, double timeout_s = 300);

}  // namespace strata::test
