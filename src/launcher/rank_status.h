// How each rank of an mpirun job ended, recorded by the rank itself.
//
// mpirun names the first failing rank only sometimes (its "Process name / Exit code" block
// is not always printed), so under the mpi backend the launcher starts every rank through
// `strata rank-exec DIR -- PROGRAM ARGS`: a thin parent that runs the program, forwards
// SIGTERM/SIGINT/SIGHUP to it (so it can dump its flight recorder), writes
// DIR/rank-<R> = "<wait status> <CLOCK_MONOTONIC ns>" when it ends, and ends the same way.
// After a failed job the launcher reads the directory and names the first rank that failed.
#pragma once
#include <string>
#include <vector>

namespace strata::launcher {

// Runs `command` as this rank (rank from the environment, comm/bootstrap.h) and records how
// it ended in `dir`. Returns the exit code to end with; re-raises a terminating signal.
int exec_and_record_status(const std::string& dir, const std::vector<std::string>& command);

// The first failure recorded in `dir`, by time: "rank R exited with code C" or "rank R was
// killed by signal S (name)", and its rank; "" and -1 when no rank recorded a failure.
std::string first_recorded_failure(const std::string& dir, int& rank);

// The ranks that recorded how they ended in `dir` (their rank-exec parent lived to write it:
// a rank whose whole host died records nothing), in rank order.
std::vector<int> recorded_ranks(const std::string& dir);

// "exited with code C", "was killed by signal S (name)" for a waitpid() status.
std::string describe_wait_status(int status);

// The running program's absolute path (/proc/self/exe).
std::string self_executable();

}  // namespace strata::launcher
