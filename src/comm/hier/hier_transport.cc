// Building the multi-host world and choosing its all-reduce algorithm.
#include "comm/hier/hier_transport.h"

#include <cctype>

#include "comm/bootstrap.h"
#include "comm/mpi/mpi_transport.h"
#include "comm/runtime.h"
#include "comm/shm/shm_transport.h"
#include "core/env.h"
#include "core/error.h"
#include "core/timer.h"

namespace strata::comm {

static const EnvVar kHier("STRATA_HIER", "automatic",
                          "all-reduce, reduce-scatter and all-gather across hosts: automatic "
                          "(hierarchical from STRATA_HIER_MIN_BYTES), flat (one MPI collective) or "
                          "hierarchical");
static const EnvVar kHierMin("STRATA_HIER_MIN_BYTES", "65536",
                             "smallest all-reduce, reduce-scatter or all-gather (bytes, all blocks) "
                             "that runs hierarchically across hosts with STRATA_HIER=automatic");

std::string multihost_summary(ProcessGroup& world) {
  auto* t = dynamic_cast<detail::HierTransport*>(&world.runtime().transport());
  return t ? t->summary() : "one level (no host hierarchy)";
}

namespace detail {

HierTransport::HierTransport(std::unique_ptr<Transport> mpi_world, HierGroups groups,
                             HostLayout layout, const Options& opt)
    : mpi_(std::move(mpi_world)), groups_(std::move(groups)), layout_(std::move(layout)) {
  algo_ = kHier.is_set() ? parse_hier_algo(kHier.get()) : opt.hier_algo;
  int64_t min_bytes = kHierMin.is_set() ? kHierMin.get_int()
                      : opt.hier_min_bytes ? int64_t(opt.hier_min_bytes)
                                           : int64_t(kHierMinBytes);
  STRATA_CHECK(min_bytes >= 0, "STRATA_HIER_MIN_BYTES must not be negative, got ", min_bytes);
  min_bytes_ = size_t(min_bytes);
}

bool HierTransport::use_hierarchical(const OpDesc& op) const {
  size_t elems = op.count;  // all-reduce: the vector; the others: all blocks together
  if (op.op == OpType::reduce_scatter || op.op == OpType::allgather || op.op == OpType::allgatherv) {
    elems = 0;
    for (size_t c : op.counts) elems += c;
  } else if (op.op != OpType::allreduce) {
    return false;
  }
  if (elems == 0) return false;
  switch (algo_) {
    case HierAlgo::flat: return false;
    case HierAlgo::hierarchical: return true;
    case HierAlgo::automatic: return elems * dtype_size(op.dtype) >= min_bytes_;
  }
  return false;
}

void HierTransport::run_collective(OpDesc& op) {
  const int kind = op.op == OpType::allreduce ? 0 : op.op == OpType::reduce_scatter ? 1
                   : op.op == OpType::allgather || op.op == OpType::allgatherv ? 2 : -1;
  if (use_hierarchical(op)) {
    if (kind == 0) allreduce_hierarchical(groups_, op);
    else if (kind == 1) reduce_scatter_hierarchical(groups_, op);
    else allgather_hierarchical(groups_, op);
    ++n_hier_[kind];
    return;
  }
  if (kind >= 0) ++n_flat_[kind];
  mpi_->run_collective(op);
}

void HierTransport::raise_abort(int reason_code, const std::string& message) {
  mpi_->raise_abort(reason_code, message);
  // A hierarchical op blocked in a sub-group gives up at once too.
  for (GroupPtr* g : {&groups_.host, &groups_.across})
    if (*g && !(*g)->runtime().broken())
      (*g)->runtime().fail_from_watchdog(abort_reason_name(reason_code), message);
}

std::string HierTransport::summary() const {
  return cat(layout_.describe(), "; hierarchical/flat: all-reduce ", n_hier_[0].load(), "/",
             n_flat_[0].load(), ", reduce-scatter ", n_hier_[1].load(), "/", n_flat_[1].load(),
             ", all-gather ", n_hier_[2].load(), "/", n_flat_[2].load(), " (", hier_algo_name(algo_),
             ", hierarchical from ", min_bytes_, " bytes)");
}

static GroupPtr make_group(std::unique_ptr<Transport> t, std::string name, std::vector<int> ranks,
                           const Options& opt) {
  auto rt = std::make_unique<GroupRuntime>(std::move(t), std::move(name), std::move(ranks), opt);
  return std::make_shared<ProcessGroup>(std::move(rt));
}

static bool shm_safe(const std::string& s) {
  if (s.empty() || s.size() > 100) return false;
  for (char c : s)
    if (!std::isalnum((unsigned char)c) && c != '.' && c != '_' && c != '-') return false;
  return true;
}

// A job id all ranks agree on: rank 0's (the environment's, else a fresh one).
static std::string agreed_job_id(ProcessGroup& world, const Options& opt) {
  char buf[128] = {};
  if (world.rank() == 0) {
    std::string job = !opt.job_id.empty() ? opt.job_id : detect_rank_env().job_id;
    if (!shm_safe(job)) job = new_job_id();
    std::snprintf(buf, sizeof buf, "%s", job.c_str());
  }
  world.broadcast(buf, sizeof buf, DType::u8, 0);
  return buf;
}

std::unique_ptr<Transport> make_mpi_world_for_hosts(const Options& opt) {
  std::vector<int> all;
  std::unique_ptr<Transport> boot_t = make_mpi_world(opt);
  const int size = boot_t->size(), rank = boot_t->rank();
  for (int r = 0; r < size; ++r) all.push_back(r);
  GroupPtr boot = make_group(std::move(boot_t), "world.boot", all, opt);
  HostLayout layout = discover_hosts(*boot);
  const int R = layout.ranks_on.front();
  if (layout.num_hosts() < 2 || !layout.uniform() || R < 2) return make_mpi_world(opt);

  const int host = layout.host_of[size_t(rank)], local = layout.local_rank[size_t(rank)];
  std::string job = agreed_job_id(*boot, opt);
  double timeout = opt.timeout_s > 0 ? opt.timeout_s : default_timeout_s();
  int64_t deadline = now_ns() + int64_t(timeout * 1e9);
  auto shm = shm::ShmTransport::open(job, "host", cat("h", host), local, R, opt, deadline);
  shm->wait_attached(deadline);
  std::vector<int> host_ranks;
  for (int r = 0; r < size; ++r)
    if (layout.host_of[size_t(r)] == host) host_ranks.push_back(r);
  HierGroups g;
  g.host = make_group(std::move(shm), "host", host_ranks, opt);
  g.across = boot->split(local, host, "across");
  g.world_size = size;
  g.rank_at.assign(size_t(layout.num_hosts()), std::vector<int>(size_t(R), -1));
  for (int r = 0; r < size; ++r)
    g.rank_at[size_t(layout.host_of[size_t(r)])][size_t(layout.local_rank[size_t(r)])] = r;
  return std::make_unique<HierTransport>(make_mpi_world(opt), std::move(g), std::move(layout), opt);
}

}  // namespace detail
}  // namespace strata::comm
