#include "parallel/mesh.h"

#include "core/error.h"

namespace strata::parallel {

MeshDims MeshDims::resolved(int world) const {
  STRATA_CHECK(tp >= 1, "--tp must be at least 1 (got ", tp, ")");
  STRATA_CHECK(dp >= 0, "--dp must be at least 1 (got ", dp, ")");
  MeshDims d = *this;
  if (d.dp == 0) {
    STRATA_CHECK(world % tp == 0, "--tp ", tp, " does not divide the world of ", world,
                 " ranks (--nproc): data parallelism needs world / tp ranks");
    d.dp = world / tp;
  }
  STRATA_CHECK(d.world() == world, "--tp ", tp, " x --dp ", d.dp, " = ", d.world(),
               " ranks, but the world has ", world, " (--nproc)");
  return d;
}

std::string MeshDims::describe() const { return cat("tp ", tp, " x dp ", dp); }

Mesh::Mesh(comm::ProcessGroup& world, const MeshDims& dims)
    : world_(world), dims_(dims.resolved(world.size())) {
  const int r = world.rank();
  tp_rank_ = r % dims_.tp;
  dp_rank_ = r / dims_.tp;
  if (dims_.tp == 1) {
    dp_ = &world;
    return;
  }
  tp_ = world.split(dp_rank_, tp_rank_, cat("tp(dp=", dp_rank_, ")"));
  dp_owned_ = world.split(tp_rank_, dp_rank_, cat("dp(tp=", tp_rank_, ")"));
  dp_ = dp_owned_.get();
  STRATA_CHECK(tp_ && dp_ && tp_->size() == dims_.tp && dp_->size() == dims_.dp,
               "internal: mesh groups of the wrong size");
}

comm::ProcessGroup& Mesh::tp() {
  STRATA_CHECK(tp_, "the mesh has no tp group (tp = 1)");
  return *tp_;
}

}  // namespace strata::parallel
