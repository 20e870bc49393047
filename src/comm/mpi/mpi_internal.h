// Internals of the mpi backend (only compiled with STRATA_HAVE_MPI).
#pragma once
// C bindings only (OpenMPI's C++ bindings need libmpi_cxx).
#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1
#endif
#ifndef MPICH_SKIP_MPICXX
#define MPICH_SKIP_MPICXX 1
#endif
#include <mpi.h>

#include <atomic>
#include <mutex>
#include <string>

#include "comm/transport.h"

namespace strata::comm::detail {

struct MpiState {
  std::mutex init_mu;
  bool initialised = false;
  bool serialize = false;  // the library is not MPI_THREAD_MULTIPLE: one MPI call at a time
  int thread_level = 0;
  std::mutex mu;
};
MpiState& mpi_state();

// Holds the process-wide MPI mutex when calls must be serialised.
struct MpiLock {
  MpiLock();
  ~MpiLock();
  MpiLock(const MpiLock&) = delete;
  MpiLock& operator=(const MpiLock&) = delete;
};

class MpiTransport;
void mpi_check(int rc, const char* what, const MpiTransport& t, const OpDesc* op);

class MpiTransport final : public Transport {
 public:
  MpiTransport(MPI_Comm comm, std::string name);
  ~MpiTransport() override;
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  Backend backend() const override { return Backend::mpi; }
  const std::string& name() const { return name_; }
  void run_collective(OpDesc& op) override;
  std::unique_ptr<Transport> split(OpDesc& op, const std::vector<int>& world_ranks,
                                   std::vector<int>& world_ranks_out) override;
  bool p2p_progress(OpDesc& op, P2PState& st) override;
  void p2p_arm() override {}
  void p2p_wait(int64_t max_ns) override;
  void p2p_wake() override {}
  void p2p_check_peer(const OpDesc&) override {}
  void raise_abort(int reason_code, const std::string& message) override;
  std::string health(std::string&) override { return ""; }
  void detach() override {}

  void wait_request(MPI_Request& req, const OpDesc& op);
  MPI_Comm comm() const { return comm_; }

 private:
  MPI_Comm comm_;
  std::string name_;
  int rank_ = 0, size_ = 1;
  std::atomic<bool> aborted_{false};
  std::atomic<bool> broken_{false};
  std::string abort_msg_;
  std::string abort_reason_ = "error";
};

}  // namespace strata::comm::detail
