#include "plan/outer.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "core/shard.h"
#include "cost/comm.h"
#include "cost/memory.h"
#include "parallel/outer_codec.h"

namespace strata::plan {

namespace {

// The data-parallel payload each GPU puts into its step's gradient collectives, and the share
// of the step its inter-node ones leave exposed.
void ddp_traffic(const Estimate& e, double* bytes, double* inter_share) {
  double b = 0, exposed = 0;
  for (const CommItem& c : e.comm) {
    if (c.dim.rfind("dp", 0) != 0) continue;
    b += c.bytes_per_call * c.calls_per_step;
    if (c.inter_node) exposed += c.exposed_s;
  }
  *bytes = b;
  *inter_share = e.time.step_s > 0 ? exposed / e.time.step_s : 0;
}

// The values each GPU's optimizer updates, which it exchanges at a full sync: its dense and
// expert parameters, sharded over the group's data-parallel ranks under ZeRO 1-3.
int64_t exchanged_values(const Estimate& g) {
  const Layout& l = g.layout;
  const int64_t n = int64_t(l.dp) * l.cp, ne = std::max<int64_t>(1, n / l.ep);
  if (l.zero == 0) return g.mem.dense_params + g.mem.expert_params;
  return shard_elems(g.mem.dense_params, n) + (g.mem.expert_params > 0 ? shard_elems(g.mem.expert_params, ne) : 0);
}

}  // namespace

std::optional<OuterEstimate> plan_outer(const TrainSetup& s, const SearchResult& r, const OuterRequest& o,
                                        std::string* problem) {
  if (r.ranked.empty()) {
    *problem = "no layout fits the cluster";
    return std::nullopt;
  }
  const int64_t G = s.gpu.gpus_per_node;
  const int R = o.groups > 0 ? o.groups : int(std::max<int64_t>(1, s.gpus / G));
  if (R < 2) {
    *problem = cat("one node (", s.gpus, " GPUs, ", G, " per node): no link between groups to spare");
    return std::nullopt;
  }
  if (s.global_batch % R != 0) {
    *problem = cat("the global batch ", s.global_batch, " does not split over ", R, " groups");
    return std::nullopt;
  }
  // The fastest ranked layout whose data parallelism splits into the groups.
  const Estimate* base = nullptr;
  for (const Estimate& e : r.ranked)
    if (e.layout.dp % R == 0 && (e.layout.dp / R * e.layout.cp) % e.layout.ep == 0) {
      base = &e;
      break;
    }
  if (!base) {
    *problem = cat("no fitting layout's dp splits into ", R, " groups (the best has dp ", r.ranked[0].layout.dp, ")");
    return std::nullopt;
  }
  TrainSetup gs = s;
  gs.gpus = s.gpus / R;
  gs.global_batch = s.global_batch / R;
  Layout gl = base->layout;
  gl.dp /= R;
  const std::string why = layout_problem(gs, gl);
  if (!why.empty()) {
    *problem = cat("a group's layout (", gl.str(), ") cannot run: ", why);
    return std::nullopt;
  }
  OuterEstimate x;
  x.groups = R;
  x.ddp = r.ranked[0];
  x.group = evaluate(gs, gl);
  x.inter_node = s.gpus > G;
  const Link& link = x.inter_node ? s.gpu.inter : s.gpu.intra;
  // One full sync: fp32 parameters all-reduced, or every group's encoded outer gradient gathered.
  const int64_t values = exchanged_values(x.group);
  if (o.dtype == parallel::OuterDType::fp32) {
    x.sync_bytes = 4.0 * double(values);
    x.sync_s = cost::allreduce_s(x.sync_bytes, R, link);
  } else {
    x.sync_bytes = double(parallel::encoded_bytes(values, o.dtype));
    x.sync_s = cost::all_gather_s(x.sync_bytes * R, R, link);
  }
  // Each fragment's exchange may hide behind the overlap's steps; what is left is exposed once
  // per fragment per round.
  const double step = x.group.time.step_s, F = o.fragments;
  const double exposed_round = F * std::max(0.0, x.sync_s / F - o.overlap * step);
  const double budget = o.link_share * step;
  x.min_inner_steps = std::max({1, o.fragments, o.overlap + 1,
                                budget > 0 ? int(std::ceil(exposed_round / budget - 1e-12)) : 1});
  x.inner_steps = o.inner_steps > 0 ? o.inner_steps : x.min_inner_steps;
  x.exposed_per_step_s = exposed_round / x.inner_steps;
  x.step_s = step + x.exposed_per_step_s;
  x.tokens_per_s = double(s.global_batch) * double(s.model.seq) / x.step_s;
  x.bytes_per_step = x.sync_bytes / x.inner_steps;
  ddp_traffic(x.ddp, &x.ddp_bytes_per_step, &x.ddp_inter_share);
  const Layout& l = x.group.layout;
  const int64_t n = int64_t(l.dp) * l.cp;
  const bool ef = o.error_feedback && o.dtype != parallel::OuterDType::fp32;
  x.state_bytes = cost::outer_state_bytes(x.group.mem.dense_params, n, l.zero, o.overlap > 0, ef) +
                  (x.group.mem.expert_params > 0
                       ? cost::outer_state_bytes(x.group.mem.expert_params, std::max<int64_t>(1, n / l.ep), l.zero,
                                                 o.overlap > 0, ef)
                       : 0);
  x.fits = x.group.mem.total() + double(x.state_bytes) <= x.group.usable_bytes;
  // Worth it when the inter-node data-parallel traffic is a real part of DDP's step and the
  // groups train faster.
  x.recommended = x.fits && x.ddp_inter_share >= 0.2 && x.tokens_per_s > x.ddp.tokens_per_s;
  return x;
}

}  // namespace strata::plan
