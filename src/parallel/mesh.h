// The device mesh: every process group a parallel layout needs, built once (torchtitan's
// ParallelDims, Megatron-Core's rank order).
//
// Terms. world W ranks; degrees tp (tensor), dp (data), and later cp (context), pp
// (pipeline), ep (expert, carved out of dp·cp); W = tp · cp · dp · pp. Rank order, fastest
// first: tp, cp, dp, pp, so the tp peers of a rank are its neighbours (same host, cheapest
// links):  world rank = ((pp_rank · dp + dp_rank) · cp + cp_rank) · tp + tp_rank.
// Today cp = pp = ep = 1; their coordinates and groups get their place here (cp, dp_cp, pp,
// ep, edp, embed) when those dimensions arrive, and nothing else creates groups.
//
// Groups and their names (the flight recorder, the hang doctor and traces print them):
//   tp   ranks sharing (dp, ...): "tp(dp=D)"  -- tensor-parallel collectives
//   dp   ranks sharing (tp, ...): "dp(tp=T)"  -- gradient reduction, ZeRO
// A dimension of degree 1 gets no group of its own: with tp = 1 the dp group is the world
// itself (named "world", as before the mesh existed) and there is no tp group.
// Building the mesh is a collective over the world (one split per group, in this order).
#pragma once
#include <string>

#include "comm/process_group.h"

namespace strata::parallel {

struct MeshDims {
  int tp = 1;
  int dp = 0;  // 0: world / tp

  // Fills dp and checks that the degrees multiply to `world`; throws one line naming the
  // flags and the numbers ("--tp 3 x --dp 2 = 6 ranks, but the world has 4").
  MeshDims resolved(int world) const;
  int world() const { return tp * dp; }
  std::string describe() const;  // "tp 2 x dp 2"
};

class Mesh {
 public:
  Mesh(comm::ProcessGroup& world, const MeshDims& dims);

  const MeshDims& dims() const { return dims_; }
  int tp_rank() const { return tp_rank_; }
  int dp_rank() const { return dp_rank_; }
  comm::ProcessGroup& world() { return world_; }
  bool has_tp() const { return tp_ != nullptr; }
  comm::ProcessGroup& tp();
  comm::ProcessGroup& dp() { return *dp_; }
  // World rank of the rank at (tp_rank, dp_rank).
  static int world_rank(const MeshDims& d, int tp_rank, int dp_rank) {
    return dp_rank * d.tp + tp_rank;
  }

 private:
  comm::ProcessGroup& world_;
  MeshDims dims_;
  int tp_rank_ = 0, dp_rank_ = 0;
  comm::GroupPtr tp_, dp_owned_;
  comm::ProcessGroup* dp_ = nullptr;
};

}  // namespace strata::parallel
