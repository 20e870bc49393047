// Which host each rank of a world runs on. A rank's host is its hostname (gethostname; in
// the namespace test cluster, the namespace's UTS name), or STRATA_HOST when set (to group
// ranks differently, e.g. two sockets of one machine as two hosts). Hosts are numbered in
// the order of their lowest world rank.
#pragma once
#include <string>
#include <vector>

namespace strata::comm {

class ProcessGroup;

// This process's host name (STRATA_HOST, else gethostname()).
std::string host_name();

struct HostLayout {
  std::vector<std::string> hosts;  // by host index
  std::vector<int> host_of;        // world rank -> host index
  std::vector<int> local_rank;     // world rank -> rank among the ranks of its host
  std::vector<int> ranks_on;       // host index -> number of ranks
  int num_hosts() const { return int(hosts.size()); }
  // Every host has the same number of ranks (what the hierarchical algorithms need).
  bool uniform() const;
  // "2 hosts x 2 ranks (h0: 0 1; h1: 2 3)".
  std::string describe() const;
};

// "ranks 0 1 on h0, h1; ranks 2 3 on h0, h1": groups of world ranks and the hosts they
// run on (host_of: world rank -> index into hosts).
std::string describe_rank_groups(const std::vector<std::vector<int>>& groups, const std::vector<std::string>& hosts,
                                 const std::vector<int>& host_of);

// Layout from each world rank's host name (the result of exchanging host_name()).
HostLayout layout_from_names(const std::vector<std::string>& name_of_rank);

// Collective over `world`: every rank learns every rank's host.
HostLayout discover_hosts(ProcessGroup& world);

}  // namespace strata::comm
