// The device mesh: every process group a parallel layout needs, built once (torchtitan's
// ParallelDims, Megatron-Core's rank order).
//
// Terms. world W ranks; degrees tp (tensor), cp (context), dp (data), pp (pipeline), and ep
// (expert), which is carved out of dp·cp; W = tp · cp · dp · pp. Rank order, fastest first:
// tp, cp, dp, pp, so the tp peers of a rank are its neighbours (same host, cheapest links):
//   world rank = ((pp_rank · dp + dp_rank) · cp + cp_rank) · tp + tp_rank.
// Within the dp·cp ranks of one (tp, pp) position, index i = dp_rank · cp + cp_rank; the ep
// group holds E consecutive i (ep_rank = i mod E) and the expert-data-parallel group holds
// the ranks with the same ep_rank (edp_rank = i / E).
//
// Groups and their names (the flight recorder, the hang doctor and traces print them). A name
// carries the coordinates that identify the group; dp always, pp and cp when their degree > 1:
//   tp     ranks sharing (pp, dp, cp): "tp(dp=D)", "tp(pp=P,dp=D,cp=C)" -- tensor parallelism
//   cp     ranks sharing (pp, dp, tp): "cp(pp=P,dp=D,tp=T)"              -- context parallelism
//   dp     ranks sharing (pp, cp, tp): "dp(tp=T)"                        -- data parallelism
//   dp_cp  ranks sharing (pp, tp): "dp_cp(pp=P,tp=T)"  -- dense gradients when cp > 1
//   pp     ranks sharing (dp, cp, tp): "pp(dp=D,tp=T)"                   -- stage to stage
//   embed  first and last stage of one pp group: "embed(dp=D,tp=T)"     -- tied wte gradient
//   ep     E consecutive dp·cp ranks: "ep(pp=P,tp=T,i=K)"               -- token all-to-all
//   edp    same ep_rank: "edp(pp=P,tp=T,ep=E)"                           -- expert gradients
// tp, cp, pp, embed, ep and edp exist only when their degree is above 1 (has_*()). dp and dp_cp
// always exist; a group that would be the whole world is the world itself (named "world", as
// before the mesh existed), and dp_cp is dp when cp = 1. Building the mesh is a collective over
// the world: one split per group, in the order above.
#pragma once
#include <cstdint>
#include <string>

#include "comm/process_group.h"

namespace strata::parallel {

// Expert parallelism carves its ep ranks out of the dp · cp ranks.
inline bool ep_divides_dp_cp(int64_t dp, int64_t cp, int64_t ep) { return (dp * cp) % ep == 0; }

struct MeshDims {
  int tp = 1;
  int dp = 0;  // 0: world / (tp · cp · pp)
  int cp = 1;
  int pp = 1;
  int ep = 1;  // carved out of dp · cp; must divide it

  // Fills dp and checks that the degrees multiply to `world` and that ep divides dp · cp;
  // throws one line naming the flags and the numbers ("--tp 3 x --dp 2 = 6 ranks, but the
  // world has 4").
  MeshDims resolved(int world) const;
  int world() const { return tp * cp * dp * pp; }
  std::string describe() const;  // "tp 2 x dp 2", with cp, pp and ep when above 1
};

// A rank's coordinates on the mesh.
struct MeshCoord {
  int tp = 0, cp = 0, dp = 0, pp = 0;
};

class Mesh {
 public:
  Mesh(comm::ProcessGroup& world, const MeshDims& dims);

  const MeshDims& dims() const { return dims_; }
  const MeshCoord& coord() const { return coord_; }
  int tp_rank() const { return coord_.tp; }
  int cp_rank() const { return coord_.cp; }
  int dp_rank() const { return coord_.dp; }
  int pp_rank() const { return coord_.pp; }
  int ep_rank() const { return dp_cp_index() % dims_.ep; }
  int edp_rank() const { return dp_cp_index() / dims_.ep; }
  int dp_cp_index() const { return coord_.dp * dims_.cp + coord_.cp; }
  bool first_stage() const { return coord_.pp == 0; }
  bool last_stage() const { return coord_.pp == dims_.pp - 1; }

  comm::ProcessGroup& world() { return world_; }
  bool has_tp() const { return tp_ != nullptr; }
  bool has_cp() const { return cp_ != nullptr; }
  bool has_pp() const { return pp_ != nullptr; }
  bool has_embed() const { return embed_ != nullptr; }  // this rank is a first or last stage
  bool has_ep() const { return ep_ != nullptr; }
  comm::ProcessGroup& tp();
  comm::ProcessGroup& cp();
  comm::ProcessGroup& dp() { return *dp_; }
  comm::ProcessGroup& dp_cp() { return *dp_cp_; }
  comm::ProcessGroup& pp();
  comm::ProcessGroup& embed();
  comm::ProcessGroup& ep();
  comm::ProcessGroup& edp();

  static int world_rank(const MeshDims& d, const MeshCoord& c) {
    return ((c.pp * d.dp + c.dp) * d.cp + c.cp) * d.tp + c.tp;
  }
  static MeshCoord coord_of(const MeshDims& d, int world_rank);
  // What world rank `r` is on mesh `d`, for failure messages: its coordinates on the
  // dimensions above 1, e.g. "pipeline stage 1, tp 0, dp 1"; empty on a plain dp mesh.
  static std::string describe_rank(const MeshDims& d, int r);

 private:
  // Splits the world into groups of the ranks with the same `color` (< 0: none), ordered by
  // `key`; returns the world itself when the group would be all of it.
  comm::ProcessGroup* split(int color, int key, int size, const std::string& name,
                            comm::GroupPtr& owned);

  comm::ProcessGroup& world_;
  MeshDims dims_;
  MeshCoord coord_;
  comm::GroupPtr tp_owned_, cp_owned_, dp_owned_, dp_cp_owned_, pp_owned_, embed_owned_,
      ep_owned_, edp_owned_;
  comm::ProcessGroup *tp_ = nullptr, *cp_ = nullptr, *dp_ = nullptr, *dp_cp_ = nullptr,
                     *pp_ = nullptr, *embed_ = nullptr, *ep_ = nullptr, *edp_ = nullptr;
};

}  // namespace strata::parallel
