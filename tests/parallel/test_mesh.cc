// The device mesh (parallel/mesh.h): rank order, group membership and names, and the
// refusals of degrees that do not fit the world.
#include <string>
#include <vector>

#include "comm/process_group.h"
#include "core/error.h"
#include "gtest/gtest.h"
#include "parallel/mesh.h"
#include "support/error_of.h"

namespace strata {
namespace {

TEST(Mesh, GroupsFollowTpFastestOrderAndNameCoordinates) {
  comm::run_threads(6, [](comm::ProcessGroup& pg) {
    parallel::Mesh mesh(pg, {3, 0});
    EXPECT_EQ(mesh.dims().dp, 2);
    EXPECT_EQ(mesh.tp_rank(), pg.rank() % 3);
    EXPECT_EQ(mesh.dp_rank(), pg.rank() / 3);
    EXPECT_EQ(mesh.tp().name(), "tp(dp=" + std::to_string(pg.rank() / 3) + ")");
    EXPECT_EQ(mesh.dp().name(), "dp(tp=" + std::to_string(pg.rank() % 3) + ")");
    for (int t = 0; t < 3; ++t)
      EXPECT_EQ(mesh.tp().world_ranks()[size_t(t)], parallel::Mesh::world_rank(mesh.dims(), {t, 0, mesh.dp_rank(), 0}));
  });
}

// The mesh names the settings as its fields; the command line writes them as flags.
TEST(Mesh, BadDegreesNameTheNumbers) {
  const std::string flags = test::error_of([] { parallel::MeshDims{3, 2}.resolved(4); });
  EXPECT_NE(flags.find("--tp 3 x --dp 2 = 6 ranks, but the world has 4"), std::string::npos) << flags;
  const std::string own = test::what_of([] { parallel::MeshDims{3, 2}.resolved(4); });
  EXPECT_EQ(own, "tp 3 x dp 2 = 6 ranks, but the world has 4 (nproc)");
  EXPECT_THROW((parallel::MeshDims{3, 0}.resolved(4)), Error);
}
// Every group of a four-dimensional mesh: members by coordinates, sizes, and names.
TEST(Mesh, FourDimensionsGroupTheRanksThatShareCoordinates) {
  const parallel::MeshDims want{2, 2, 2, 2, 2};  // tp 2 x dp 2 x cp 2 x pp 2, ep 2
  comm::run_threads(16, [&](comm::ProcessGroup& pg) {
    parallel::Mesh mesh(pg, want);
    const parallel::MeshDims& d = mesh.dims();
    const parallel::MeshCoord c = mesh.coord();
    ASSERT_EQ(parallel::Mesh::world_rank(d, c), pg.rank());
    auto coords = [&](comm::ProcessGroup& g) {
      std::vector<parallel::MeshCoord> v;
      for (int w : g.world_ranks()) v.push_back(parallel::Mesh::coord_of(d, w));
      return v;
    };
    for (const auto& m : coords(mesh.tp()))
      EXPECT_TRUE(m.cp == c.cp && m.dp == c.dp && m.pp == c.pp);
    for (const auto& m : coords(mesh.cp()))
      EXPECT_TRUE(m.tp == c.tp && m.dp == c.dp && m.pp == c.pp);
    for (const auto& m : coords(mesh.dp()))
      EXPECT_TRUE(m.tp == c.tp && m.cp == c.cp && m.pp == c.pp);
    for (const auto& m : coords(mesh.dp_cp())) EXPECT_TRUE(m.tp == c.tp && m.pp == c.pp);
    for (const auto& m : coords(mesh.pp()))
      EXPECT_TRUE(m.tp == c.tp && m.cp == c.cp && m.dp == c.dp);
    EXPECT_EQ(mesh.tp().size(), 2);
    EXPECT_EQ(mesh.dp_cp().size(), 4);
    EXPECT_EQ(mesh.pp().rank(), c.pp);
    EXPECT_EQ(mesh.dp_cp().rank(), mesh.dp_cp_index());
    EXPECT_TRUE(mesh.has_embed());  // two stages: both are ends
    EXPECT_EQ(mesh.embed().size(), 2);
    // ep: consecutive dp·cp indices; edp: the same ep rank across ep groups.
    EXPECT_EQ(mesh.ep().size(), 2);
    EXPECT_EQ(mesh.ep().rank(), mesh.ep_rank());
    EXPECT_EQ(mesh.edp().size(), 2);
    EXPECT_EQ(mesh.edp().rank(), mesh.edp_rank());
    for (const auto& m : coords(mesh.ep()))
      EXPECT_EQ((m.dp * d.cp + m.cp) / d.ep, mesh.dp_cp_index() / d.ep);
    for (const auto& m : coords(mesh.edp())) EXPECT_EQ((m.dp * d.cp + m.cp) % d.ep, mesh.ep_rank());
    const std::string P = std::to_string(c.pp), D = std::to_string(c.dp),
                      C = std::to_string(c.cp), T = std::to_string(c.tp);
    EXPECT_EQ(mesh.tp().name(), "tp(pp=" + P + ",dp=" + D + ",cp=" + C + ")");
    EXPECT_EQ(mesh.pp().name(), "pp(dp=" + D + ",cp=" + C + ",tp=" + T + ")");
    EXPECT_EQ(mesh.dp_cp().name(), "dp_cp(pp=" + P + ",tp=" + T + ")");
  });
}

TEST(Mesh, ThreeStagesLeaveTheMiddleOutOfTheEmbedGroup) {
  comm::run_threads(3, [](comm::ProcessGroup& pg) {
    parallel::Mesh mesh(pg, {1, 0, 1, 3});
    EXPECT_EQ(mesh.dims().dp, 1);
    EXPECT_EQ(mesh.has_embed(), pg.rank() != 1);
    if (mesh.has_embed()) {
      EXPECT_EQ(mesh.embed().world_ranks(), (std::vector<int>{0, 2}));
    }
    EXPECT_FALSE(mesh.has_tp());
    EXPECT_EQ(&mesh.dp_cp(), &mesh.dp());
  });
}

TEST(Mesh, ExpertDegreeMustDivideDataTimesContext) {
  const std::string flags = test::error_of([] { parallel::MeshDims{1, 0, 1, 1, 3}.resolved(4); });
  EXPECT_NE(flags.find("--ep 3 does not divide the 4"), std::string::npos) << flags;
  EXPECT_THROW((parallel::MeshDims{1, 0, 1, 3}.resolved(4)), Error);  // pp 3 into 4 ranks
}

}  // namespace
}  // namespace strata
