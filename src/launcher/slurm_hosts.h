// Hosts of a Slurm allocation as a host list (launcher/hostlist.h), for `--slurm`:
//   SLURM_JOB_NODELIST     "node[01-03,07],gpu-a[1-2],login"  (ranges keep their zero
//                          padding; several bracket groups in one name multiply out)
//   SLURM_TASKS_PER_NODE   "2(x3),1"  (2 on each of the first three nodes, 1 on the next)
//   SLURM_NTASKS_PER_NODE  "2"        (used when SLURM_TASKS_PER_NODE is absent)
// With neither count, every node gets one slot.
#pragma once
#include <string>
#include <string_view>
#include <vector>

#include "launcher/hostlist.h"

namespace strata::launcher {

// Throws Error naming SLURM_JOB_NODELIST and the bad part.
std::vector<std::string> expand_nodelist(std::string_view list);
// One count per node; throws Error naming SLURM_TASKS_PER_NODE when the counts do not cover
// exactly `nodes` nodes.
std::vector<int> expand_tasks_per_node(std::string_view spec, size_t nodes);
// From the three variables' values (empty: unset).
std::vector<HostSlots> hosts_from_slurm(const std::string& nodelist, const std::string& tasks_per_node,
                                        const std::string& ntasks_per_node);
// From this process's environment; throws when SLURM_JOB_NODELIST is unset (not in an
// allocation).
std::vector<HostSlots> hosts_from_slurm_env();

}  // namespace strata::launcher
