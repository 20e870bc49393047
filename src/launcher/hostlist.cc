#include "launcher/hostlist.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cctype>
#include <fstream>
#include <sstream>

#include "comm/hier/topology.h"
#include "core/error.h"
#include "core/files.h"

namespace strata::launcher {

using namespace strata::comm;  // the communication layer this launcher starts ranks of

static bool valid_host(const std::string& h) {
  if (h.empty() || h.size() > 253) return false;
  for (char c : h)
    if (!std::isalnum((unsigned char)c) && c != '.' && c != '-' && c != '_') return false;
  return true;
}

static int parse_slots(const std::string& s, const std::string& where) {
  char* end = nullptr;
  long v = s.empty() ? -1 : std::strtol(s.c_str(), &end, 10);
  STRATA_CHECK(!s.empty() && *end == 0 && v >= 1 && v <= 4096, where, ": slots must be 1..4096, got ",
               quote_input(s));
  return int(v);
}

std::vector<HostSlots> parse_hosts(std::string_view spec) {
  std::vector<HostSlots> out;
  std::string s(spec);
  size_t start = 0;
  while (start <= s.size()) {
    size_t end = s.find(',', start);
    if (end == std::string::npos) end = s.size();
    std::string item = s.substr(start, end - start);
    size_t colon = item.find(':');
    HostSlots h{item.substr(0, colon), 1};
    STRATA_CHECK(valid_host(h.host), "--hosts '", s, "': bad host name '", h.host,
                 "' (expected host:slots entries separated by commas, e.g. a:2,b:2)");
    if (colon != std::string::npos) h.slots = parse_slots(item.substr(colon + 1), cat("--hosts entry '", item, "'"));
    out.push_back(h);
    start = end + 1;
  }
  return out;
}

std::vector<HostSlots> parse_hostfile(const std::string& path) {
  require_regular_file(path, "hostfile");  // a directory would read as "names no host"
  std::ifstream in(path);
  STRATA_CHECK(in.good(), "hostfile ", path, ": cannot be read");
  std::vector<HostSlots> out;
  int lineno = 0;
  for (std::string line; std::getline(in, line);) {
    ++lineno;
    line = line.substr(0, line.find('#'));
    std::istringstream words(line);
    std::string host, word;
    if (!(words >> host)) continue;
    std::string where = cat("hostfile ", path, " line ", lineno);
    STRATA_CHECK(valid_host(host), where, ": bad host name ", quote_input(host));
    HostSlots h{host, 1};
    while (words >> word) {
      if (word.rfind("slots=", 0) == 0) h.slots = parse_slots(word.substr(6), where);
      else if (word.rfind("max_slots=", 0) != 0) fail(where, ": unknown field ", quote_input(word), " (expected slots=N)");
    }
    out.push_back(h);
  }
  STRATA_CHECK(!out.empty(), "hostfile ", path, ": names no host");
  return out;
}

std::string format_hosts(const std::vector<HostSlots>& hosts) {
  std::string s;
  for (const HostSlots& h : hosts) s += cat(s.empty() ? "" : ",", h.host, ":", h.slots);
  return s;
}

int total_slots(const std::vector<HostSlots>& hosts) {
  int n = 0;
  for (const HostSlots& h : hosts) n += h.slots;
  return n;
}

void check_hosts(const std::vector<HostSlots>& hosts, int nproc, const std::string& what) {
  STRATA_CHECK(!hosts.empty(), what, " names no host");
  for (size_t i = 0; i < hosts.size(); ++i)
    for (size_t j = 0; j < i; ++j)
      STRATA_CHECK(hosts[i].host != hosts[j].host, what, ": host '", hosts[i].host,
                   "' appears twice (give it once with all its slots)");
  STRATA_CHECK(nproc <= total_slots(hosts), what, ": ", nproc, " ranks but only ", total_slots(hosts),
               " slots (", format_hosts(hosts), ")");
}

std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

bool is_this_host(const std::string& host) {
  return host == host_name() || host == "localhost" || host == "127.0.0.1";
}

static std::string agent_of(const std::string& rsh_agent) {
  if (rsh_agent.empty() && std::getenv("OMPI_MCA_plm_rsh_agent")) return std::getenv("OMPI_MCA_plm_rsh_agent");
  return rsh_agent;
}

std::vector<std::string> remote_shell_argv(const std::string& host, const std::string& rsh_agent,
                                           const std::string& script) {
  const std::string agent = agent_of(rsh_agent);
  if (agent.empty()) return {"ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=5", host, script};
  return {agent, host, script};
}

std::string run_on_host(const std::string& host, const std::string& rsh_agent, double timeout_s,
                        const std::string& script, std::string& problem) {
  const std::string agent = agent_of(rsh_agent);
  std::string agent_cmd = agent.empty() ? "ssh -o BatchMode=yes -o ConnectTimeout=5" : shell_quote(agent);
  std::string cmd = cat("timeout ", timeout_s, " ", agent_cmd, " ", shell_quote(host), " ",
                        shell_quote(script), " 2>&1 </dev/null");
  FILE* p = popen(cmd.c_str(), "r");
  STRATA_CHECK(p, "cannot run the remote shell to reach host '", host, "'");
  std::string said;
  char buf[512];
  while (std::fgets(buf, sizeof buf, p)) said += buf;
  int st = pclose(p);
  if (WIFEXITED(st) && WEXITSTATUS(st) == 0) return said;
  std::string first = said.substr(0, said.find('\n'));
  while (!first.empty() && first.back() == '\r') first.pop_back();
  int code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  problem = cat("host '", host, "' is unreachable: `", agent.empty() ? "ssh" : agent, " ", host, "` ",
                code == 124 ? cat("timed out after ", timeout_s, " s") : cat("exited with code ", code),
                first.empty() ? "" : ": ", first);
  return said;
}

// Runs the interface probe on one host through the agent; empty `problem` when it answered.
static std::vector<NetIface> probe_host(const std::string& host, const std::string& rsh_agent, double timeout_s,
                                        std::string& problem) {
  if (is_this_host(host)) return local_interfaces();
  const std::string said = run_on_host(host, rsh_agent, timeout_s, kIfaceProbeScript, problem);
  return problem.empty() ? parse_iface_probe(said) : std::vector<NetIface>{};
}

std::vector<std::vector<NetIface>> check_reachable(const std::vector<HostSlots>& hosts,
                                                   const std::string& rsh_agent, double timeout_s) {
  std::vector<std::vector<NetIface>> out;
  for (const HostSlots& h : hosts) {
    std::string problem;
    out.push_back(probe_host(h.host, rsh_agent, timeout_s, problem));
    if (!problem.empty()) fail(problem);
  }
  return out;
}

std::vector<std::string> host_network_problems(const std::vector<HostSlots>& hosts,
                                               const std::string& rsh_agent, double timeout_s,
                                               const std::vector<std::string>& wanted_ifaces) {
  std::vector<std::string> problems, names;
  std::vector<std::vector<NetIface>> ifs;
  for (const HostSlots& h : hosts) {
    std::string problem;
    std::vector<NetIface> f = probe_host(h.host, rsh_agent, timeout_s, problem);
    if (!problem.empty()) {
      problems.push_back(problem);
      continue;
    }
    names.push_back(h.host);
    ifs.push_back(std::move(f));
  }
  for (std::string& p : interface_problems(names, ifs, wanted_ifaces)) problems.push_back(std::move(p));
  return problems;
}

}  // namespace strata::launcher
