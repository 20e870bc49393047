#include "launcher/mpirun_failure.h"

#include <algorithm>
#include <regex>

#include "core/error.h"

namespace strata::launcher {

// mpirun's report of the first failing rank, when it printed one.
std::string parse_mpirun_failure(const std::vector<std::string>& lines, bool across_hosts, int& rank,
                                 std::string& host) {
  static const std::regex name(R"(Process name:\s*\[\[\d+,\d+\],(\d+)\])");
  static const std::regex code(R"(Exit code:\s*(-?\d+))");
  static const std::regex sig(R"(process rank (\d+) with PID \d+ on node (\S+) exited on signal (\d+)(?: \(([^)]*)\))?)");
  // A host that died whole (or whose link did): its daemon is lost, or the ranks elsewhere
  // lost their TCP peers there; no rank is named.
  static const std::regex lost(R"(Remote daemon:\s*\S+ on node (\S+)|Peer host:\s*(\S+))");
  std::smatch m;
  int r = -1;
  std::string lost_host;
  for (const std::string& l : lines) {
    if (lost_host.empty() && std::regex_search(l, m, lost)) lost_host = m[1].matched ? m[1].str() : m[2].str();
    if (std::regex_search(l, m, sig)) {
      rank = std::stoi(m[1].str());
      host = m[2].str();
      return cat("rank ", rank, " was killed by signal ", m[3].str(),
                 m[4].matched ? cat(" (", m[4].str(), ")") : std::string());
    }
    if (std::regex_search(l, m, name)) r = std::stoi(m[1].str());
    if (r >= 0 && std::regex_search(l, m, code)) {
      rank = r;
      return cat("rank ", r, " exited with code ", m[1].str());
    }
  }
  if (lost_host.empty() || !across_hosts) return "";
  host = lost_host;
  return cat("host ", host, " was lost (its daemon or its ranks' connections died with the host or its link)");
}

// The host of `rank` when ranks fill the hosts in order; "" when there are none.
std::string host_of_rank(const std::vector<HostSlots>& hosts, int rank) {
  for (const HostSlots& h : hosts) {
    if (rank < h.slots) return h.host;
    rank -= h.slots;
  }
  return "";
}

std::string leading_failure(const std::string& recorded, int& rank, const std::string& mpirun_says,
                            int reported, const std::string& failed_host,
                            const std::vector<HostSlots>& hosts) {
  if (recorded.empty()) {
    rank = reported;
    return mpirun_says;
  }
  if (hosts.empty() || failed_host.empty() || rank < 0 || host_of_rank(hosts, rank) == failed_host)
    return recorded;
  rank = reported;
  return cat(mpirun_says, "; then ", recorded);
}

// The ranks that reported a timeout before mpirun had to be killed (a link cut mid-run: the
// ranks on the far side cannot say anything), each with its host, the peer it waited on when
// its line names one, and that line: "; rank 0 (host a) timed out waiting on rank 1 (host b):
// group world recv #881 with rank 1 tag 0: timed out after 4 s ...".
std::string timed_out_ranks(const std::vector<std::pair<int, std::string>>& timeouts,
                            const std::vector<HostSlots>& hosts) {
  auto who = [&](int rank) {
    const std::string host = host_of_rank(hosts, rank);
    return cat("rank ", rank, host.empty() ? "" : cat(" (host ", host, ")"));
  };
  static const std::regex world(R"(\(peer: world rank (\d+)\))"), local(R"(with rank (\d+))");
  std::string out;
  std::vector<int> named;
  for (const auto& [rank, line] : timeouts) {
    if (std::count(named.begin(), named.end(), rank) || named.size() == 4) continue;
    named.push_back(rank);
    std::string what = line.substr(0, 240);
    const std::vector<std::string> leads = {"strata: error: ", "strata: ", cat("rank ", rank, ": "), "timeout: "};
    for (const std::string& lead : leads)
      if (what.rfind(lead, 0) == 0) what.erase(0, lead.size());
    std::smatch m;
    const bool found = std::regex_search(line, m, world) || std::regex_search(line, m, local);
    const std::string waiting = found ? cat(" waiting on ", who(std::stoi(m[1].str()))) : std::string();
    out += cat("; ", who(rank), " timed out", waiting, ": ", what);
  }
  return out;
}

std::string unanswering_rank(const std::vector<std::pair<int, std::string>>& timeouts, int& rank) {
  static const std::regex world(R"(\(peer: world rank (\d+)\))"), local(R"((waiting for|with) rank (\d+))");
  static const std::regex op(R"(: timeout: (group \S+ \S+ #\d+))");
  struct Wait {
    int peer;
    std::string op;
  };
  std::vector<std::pair<int, Wait>> waits;  // in the order the lines came
  for (const auto& [r, line] : timeouts) {
    // A relayed report ("rank 0 reported: ...", "group X failed: ...") names the first
    // rank's peer, not a wait of this rank's own.
    if (line.find(": timeout: ") == std::string::npos || line.find(" reported: ") != std::string::npos ||
        line.find(" failed: ") != std::string::npos)
      continue;
    std::smatch m;
    int peer = std::regex_search(line, m, world) ? std::stoi(m[1].str())
               : std::regex_search(line, m, local) ? std::stoi(m[2].str()) : -1;
    if (peer < 0 || peer == r) continue;
    waits.push_back({r, {peer, std::regex_search(line, m, op) ? m[1].str() : std::string()}});
  }
  if (waits.empty()) return "";
  auto wait_of = [&](int r) -> const Wait* {
    for (const auto& [w, x] : waits)
      if (w == r) return &x;
    return nullptr;
  };
  // Each own wait followed to its end: the rank it leads to waits on no one. Under a cascade
  // of timeouts (a 3D layout on a loaded host) a rank that only relayed a report can end one
  // chain; the hung rank ends the most, so it is named (ties: the first line's chain).
  struct End {
    int waiter;  // the last rank of the chain, which waited on `hung` directly
    int hung;
  };
  auto follow = [&](int start) {
    int waiter = start;
    std::vector<int> seen{waiter};
    for (const Wait* w = wait_of(waiter); w;) {
      const Wait* next = wait_of(w->peer);
      if (!next || std::count(seen.begin(), seen.end(), w->peer)) break;
      waiter = w->peer;
      seen.push_back(waiter);
      w = next;
    }
    return End{waiter, wait_of(waiter)->peer};
  };
  std::vector<End> ends;
  for (const auto& [r, w] : waits) ends.push_back(follow(r));
  // A chain can also end at a rank that was itself waiting in an operation when a relayed
  // abort reached it (its line names the operation: "timeout: group pp(...).grad recv #2:
  // aborted because ..."): that rank is not hung, only its own wait timed out later than the
  // report. A hung rank is in no operation (its watchdog relays "timeout: group world: rank 4
  // reported: ..."). Such chains count only when no other chain remains.
  std::vector<int> busy;
  for (const auto& [r, line] : timeouts) {
    std::smatch m;
    if (std::regex_search(line, m, op)) busy.push_back(r);
  }
  auto idle_end = [&](const End& e) { return std::count(busy.begin(), busy.end(), e.hung) == 0; };
  const bool any_idle = std::any_of(ends.begin(), ends.end(), idle_end);
  size_t best = 0;
  int best_count = 0;
  for (size_t i = 0; i < ends.size(); ++i) {
    if (any_idle && !idle_end(ends[i])) continue;
    const int n = int(std::count_if(ends.begin(), ends.end(), [&](const End& e) { return e.hung == ends[i].hung; }));
    if (n > best_count) best = i, best_count = n;
  }
  const int waiter = ends[best].waiter;
  const Wait& w = *wait_of(waiter);
  rank = w.peer;
  return cat("rank ", w.peer, " stopped answering (rank ", waiter, " timed out waiting on it",
             w.op.empty() ? "" : " in " + w.op, ")");
}

// The one host none of whose ranks said that mpirun's stop (SIGTERM) reached them, while
// ranks elsewhere did: its ranks died without a word, with the host. "" when that is not
// the picture (no rank answered, or several hosts stayed silent).
bool answers_after_failure(int rank, const std::string& line) {
  return line.find("received signal 15") != std::string::npos ||
         line.find(cat("strata: rank ", rank, ": peer-dead: ")) != std::string::npos;
}

std::string silent_host(const std::vector<int>& answered, const std::vector<HostSlots>& hosts) {
  if (answered.empty()) return "";
  std::string silent;
  for (const HostSlots& h : hosts) {
    bool spoke = false;
    for (int r : answered) spoke |= host_of_rank(hosts, r) == h.host;
    if (spoke) continue;
    if (!silent.empty()) return "";
    silent = h.host;
  }
  return silent;
}

}  // namespace strata::launcher
