// Where this process sits in the job, read from the environment. strata's launcher sets
// STRATA_RANK, STRATA_WORLD_SIZE, STRATA_LOCAL_RANK, STRATA_LOCAL_WORLD_SIZE and STRATA_JOB_ID;
// processes started by others are recognised too, first match wins:
//   OpenMPI   OMPI_COMM_WORLD_RANK/_SIZE/_LOCAL_RANK/_LOCAL_SIZE (job id from the jobid MCA var)
//   PMI       PMI_RANK, PMI_SIZE
//   SLURM     SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID (job id SLURM_JOB_ID.SLURM_STEP_ID)
//   torchrun  RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE (job id TORCHELASTIC_RUN_ID)
// With none of them set, the process is rank 0 of a world of 1.
#pragma once
#include <string>

namespace strata::comm {

struct RankEnv {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
  std::string job_id;        // empty when the environment names none
  std::string source = "none";  // "strata", "ompi", "pmi", "slurm", "torchrun", "none"
};

// Throws Error naming the variable when a value is malformed or out of range.
RankEnv detect_rank_env();

// True when any launcher's rank variables are present (this process is one rank of a job).
bool launched_as_rank();

// True when STRATA_RANK and STRATA_WORLD_SIZE are set but no strata launcher among this
// process's ancestors set them (STRATA_LAUNCHER_PID names none): variables left over in a
// shell, or copied from another job, rather than a launch in progress.
bool strata_rank_env_is_stale();

// The rank variables as this process has them: "STRATA_RANK=0 STRATA_WORLD_SIZE=2 STRATA_JOB_ID=j".
std::string strata_rank_env_text();

// For a command asked to start its own ranks (`request`, e.g. "--nproc 2"): throws Error in
// one line naming the variables when they are stale, rather than joining a foreign job as
// one of its ranks and waiting out the timeout.
void refuse_stale_rank_env(const std::string& request);

// This process's restart count from STRATA_RESTART (0 when unset): what a rank reads to
// know it is a relaunch (a trainer then resumes from its latest checkpoint).
int restart_attempt();
// The supervised job this process belongs to (STRATA_RUN_ID, the same across its restarts);
// empty when no launcher set it.
std::string supervised_job_id();

// A fresh job id: "<hostname-ish>-<pid>-<random>" (characters safe in shm names).
std::string new_job_id();

// Removes /dev/shm segments that belong to job_id; returns how many were removed.
int remove_job_segments(const std::string& job_id);

}  // namespace strata::comm
