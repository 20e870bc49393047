// Starts the ranks of a local job and watches them: `strata launch`, `strata bench comm` and
// `strata train --nproc` share this. No process-wide state: a supervisor may call launch()
// again after a failure to restart the whole group.
//
// shm: forks N children with STRATA_RANK, STRATA_WORLD_SIZE, STRATA_LOCAL_RANK,
//   STRATA_LOCAL_WORLD_SIZE, STRATA_JOB_ID (fresh per launch) and STRATA_TIMEOUT set.
// mpi: runs `mpirun -n N` (with --oversubscribe, and --allow-run-as-root when root) and
//   passes the same STRATA_* variables with -x, and every other STRATA_* variable of the
//   launcher's environment (the env knobs); ranks find their place from OMPI_COMM_WORLD_*.
//   With hosts: `mpirun --host a:2,b:2` (ranks fill the hosts in order), through rsh_agent
//   when given; the hosts are checked first (launcher/hostlist.h): a host named twice, more
//   ranks than slots, an unreachable host, an --iface a host lacks or has down, or an
//   interface down on one host but up on the others is an Error before any rank starts.
//   When a multi-host job fails, the hosts are probed again and what broke (a host that no
//   longer answers, an interface gone down mid-run) is added to the result's message; when
//   mpirun itself had to be killed, so are the ranks whose output said they timed out, with
//   their hosts and the peer each waited on. mpirun's --tag-output tags are taken out
//   wherever they stand, mid-line too (launcher/mpirun_output.h).
// Each output line is prefixed "[rank R] ". When a rank dies or exits non-zero, the others
// get SIGTERM (they dump their flight recorders), then SIGKILL after a grace period, and the
// result names the first rank that failed and its exit code or signal. Shared-memory
// segments of the job are removed at the end in every case.
//
// Supervision (max_restarts > 0): when the job fails (a rank died, exited non-zero, or a
// collective timed out, which makes ranks exit non-zero), every rank is stopped as above and
// the whole job is started again, up to max_restarts times, with STRATA_RESTART=<k> (k = 1,
// 2, ...; 0 on the first attempt) in the ranks' environment and a fresh job id; each restart
// is logged in one line. STRATA_RUN_ID names the supervised job, the same in every attempt
// (what survives an attempt, e.g. in-memory checkpoints, records it). Objects the job owns
// across its attempts (launcher/run_segments.h) are removed when launch returns or throws, on this
// host, and after a failure also on every host of a multi-host job. A job stopped by a signal
// to the launcher (Ctrl-C) is not restarted.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "comm/types.h"
#include "launcher/hostlist.h"

namespace strata::comm::tcp {
class StoreServer;
}

namespace strata::launcher {

struct LaunchOptions {
  int nproc = 1;
  comm::Backend backend = comm::Backend::shm;
  std::vector<std::string> command;  // program and arguments; the program is looked up in PATH
  double timeout_s = 0;       // > 0: sets STRATA_TIMEOUT for the ranks
  double grace_s = 5;         // SIGTERM -> SIGKILL delay when stopping survivors
  bool prefix_output = true;  // "[rank R] " before each line of output
  std::vector<std::pair<std::string, std::string>> extra_env;  // set for every rank
  std::string job_id;         // empty: a fresh unique id
  std::string mpirun = "mpirun";
  std::vector<std::string> mpirun_args;  // extra arguments placed before the program
  // mpi: a strata executable to start each rank through (`strata rank-exec`, see
  // launcher/rank_status.h) so the first failing rank is named even when mpirun does not say;
  // empty: rely on mpirun's messages.
  std::string rank_exec;
  std::vector<HostSlots> hosts;  // mpi across hosts; empty: this host only
  std::string hosts_source = "--hosts";  // names the hosts in errors ("hostfile PATH")
  std::string rsh_agent;         // mpirun's plm_rsh_agent; empty: OpenMPI's default (ssh)
  double reach_timeout_s = 10;   // per host, for the reachability check
  // mpi: the interfaces MPI may use (`--iface eth0`: btl_tcp_if_include, and
  // oob_tcp_if_include when this host has them too); each must exist and be up on every
  // host, or launch throws naming the host and the interface. Empty: MPI's choice (OpenMPI
  // stripes over every interface that is up).
  std::vector<std::string> ifaces;
  // shm: ranks whose death or non-zero exit does not stop the job (the others handle it:
  // a federated client that dies is a dropout of its round, fed/server.h). Each such
  // failure is reported through `log`; the job's result is that of the other ranks.
  std::vector<int> may_fail;
  int max_restarts = 0;  // relaunch the whole job after a failure, up to this many times
  // With hosts and max_restarts: a restart leaves out the host of the rank that failed
  // (named by mpirun: "process rank R ... on node H exited on signal S", or "Remote daemon:
  // ... on node H" / "Peer host: H" when the whole host or its link died), running on the
  // remaining hosts' slots; ranks reshard from their checkpoint onto the smaller world.
  bool elastic = false;
  // One line per restart ("strata launch: restart 1/3 after rank 2 was killed by signal 9");
  // default: stderr.
  std::function<void(const std::string&)> log;
  // Called in the launcher after each process started (rank; -1 for mpirun). A throw from
  // it aborts the launch like any failure there: the started processes are killed and
  // reaped, and the launcher's signal handlers restored, before the exception leaves.
  std::function<void(int rank, int64_t pid)> on_spawn;
  // What a rank is in the job (e.g. "pipeline stage 1, dp 1") for a world of `world` ranks;
  // added after the failed rank in messages: "rank 3 (pipeline stage 1, dp 1) was killed".
  std::function<std::string(int rank, int world)> rank_role;
  // shm on one host, or tcp on one host or across hosts (`strata train --recovery live`): a
  // rank killed by a signal does not stop the others. The launcher posts the world they
  // re-form without it (launcher/live_world.h: a new generation, the survivors renumbered 0..n-1
  // in rank order, a fresh job id; under tp, cp or pp without its whole replica: live_inner)
  // on the job's live board, logs one line, and supervises them on; a rank that exits
  // non-zero, or the death of the last rank, ends the job as before.
  // (mpi: refused; OpenMPI cannot shrink a communicator.)
  bool live = false;
  // With live: after each death, start a replacement (the same command, STRATA_LIVE_JOIN set;
  // on the dead rank's host) that joins the survivors at a step boundary once it is ready,
  // restoring the world's size.
  bool live_rejoin = false;
  // tcp: the job's rendezvous store, hosted by launch() for the job's lifetime (set by it;
  // a live job's board is under its keys).
  comm::tcp::StoreServer* store = nullptr;
  // With live, a model-parallel job: the ranks of one data-parallel index form a replica that
  // goes and comes back whole. World rank = (stage · dp + d) · live_inner + i (parallel/
  // mesh.h: tp and cp fastest, then dp, then pp): live_inner = tp · cp, live_stages = pp. A
  // rank's death kills the rest of its replica, the others re-form in the same order on one
  // replica fewer (each keeps its tp rank and stage), and a replica of replacements joins as
  // the last data-parallel index. 1 and 1: each rank is a replica. Replica groups
  // (--replica-groups R): live_inner = world / R, live_stages = 1: a group goes and comes back
  // whole.
  int live_inner = 1, live_stages = 1;
};

struct LaunchResult {
  int exit_code = 0;        // 0 when every rank exited 0; else the code launch should exit with
  int failed_rank = -1;     // first rank that failed, -1 if none (or unknown for mpi)
  std::string failed_host;  // mpi across hosts: the host of that rank, when mpirun named it
  std::string message;      // one line, e.g. "rank 1 was killed by signal 9 (Killed)"
  std::string job_id;       // of the last attempt
  int restarts = 0;         // relaunches done
  bool interrupted = false; // the launcher itself got SIGINT/SIGTERM
};

// Runs the job to completion. Throws Error for bad options (nproc < 1, program not found,
// mpirun missing) before starting anything; when starting fails midway (pipe, fork), it
// kills and reaps what it started and restores its signal handlers before throwing.
LaunchResult launch(const LaunchOptions& options);

}  // namespace strata::launcher
