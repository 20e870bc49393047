#include "launcher/netif.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>

#include "core/error.h"

namespace strata::launcher {

std::vector<NetIface> local_interfaces() {
  std::map<std::string, NetIface> by_name;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) == 0) {
    for (ifaddrs* a = list; a; a = a->ifa_next) {
      NetIface& f = by_name[a->ifa_name];
      f.name = a->ifa_name;
      f.up = (a->ifa_flags & IFF_UP) && (a->ifa_flags & IFF_RUNNING);
      f.state = f.up ? "up" : (a->ifa_flags & IFF_UP) ? "lowerlayerdown" : "down";
      if (a->ifa_addr && a->ifa_addr->sa_family == AF_INET && f.ipv4.empty()) {
        char buf[INET_ADDRSTRLEN] = {};
        inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(a->ifa_addr)->sin_addr, buf, sizeof buf);
        f.ipv4 = buf;
        if (a->ifa_netmask) {
          uint32_t mask = ntohl(reinterpret_cast<sockaddr_in*>(a->ifa_netmask)->sin_addr.s_addr);
          f.subnet = subnet_of(cat(f.ipv4, "/", __builtin_popcount(mask)));
        }
      }
    }
    freeifaddrs(list);
  }
  // /proc/net/dev: "  eth0: RX-bytes packets ... (8 fields) TX-bytes ..." for this namespace.
  std::ifstream dev("/proc/net/dev");
  for (std::string line; std::getline(dev, line);) {
    size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string name = line.substr(0, colon);
    name.erase(0, name.find_first_not_of(' '));
    std::istringstream fields(line.substr(colon + 1));
    uint64_t v[9] = {};
    for (uint64_t& x : v) fields >> x;
    auto it = by_name.find(name);
    if (it == by_name.end()) continue;
    it->second.rx_bytes = v[0];
    it->second.tx_bytes = v[8];
  }
  std::vector<NetIface> out;
  for (auto& [name, f] : by_name) out.push_back(f);
  return out;
}

const char* const kIfaceProbeScript =
    "for d in /sys/class/net/*; do n=${d##*/}; echo \"$n $(cat $d/operstate 2>/dev/null) "
    "$(cat $d/flags 2>/dev/null) $(ip -o -4 addr show dev $n 2>/dev/null | awk '{print $4; exit}')\"; done";

std::vector<NetIface> parse_iface_probe(std::string_view text) {
  std::vector<NetIface> out;
  std::istringstream in{std::string(text)};
  for (std::string line; std::getline(in, line);) {
    std::istringstream words(line);
    NetIface f;
    std::string flags;
    if (!(words >> f.name >> f.state)) continue;
    std::string addr;
    words >> flags >> addr;
    f.subnet = subnet_of(addr);
    f.ipv4 = f.subnet.empty() ? "" : addr.substr(0, addr.find('/'));
    const unsigned long bits = std::strtoul(flags.c_str(), nullptr, 16);
    // lo reads "unknown"; a veth or NIC without a carrier "down" or "lowerlayerdown".
    f.up = (bits & IFF_UP) && (f.state == "up" || f.state == "unknown");
    if (!(bits & IFF_UP)) f.state = "down";
    out.push_back(f);
  }
  std::sort(out.begin(), out.end(), [](const NetIface& a, const NetIface& b) { return a.name < b.name; });
  return out;
}

std::vector<std::string> parse_iface_list(std::string_view spec) {
  std::vector<std::string> out;
  std::string s(spec);
  std::stringstream ss(s);
  for (std::string name; std::getline(ss, name, ',');) {
    bool ok = !name.empty() && name.size() <= 15;
    for (char c : name) ok &= std::isalnum((unsigned char)c) || c == '_' || c == '.' || c == ':' || c == '-';
    STRATA_CHECK(ok, "--iface '", s, "': bad interface name '", name,
                 "' (expected names such as eth0, separated by commas)");
    out.push_back(name);
  }
  STRATA_CHECK(!out.empty(), "--iface names no interface");
  return out;
}

std::string subnet_of(const std::string& addr_prefix) {
  size_t slash = addr_prefix.find('/');
  if (slash == std::string::npos) return "";
  in_addr a{};
  char* end = nullptr;
  long bits = std::strtol(addr_prefix.c_str() + slash + 1, &end, 10);
  if (*end || bits < 0 || bits > 32 || inet_pton(AF_INET, addr_prefix.substr(0, slash).c_str(), &a) != 1) return "";
  uint32_t mask = bits == 0 ? 0 : ~uint32_t(0) << (32 - bits);
  a.s_addr = htonl(ntohl(a.s_addr) & mask);
  char buf[INET_ADDRSTRLEN] = {};
  inet_ntop(AF_INET, &a, buf, sizeof buf);
  return cat(buf, "/", bits);
}

static const NetIface* find_iface(const std::vector<NetIface>& ifs, const std::string& name) {
  for (const NetIface& f : ifs)
    if (f.name == name) return &f;
  return nullptr;
}

static std::string names_of(const std::vector<NetIface>& ifs) {
  std::string s;
  for (const NetIface& f : ifs) s += cat(s.empty() ? "" : ", ", f.name);
  return s.empty() ? "none" : s;
}

std::vector<std::string> interface_problems(const std::vector<std::string>& hosts,
                                            const std::vector<std::vector<NetIface>>& ifs,
                                            const std::vector<std::string>& wanted) {
  std::vector<std::string> out;
  for (size_t h = 0; h < hosts.size(); ++h)
    for (const std::string& w : wanted) {
      const NetIface* f = find_iface(ifs[h], w);
      if (!f)
        out.push_back(cat("--iface ", w, ": host '", hosts[h], "' has no interface '", w, "' (it has ",
                          names_of(ifs[h]), ")"));
      else if (!f->up)
        out.push_back(cat("--iface ", w, ": interface ", w, " of host '", hosts[h], "' is down",
                          f->state == "down" ? "" : cat(" (", f->state, ")")));
    }
  for (size_t h = 0; h < hosts.size(); ++h)
    for (const NetIface& f : ifs[h]) {
      if (f.up || f.loopback() || !wanted.empty()) continue;
      for (size_t o = 0; o < hosts.size(); ++o) {
        const NetIface* g = o == h ? nullptr : find_iface(ifs[o], f.name);
        if (!g || !g->up) continue;
        out.push_back(cat("interface ", f.name, " of host '", hosts[h], "' is down", f.state == "down" ? "" : cat(" (", f.state, ")"),
                          " while it is up on host '", hosts[o], "'"));
        break;
      }
    }
  return out;
}

}  // namespace strata::launcher
