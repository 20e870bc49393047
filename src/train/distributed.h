// `strata train` on N ranks. The command is the same on every rank:
//
//   strata train --nproc 4 --zero 2 ...      (not yet a rank: start 4 ranks of this very
//        |                                    command line under launcher::launch, wait, exit)
//        +-- rank r: strata train ... with STRATA_RANK=r, STRATA_WORLD_SIZE=4 in the env
//              join the world group, build the data-parallel engine, train
//
// A job started by another launcher (mpirun, torchrun, SLURM) is joined directly: the rank
// variables are read from the environment (comm/bootstrap.h). One process without --zero or
// --precision trains with the single-process engine and needs no communicator.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "train/config.h"
#include "train/trainer.h"

namespace strata::train {

// When this process is not yet a rank and the job needs ranks (nproc > 1, or a supervisor
// for restarts), starts them with this process's own command line and returns the exit code
// the command should end with; otherwise returns nothing and the caller trains in-process.
// Flight-recorder dumps go to the run dir unless STRATA_DUMP_DIR says otherwise.
// This process's program and arguments (from /proc/self/cmdline, the program resolved to this
// very binary), to start the same command once per rank.
std::vector<std::string> own_command_line();

std::optional<int> launch_ranks_if_needed(const TrainConfig& cfg, const ParallelConfig& pc);

// Trains as this process's rank (rank 0 of 1 when alone): joins the group, builds the step
// engine, writes the trace when asked.
TrainResult train_as_rank(const TrainConfig& cfg, const ParallelConfig& pc);

}  // namespace strata::train
