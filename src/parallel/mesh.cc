#include "parallel/mesh.h"

#include "core/error.h"

namespace strata::parallel {

namespace {

// "tp 3 x dp 2" (marked settings), with cp and pp when above 1.
std::string settings(const MeshDims& d) {
  std::string s = cat(setting("tp"), " ", d.tp);
  if (d.cp > 1) s += cat(" x ", setting("cp"), " ", d.cp);
  s += cat(" x ", setting("dp"), " ", d.dp);
  if (d.pp > 1) s += cat(" x ", setting("pp"), " ", d.pp);
  return s;
}

// ",pp=P" when the pipeline has more than one stage (and the like for cp); "" otherwise.
std::string label(const char* key, int value, int degree) {
  return degree > 1 ? cat(key, "=", value) : std::string();
}

std::string join(std::initializer_list<std::string> parts) {
  std::string s;
  for (const std::string& p : parts) {
    if (p.empty()) continue;
    if (!s.empty()) s += ",";
    s += p;
  }
  return s;
}

}  // namespace

MeshDims MeshDims::resolved(int world) const {
  STRATA_CHECK_SETTING(tp >= 1, setting("tp"), " must be at least 1 (got ", tp, ")");
  STRATA_CHECK_SETTING(cp >= 1, setting("cp"), " must be at least 1 (got ", cp, ")");
  STRATA_CHECK_SETTING(pp >= 1, setting("pp"), " must be at least 1 (got ", pp, ")");
  STRATA_CHECK_SETTING(ep >= 1, setting("ep"), " must be at least 1 (got ", ep, ")");
  STRATA_CHECK_SETTING(dp >= 0, setting("dp"), " must be at least 1 (got ", dp, ")");
  MeshDims d = *this;
  if (d.dp == 0) {
    const int64_t other = int64_t(tp) * cp * pp;
    std::string given = cat(setting("tp"), " ", tp);
    if (cp > 1) given += cat(" x ", setting("cp"), " ", cp);
    if (pp > 1) given += cat(" x ", setting("pp"), " ", pp);
    STRATA_CHECK_SETTING(world % other == 0, given, " does not divide the world of ", world,
                         " ranks (", setting("nproc"), "): data parallelism needs world / ", other,
                         " ranks");
    d.dp = int(world / other);
  }
  STRATA_CHECK_SETTING(int64_t(d.tp) * d.cp * d.dp * d.pp == world, settings(d), " = ",
                       int64_t(d.tp) * d.cp * d.dp * d.pp, " ranks, but the world has ", world,
                       " (", setting("nproc"), ")");
  STRATA_CHECK_SETTING(ep_divides_dp_cp(d.dp, d.cp, d.ep), setting("ep"), " ", d.ep,
                       " does not divide the ", d.dp * d.cp,
                       " data-parallel x context-parallel ranks (", setting("dp"), " ", d.dp, " x ",
                       setting("cp"), " ", d.cp, "): expert parallelism is carved out of them");
  return d;
}

std::string MeshDims::describe() const {
  std::string s = cat("tp ", tp);
  if (cp > 1) s += cat(" x cp ", cp);
  s += cat(" x dp ", dp);
  if (pp > 1) s += cat(" x pp ", pp);
  if (ep > 1) s += cat(" (ep ", ep, ")");
  return s;
}

std::string Mesh::describe_rank(const MeshDims& d, int r) {
  if (d.tp == 1 && d.cp == 1 && d.pp == 1 && d.ep == 1) return "";
  const MeshCoord c = coord_of(d, r);
  std::string s;
  auto add = [&](const std::string& part) { s += (s.empty() ? "" : ", ") + part; };
  if (d.pp > 1) add(cat("pipeline stage ", c.pp));
  if (d.tp > 1) add(cat("tp ", c.tp));
  if (d.cp > 1) add(cat("cp ", c.cp));
  add(cat("dp ", c.dp));
  if (d.ep > 1) add(cat("ep ", (c.dp * d.cp + c.cp) % d.ep));
  return s;
}

MeshCoord Mesh::coord_of(const MeshDims& d, int r) {
  MeshCoord c;
  c.tp = r % d.tp;
  r /= d.tp;
  c.cp = r % d.cp;
  r /= d.cp;
  c.dp = r % d.dp;
  c.pp = r / d.dp;
  return c;
}

comm::ProcessGroup* Mesh::split(int color, int key, int size, const std::string& name,
                                comm::GroupPtr& owned) {
  owned = world_.split(color, key, name);
  if (color < 0) return nullptr;
  STRATA_CHECK(owned && owned->size() == size, "internal: mesh group ", name, " has ",
               owned ? owned->size() : 0, " ranks, expected ", size);
  return owned.get();
}

Mesh::Mesh(comm::ProcessGroup& world, const MeshDims& dims)
    : world_(world), dims_(dims.resolved(world.size())) {
  const MeshDims& d = dims_;
  const int r = world.rank();
  coord_ = coord_of(d, r);
  const MeshCoord& c = coord_;
  const std::string P = label("pp", c.pp, d.pp), C = label("cp", c.cp, d.cp);
  const std::string D = cat("dp=", c.dp), T = cat("tp=", c.tp);
  const int dc = dp_cp_index(), stage_ranks = d.tp * d.cp * d.dp;
  // Colors: the index of the coordinates a group's members share.
  if (d.tp > 1) tp_ = split(r / d.tp, c.tp, d.tp, cat("tp(", join({P, D, C}), ")"), tp_owned_);
  if (d.cp > 1)
    cp_ = split((c.pp * d.dp + c.dp) * d.tp + c.tp, c.cp, d.cp,
                cat("cp(", join({P, D, T}), ")"), cp_owned_);
  if (d.dp == world.size())
    dp_ = &world;
  else
    dp_ = split((c.pp * d.cp + c.cp) * d.tp + c.tp, c.dp, d.dp, cat("dp(", join({P, C, T}), ")"),
                dp_owned_);
  if (d.cp == 1)
    dp_cp_ = dp_;
  else
    dp_cp_ = split(c.pp * d.tp + c.tp, dc, d.dp * d.cp, cat("dp_cp(", join({P, T}), ")"),
                   dp_cp_owned_);
  if (d.pp > 1) {
    const int within = r % stage_ranks;
    pp_ = split(within, c.pp, d.pp, cat("pp(", join({D, C, T}), ")"), pp_owned_);
    const bool end = c.pp == 0 || c.pp == d.pp - 1;
    embed_ = split(end ? within : -1, c.pp, 2, cat("embed(", join({D, C, T}), ")"),
                   embed_owned_);
  }
  if (d.ep > 1) {
    const int groups = d.dp * d.cp / d.ep, at = c.pp * d.tp + c.tp;
    ep_ = split(at * groups + dc / d.ep, dc % d.ep, d.ep,
                cat("ep(", join({P, T, cat("i=", dc / d.ep)}), ")"), ep_owned_);
    edp_ = split(at * d.ep + dc % d.ep, dc / d.ep, groups,
                 cat("edp(", join({P, T, cat("ep=", dc % d.ep)}), ")"), edp_owned_);
  }
}

namespace {
comm::ProcessGroup& need(comm::ProcessGroup* g, const char* what, const char* why) {
  STRATA_CHECK(g, "the mesh has no ", what, " group (", why, ")");
  return *g;
}
}  // namespace

comm::ProcessGroup& Mesh::tp() { return need(tp_, "tp", "tp = 1"); }
comm::ProcessGroup& Mesh::cp() { return need(cp_, "cp", "cp = 1"); }
comm::ProcessGroup& Mesh::pp() { return need(pp_, "pp", "pp = 1"); }
comm::ProcessGroup& Mesh::embed() {
  return need(embed_, "embed", "pp = 1, or this rank is neither the first nor the last stage");
}
comm::ProcessGroup& Mesh::ep() { return need(ep_, "ep", "ep = 1"); }
comm::ProcessGroup& Mesh::edp() { return need(edp_, "edp", "ep = 1: expert gradients use dp_cp"); }

}  // namespace strata::parallel
