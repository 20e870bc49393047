#include "launcher/slurm_hosts.h"

#include <cctype>
#include <cstdlib>

#include "core/error.h"

namespace strata::launcher {

namespace {

// Splits at commas outside brackets.
std::vector<std::string> split_top(std::string_view s, const char* what) {
  std::vector<std::string> out;
  int depth = 0;
  std::string cur;
  for (char c : s) {
    if (c == '[') ++depth;
    if (c == ']') --depth;
    STRATA_CHECK(depth >= 0 && depth <= 1, what, " '", std::string(s), "': unbalanced or nested brackets");
    if (c == ',' && depth == 0) {
      out.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  STRATA_CHECK(depth == 0, what, " '", std::string(s), "': unbalanced brackets");
  out.push_back(cur);
  return out;
}

long parse_num(const std::string& s, const std::string& where) {
  STRATA_CHECK(!s.empty() && s.size() <= 9, where, ": bad number '", s, "'");
  for (char c : s) STRATA_CHECK(std::isdigit((unsigned char)c), where, ": bad number '", s, "'");
  return std::strtol(s.c_str(), nullptr, 10);
}

// "01-03,07" -> {"01","02","03","07"} (width of the lower bound kept).
std::vector<std::string> expand_range_list(const std::string& body, const std::string& where) {
  std::vector<std::string> out;
  for (const std::string& part : split_top(body, "SLURM_JOB_NODELIST")) {
    size_t dash = part.find('-');
    std::string lo = part.substr(0, dash), hi = dash == std::string::npos ? lo : part.substr(dash + 1);
    long a = parse_num(lo, where), b = parse_num(hi, where);
    STRATA_CHECK(a <= b && b - a < 100000, where, ": bad range '", part, "'");
    for (long v = a; v <= b; ++v) {
      std::string n = std::to_string(v);
      if (n.size() < lo.size()) n.insert(0, lo.size() - n.size(), '0');
      out.push_back(n);
    }
  }
  return out;
}

// "rack[1-2]-n[01-02]" -> rack1-n01 rack1-n02 rack2-n01 rack2-n02.
std::vector<std::string> expand_name(const std::string& name) {
  size_t open = name.find('[');
  if (open == std::string::npos) return {name};
  size_t close = name.find(']', open);
  std::string where = cat("SLURM_JOB_NODELIST entry '", name, "'");
  STRATA_CHECK(close != std::string::npos, where, ": unbalanced brackets");
  std::vector<std::string> out;
  for (const std::string& v : expand_range_list(name.substr(open + 1, close - open - 1), where))
    for (const std::string& rest : expand_name(name.substr(close + 1)))
      out.push_back(name.substr(0, open) + v + rest);
  return out;
}

}  // namespace

std::vector<std::string> expand_nodelist(std::string_view list) {
  std::vector<std::string> out;
  for (const std::string& item : split_top(list, "SLURM_JOB_NODELIST")) {
    STRATA_CHECK(!item.empty(), "SLURM_JOB_NODELIST '", std::string(list), "': empty entry");
    for (std::string& n : expand_name(item)) out.push_back(std::move(n));
  }
  return out;
}

std::vector<int> expand_tasks_per_node(std::string_view spec, size_t nodes) {
  std::vector<int> out;
  const std::string where = cat("SLURM_TASKS_PER_NODE '", std::string(spec), "'");
  for (const std::string& item : split_top(spec, "SLURM_TASKS_PER_NODE")) {
    size_t paren = item.find("(x");
    long count = parse_num(item.substr(0, paren), where), times = 1;
    if (paren != std::string::npos) {
      STRATA_CHECK(item.back() == ')', where, ": bad entry '", item, "'");
      times = parse_num(item.substr(paren + 2, item.size() - paren - 3), where);
    }
    STRATA_CHECK(count >= 1 && times >= 1, where, ": counts must be positive");
    for (long k = 0; k < times; ++k) out.push_back(int(count));
  }
  STRATA_CHECK(out.size() == nodes, where, " gives ", out.size(), " node(s), but SLURM_JOB_NODELIST has ", nodes);
  return out;
}

std::vector<HostSlots> hosts_from_slurm(const std::string& nodelist, const std::string& tasks_per_node,
                                        const std::string& ntasks_per_node) {
  std::vector<std::string> nodes = expand_nodelist(nodelist);
  std::vector<int> slots(nodes.size(), 1);
  if (!tasks_per_node.empty()) {
    slots = expand_tasks_per_node(tasks_per_node, nodes.size());
  } else if (!ntasks_per_node.empty()) {
    const int n = int(parse_num(ntasks_per_node, "SLURM_NTASKS_PER_NODE"));
    STRATA_CHECK(n >= 1, "SLURM_NTASKS_PER_NODE must be at least 1, got ", n);
    slots.assign(nodes.size(), n);
  }
  std::vector<HostSlots> out;
  for (size_t i = 0; i < nodes.size(); ++i) out.push_back({nodes[i], slots[i]});
  return out;
}

std::vector<HostSlots> hosts_from_slurm_env() {
  auto get = [](const char* k) { return std::string(std::getenv(k) ? std::getenv(k) : ""); };
  std::string nodelist = get("SLURM_JOB_NODELIST");
  if (nodelist.empty()) nodelist = get("SLURM_NODELIST");
  STRATA_CHECK(!nodelist.empty(), "--slurm: SLURM_JOB_NODELIST is not set (not inside a Slurm allocation)");
  return hosts_from_slurm(nodelist, get("SLURM_TASKS_PER_NODE"), get("SLURM_NTASKS_PER_NODE"));
}

}  // namespace strata::launcher
