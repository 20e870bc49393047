#include "comm/hier/topology.h"

#include <unistd.h>

#include <cstring>

#include "comm/process_group.h"
#include "core/env.h"
#include "core/error.h"

namespace strata::comm {

static const EnvVar kHost("STRATA_HOST", "",
                          "host name this rank reports for multi-host grouping (default: "
                          "gethostname); ranks with equal names share memory");

static constexpr size_t kNameBytes = 64;  // host names are at most 64 bytes (HOST_NAME_MAX)

std::string host_name() {
  if (kHost.is_set()) {
    std::string h = kHost.get();
    STRATA_CHECK(!h.empty() && h.size() < kNameBytes, "STRATA_HOST must be 1..", kNameBytes - 1,
                 " characters, got '", h, "'");
    return h;
  }
  char buf[kNameBytes + 1] = {};
  STRATA_CHECK(gethostname(buf, kNameBytes) == 0, "gethostname failed: ", std::strerror(errno));
  return buf;
}

bool HostLayout::uniform() const {
  for (int n : ranks_on)
    if (n != ranks_on.front()) return false;
  return true;
}

std::string HostLayout::describe() const {
  std::string s = cat(num_hosts(), " host", num_hosts() == 1 ? "" : "s");
  s += uniform() ? cat(" x ", ranks_on.front(), " rank", ranks_on.front() == 1 ? "" : "s") : " (uneven)";
  s += " (";
  for (int h = 0; h < num_hosts(); ++h) {
    s += cat(h ? "; " : "", hosts[size_t(h)], ":");
    for (size_t r = 0; r < host_of.size(); ++r)
      if (host_of[r] == h) s += cat(" ", r);
  }
  return s + ")";
}

std::string describe_rank_groups(const std::vector<std::vector<int>>& groups, const std::vector<std::string>& hosts,
                                 const std::vector<int>& host_of) {
  std::string out;
  for (const auto& g : groups) {
    std::string ranks, on;
    for (int r : g) {
      ranks += cat(ranks.empty() ? "" : " ", r);
      const std::string& h = hosts[size_t(host_of[size_t(r)])];
      if ((", " + on + ",").find(", " + h + ",") == std::string::npos) on += cat(on.empty() ? "" : ", ", h);
    }
    out += cat(out.empty() ? "" : "; ", "ranks ", ranks, " on ", on);
  }
  return out;
}

HostLayout layout_from_names(const std::vector<std::string>& names) {
  HostLayout l;
  for (const std::string& n : names) {
    int h = 0;
    while (h < l.num_hosts() && l.hosts[size_t(h)] != n) ++h;
    if (h == l.num_hosts()) {
      l.hosts.push_back(n);
      l.ranks_on.push_back(0);
    }
    l.host_of.push_back(h);
    l.local_rank.push_back(l.ranks_on[size_t(h)]++);
  }
  return l;
}

HostLayout discover_hosts(ProcessGroup& world) {
  std::string mine = host_name();
  std::vector<char> send(kNameBytes, 0), all(kNameBytes * size_t(world.size()), 0);
  std::memcpy(send.data(), mine.data(), std::min(mine.size(), kNameBytes - 1));
  world.all_gather(send.data(), all.data(), kNameBytes, DType::u8);
  std::vector<std::string> names;
  for (int r = 0; r < world.size(); ++r) names.emplace_back(all.data() + size_t(r) * kNameBytes);
  return layout_from_names(names);
}

}  // namespace strata::comm
