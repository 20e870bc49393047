// The mpi backend: setup, waiting, sub-groups and point-to-point. Collectives are in
// mpi_collectives.cc.
#include "comm/mpi/mpi_transport.h"

#include "core/error.h"

#ifndef STRATA_HAVE_MPI

namespace strata::comm::detail {
bool mpi_available() { return false; }
std::unique_ptr<Transport> make_mpi_world(const Options&) {
  fail("the mpi backend is not available: strata was built without MPI (install "
       "libopenmpi-dev and reconfigure)");
}
}  // namespace strata::comm::detail

#else

#include <sched.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <thread>

#include "comm/mpi/mpi_internal.h"
#include "core/env.h"
#include "core/timer.h"

namespace strata::comm::detail {

bool mpi_available() { return true; }

MpiLock::MpiLock() {
  if (mpi_state().serialize) mpi_state().mu.lock();
}
MpiLock::~MpiLock() {
  if (mpi_state().serialize) mpi_state().mu.unlock();
}

MpiState& mpi_state() {
  static MpiState s;
  return s;
}

static const char* thread_level_name(int level) {
  switch (level) {
    case MPI_THREAD_SINGLE: return "MPI_THREAD_SINGLE";
    case MPI_THREAD_FUNNELED: return "MPI_THREAD_FUNNELED";
    case MPI_THREAD_SERIALIZED: return "MPI_THREAD_SERIALIZED";
    case MPI_THREAD_MULTIPLE: return "MPI_THREAD_MULTIPLE";
  }
  return "unknown";
}

static const EnvVar kFinalizeTimeout("STRATA_MPI_FINALIZE_TIMEOUT", "10",
                                     "seconds MPI_Finalize may take at exit before the rank exits "
                                     "without it (a peer host cut off mid-run makes it wait forever)");

static const EnvVar kInitTimeout("STRATA_MPI_INIT_TIMEOUT", "300",
                                 "seconds MPI_Init may take before the rank exits with an error (mpirun's "
                                 "daemons that cannot reach each other make it wait forever)");

// Runs `call` (an MPI call that waits on every peer through mpirun's daemons and cannot time
// out by itself); if it has not returned within the variable's seconds, the rank says so and
// exits with status 1, so that mpirun ends the job and the launcher reports (or restarts) it.
template <class Call>
static void exit_unless_done_within(const EnvVar& limit_var, const char* what, const char* suspect, Call call) {
  const double limit = limit_var.get_double();
  auto done = std::make_shared<std::atomic<bool>>(false);
  std::thread([limit, done, what, suspect, name = limit_var.name()] {
    const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(limit);
    while (!done->load() && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    if (done->load()) return;
    std::fprintf(stderr, "strata: %s did not return within %g s (%s; %s); exiting\n", what, limit,
                 name, suspect);
    std::fflush(stderr);
    _exit(1);
  }).detach();
  call();
  done->store(true);
}

// MPI_Finalize synchronises with every peer through mpirun's daemons; with a host cut off
// (its link down) it never returns. A rank that gets here after a failure must still exit.
static void finalize_at_exit() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  exit_unless_done_within(kFinalizeTimeout, "MPI_Finalize", "a peer host unreachable?", [] { MPI_Finalize(); });
}

static void init_mpi() {
  MpiState& s = mpi_state();
  std::lock_guard lk(s.init_mu);
  if (s.initialised) return;
  int inited = 0;
  MPI_Initialized(&inited);
  int provided = 0;
  if (!inited) {
    int rc = MPI_SUCCESS;
    exit_unless_done_within(kInitTimeout, "MPI_Init", "mpirun's daemons or a peer host unreachable?",
                            [&] { rc = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided); });
    STRATA_CHECK(rc == MPI_SUCCESS, "MPI_Init_thread failed (is this process started by mpirun?)");
    std::atexit(finalize_at_exit);
  } else {
    MPI_Query_thread(&provided);
  }
  STRATA_CHECK(provided >= MPI_THREAD_SERIALIZED, "the MPI library provides only ",
               thread_level_name(provided),
               "; strata's mpi backend needs MPI_THREAD_SERIALIZED or MPI_THREAD_MULTIPLE");
  s.serialize = provided < MPI_THREAD_MULTIPLE;
  s.thread_level = provided;
  s.initialised = true;
}

void mpi_check(int rc, const char* what, const MpiTransport& t, const OpDesc* op) {
  if (rc == MPI_SUCCESS) return;
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  fail("group ", t.name(), op ? cat(" ", op_name(op->op), " #", op->seq) : std::string(), ": ",
       what, " failed: ", std::string(msg, size_t(len)));
}

MpiTransport::MpiTransport(MPI_Comm comm, std::string name) : comm_(comm), name_(std::move(name)) {
  MpiLock lk;
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &size_);
  MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
}

MpiTransport::~MpiTransport() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized && comm_ != MPI_COMM_NULL && !broken_) {
    MpiLock lk;
    MPI_Comm_free(&comm_);
  }
}

std::unique_ptr<Transport> make_mpi_world(const Options&) {
  init_mpi();
  MPI_Comm comm;
  {
    MpiLock lk;
    MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  }
  return std::make_unique<MpiTransport>(comm, "world");
}

// Polls a request until it completes, the op's deadline passes, or the group is aborted.
// Spins with MPI_Test first (shared-memory MPI progresses inside MPI_Test), then backs off.
void MpiTransport::wait_request(MPI_Request& req, const OpDesc& op) {
  int64_t t0 = now_ns();
  for (int i = 0;; ++i) {
    int done = 0;
    MPI_Status st;
    {
      MpiLock lk;
      mpi_check(MPI_Test(&req, &done, &st), "MPI_Test", *this, &op);
    }
    if (done) return;
    if (aborted_.load()) {
      broken_ = true;
      throw PeerAbortError(cat("group ", name_, " ", op_name(op.op), " #", op.seq,
                               ": group failed earlier: ", abort_msg_), abort_reason_);
    }
    int64_t now = now_ns();
    if (now > op.deadline_ns) {
      broken_ = true;  // an MPI collective cannot be cancelled; the group is unusable
      throw TimeoutError(cat("group ", name_, " ", op_name(op.op), " #", op.seq,
                             ": timed out after ", double(now - t0) * 1e-9,
                             " s waiting for the other ranks (mpi backend)"));
    }
    if (now - t0 < 50'000) continue;
    if (now - t0 < 2'000'000) {
      sched_yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
}

std::unique_ptr<Transport> MpiTransport::split(OpDesc& op, const std::vector<int>& world_ranks,
                                               std::vector<int>& world_ranks_out) {
  MPI_Comm sub = MPI_COMM_NULL;
  {
    MpiLock lk;
    mpi_check(MPI_Comm_split(comm_, op.color < 0 ? MPI_UNDEFINED : op.color, op.key, &sub),
              "MPI_Comm_split", *this, &op);
  }
  if (sub == MPI_COMM_NULL) return nullptr;
  auto t = std::make_unique<MpiTransport>(sub, op.split_name);
  int mine = world_ranks[size_t(rank_)];
  world_ranks_out.assign(size_t(t->size()), -1);
  MPI_Request req;
  {
    MpiLock lk;
    mpi_check(MPI_Iallgather(&mine, 1, MPI_INT, world_ranks_out.data(), 1, MPI_INT, sub, &req),
              "MPI_Iallgather", *this, &op);
  }
  t->wait_request(req, op);
  return t;
}

bool MpiTransport::p2p_progress(OpDesc& op, P2PState& st) {
  if (aborted_.load())
    throw PeerAbortError(cat("group ", name_, " ", op_name(op.op), " #", op.seq,
                             ": group failed earlier: ", abort_msg_), abort_reason_);
  size_t bytes = op.count * dtype_size(op.dtype);
  STRATA_CHECK(bytes <= size_t(INT32_MAX), "group ", name_, " ", op_name(op.op),
               ": messages over 2 GiB are not supported by the mpi backend (", bytes, " bytes)");
  if (!st.started) {
    auto* req = new MPI_Request;
    st.backend = req;
    st.started = true;
    MpiLock lk;
    int rc = op.op == OpType::send
                 ? MPI_Isend(op.send, int(bytes), MPI_BYTE, op.peer, op.tag, comm_, req)
                 : MPI_Irecv(op.recv, int(bytes), MPI_BYTE, op.peer, op.tag, comm_, req);
    mpi_check(rc, op.op == OpType::send ? "MPI_Isend" : "MPI_Irecv", *this, &op);
  }
  auto* req = static_cast<MPI_Request*>(st.backend);
  int done = 0;
  MPI_Status status;
  {
    MpiLock lk;
    int rc = MPI_Test(req, &done, &status);
    if (rc != MPI_SUCCESS) {  // e.g. MPI_ERR_TRUNCATE: the message is larger than expected
      delete req;
      st.backend = nullptr;
      throw Error(cat("group ", name_, " recv #", op.seq, " from rank ", op.peer, " tag ", op.tag,
                      ": the message does not match the expected ", bytes, " bytes"));
    }
  }
  if (!done) return false;
  if (op.op == OpType::recv) {
    int got = 0;
    MPI_Get_count(&status, MPI_BYTE, &got);
    if (size_t(got) != bytes) {
      delete req;
      st.backend = nullptr;
      throw Error(cat("group ", name_, " recv #", op.seq, " from rank ", op.peer, " tag ", op.tag,
                      ": expected ", bytes, " bytes, got ", got));
    }
  }
  st.done_bytes = bytes;
  delete req;
  st.backend = nullptr;
  return true;
}

void MpiTransport::p2p_wait(int64_t max_ns) {
  std::this_thread::sleep_for(std::chrono::nanoseconds(std::min<int64_t>(max_ns, 20'000)));
}

void MpiTransport::raise_abort(int reason_code, const std::string& message) {
  static std::mutex mu;
  std::lock_guard lk(mu);
  if (aborted_.load()) return;
  abort_msg_ = message;
  abort_reason_ = abort_reason_name(reason_code);
  aborted_.store(true);
}

}  // namespace strata::comm::detail

#endif  // STRATA_HAVE_MPI
