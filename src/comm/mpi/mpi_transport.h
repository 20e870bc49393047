// The mpi backend: every operation maps onto OpenMPI (MPI-3 non-blocking collectives, polled
// so that every wait has a timeout); sub-groups come from MPI_Comm_split. Ranks are started
// by mpirun or srun (or `strata launch --backend mpi`, which runs mpirun).
//
// Threading: MPI is initialised with MPI_THREAD_MULTIPLE; if the library grants only
// MPI_THREAD_SERIALIZED, every MPI call is serialised by one process-wide mutex (each
// group's communication threads still overlap with computation); a lower level is an error.
// Ordering contract: as ProcessGroup. A timed-out MPI collective cannot be cancelled: the
// group is marked broken and the process should exit (mpirun then stops the others).
// bf16 reductions are converted to fp32, reduced, and rounded once; avg is a sum followed by
// a division; both match the shm backend exactly for exactly representable sums.
#pragma once
#include <memory>

#include "comm/transport.h"

namespace strata::comm::detail {

// The world group's transport (initialises MPI on first use). Throws Error if strata was
// built without MPI or the thread level is insufficient.
std::unique_ptr<Transport> make_mpi_world(const Options& options);

// True when this build includes the mpi backend.
bool mpi_available();

}  // namespace strata::comm::detail
