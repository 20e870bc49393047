// `strata train` on N ranks. The command is the same on every rank:
//
//   strata train --nproc 4 --zero 2 ...      (not yet a rank: start 4 ranks of this very
//        |                                    command line under comm::launch, wait, exit)
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

#include "comm/hostlist.h"
#include "comm/types.h"
#include "model/context/layout.h"
#include "parallel/mesh.h"
#include "parallel/options.h"
#include "parallel/pipeline/options.h"
#include "train/trainer.h"

namespace strata::train {

// What the job does when a rank dies (--recovery): restart every rank (the supervisor,
// --max-restarts); continue on the survivors (shrink); or continue on the survivors while a
// replacement starts, which joins them at a step boundary (live). Data-parallel layouts on
// one host (docs/checkpoints.md, "Live recovery").
enum class Recovery { restart, shrink, live };
Recovery parse_recovery(const std::string& name);  // throws one line naming --recovery
const char* recovery_name(Recovery r);

struct ParallelConfig {
  int nproc = 1;                             // ranks to start on this host
  parallel::MeshDims mesh;                   // --tp, --dp, --pp (parallel/mesh.h)
  parallel::pipeline::PipelineOptions pipeline;  // --schedule, --virtual-stages, --pp-split
  bool sequence_parallel = true;             // --sp / --no-sp, with --tp > 1
  model::CpOptions cp;                       // --cp-mode, --cp-chunks, with --cp > 1
  comm::Backend backend = comm::Backend::shm;
  parallel::DataParallelOptions dp;          // --zero, --precision, --bucket-mb, --prefetch
  bool data_parallel = false;                // use the ZeRO engine even on one rank
  bool trace = false;                        // Chrome trace per rank in the run dir
  int max_restarts = 0;                      // supervisor: restarts from the latest checkpoint
  double timeout_s = 0;                      // communication timeout (0: STRATA_TIMEOUT/default)
  // Several hosts (mpi; --hosts, --hostfile, --slurm): ranks fill each host in order, so tp
  // peers (adjacent ranks) share a host; comm/launcher.h checks hosts and interfaces.
  std::vector<comm::HostSlots> hosts;
  std::string hosts_source = "--hosts", rsh_agent;
  std::vector<std::string> ifaces;           // --iface
  bool preflight = false;                    // --preflight: the bandwidth doctor before step 1
  bool elastic = false;                      // --elastic: restarts leave out the failed host
  Recovery recovery = Recovery::restart;     // --recovery

  // Ranks of the job: the launcher's world when this process is already a rank (started by
  // `strata launch`, mpirun, torchrun or SLURM), else nproc.
  int world() const;
  // Its checks are the run specification's (train/run_spec.h), with the rest of the run.
  // The mesh degrees for world() ranks (throws naming --tp, --dp and the numbers).
  parallel::MeshDims mesh_dims() const { return mesh.resolved(world()); }
};

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
