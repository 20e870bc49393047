// One training job per run directory. Two jobs writing one run dir interleave half-lines in
// metrics.jsonl, fail each other's saves and trim each other's checkpoint records; so a job
// holds flock(LOCK_EX) on <run-dir>/.strata-lock for its whole life (the kernel releases it
// when the process ends, however it ends) with its pid written inside, and a second job is
// refused with one line naming that pid.
//
// Who holds it: the supervising `strata train` process when it launches ranks (--nproc N or
// --max-restarts, so restarts keep it), else rank 0 itself. A rank whose ancestor holds the
// lock (its pid is in the file; the parent, or mpirun's parent) is part of that job and takes
// nothing.
#pragma once
#include <string>

namespace strata::recovery {

class RunDirLock {
 public:
  // Creates run_dir if needed and takes its lock; throws naming the holder's pid when another
  // process holds it. An empty run_dir takes nothing.
  explicit RunDirLock(const std::string& run_dir);
  ~RunDirLock();
  RunDirLock(const RunDirLock&) = delete;
  RunDirLock& operator=(const RunDirLock&) = delete;
  bool held() const { return fd_ >= 0; }

 private:
  int fd_ = -1;
};

std::string run_dir_lock_path(const std::string& run_dir);  // <run-dir>/.strata-lock

}  // namespace strata::recovery
