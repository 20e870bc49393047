// Where the mesh's groups land on hosts. Ranks fill each host in order (strata launch
// --hosts, mpirun's default --map-by slot) and tp peers are adjacent ranks (parallel/mesh.h),
// so a tp group stays within a host when the host's rank count is a multiple of tp. A
// placement strata did not choose (mpirun --map-by node, uneven hosts) can spread a tp group
// over hosts, where every tensor-parallel layer then waits on the slow link.
#pragma once
#include <string>
#include <vector>

#include "comm/hier/topology.h"
#include "parallel/mesh.h"

namespace strata::parallel {

// The tp groups (world ranks) that span more than one host.
std::vector<std::vector<int>> tp_groups_spanning_hosts(const comm::HostLayout& layout, const MeshDims& dims);

// One line when a tp group spans hosts ("tp groups span hosts: ranks 0 1 on h0, h1; ..."),
// else empty.
std::string tp_placement_warning(const comm::HostLayout& layout, const MeshDims& dims);

}  // namespace strata::parallel
