#include "parallel/placement.h"

#include "core/error.h"

namespace strata::parallel {

std::vector<std::vector<int>> tp_groups_spanning_hosts(const comm::HostLayout& layout, const MeshDims& dims) {
  std::vector<std::vector<int>> out;
  const int n = int(layout.host_of.size());
  if (dims.tp <= 1 || n % dims.tp != 0) return out;
  // tp is the fastest mesh dimension: tp group k is ranks k·tp .. k·tp + tp - 1, whatever
  // the other degrees.
  for (int k = 0; k < n / dims.tp; ++k) {
    std::vector<int> g;
    bool spans = false;
    for (int t = 0; t < dims.tp; ++t) {
      const int r = k * dims.tp + t;
      g.push_back(r);
      spans |= layout.host_of[size_t(r)] != layout.host_of[size_t(g.front())];
    }
    if (spans) out.push_back(g);
  }
  return out;
}

std::string tp_placement_warning(const comm::HostLayout& layout, const MeshDims& dims) {
  const std::vector<std::vector<int>> spanning = tp_groups_spanning_hosts(layout, dims);
  if (spanning.empty()) return "";
  const std::string groups = comm::describe_rank_groups(spanning, layout.hosts, layout.host_of);
  return cat(spanning.size(), " of ", layout.host_of.size() / size_t(dims.tp), " tp group(s) span hosts (", groups,
             "; ", layout.describe(), "): every tensor-parallel layer waits on the link between hosts. Start the "
             "ranks host by host with a multiple of --tp ", dims.tp,
             " on each (strata train --hosts, mpirun --map-by slot); `strata doctor net --tp ", dims.tp,
             "` measures the cost");
}

}  // namespace strata::parallel
