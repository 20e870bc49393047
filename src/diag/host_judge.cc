// The bandwidth doctor across hosts: findings from the measurements (pure), and the report.
#include <algorithm>
#include <cstdio>

#include "comm/benchmark.h"
#include "comm/hier/topology.h"
#include "core/error.h"
#include "diag/host_net.h"
#include "diag/net_doctor.h"
#include "nlohmann/json.hpp"

namespace strata::diag {
namespace {

std::string num(double x, int prec = 3) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", prec, x);
  return buf;
}

// A link's capacity: its best raw probe, or what MPI got when no probe worked.
double capacity(const HostLink& l) {
  const RawProbe* b = l.best_raw();
  return std::max(b ? b->gbps : 0.0, l.mpi_gbps);
}

std::string link_name(const HostNetResult& r, const HostLink& l) {
  return cat(r.hosts[size_t(l.from)], " -> ", r.hosts[size_t(l.to)]);
}

// MPI's bytes over a slower interface than the link's best: the fix is --iface.
void wrong_interface(const HostNetResult& r, double threshold, std::vector<HostFinding>& out) {
  for (const HostLink& l : r.links) {
    const RawProbe* best = l.best_raw();
    uint64_t total = 0, on_best = 0;
    for (auto& [name, b] : l.tx_bytes) {
      total += b;
      if (best && name == best->iface) on_best = b;
    }
    if (!best || total == 0 || double(on_best) >= 0.9 * double(total) || l.mpi_gbps >= threshold * best->gbps)
      continue;
    std::string split;
    for (auto& [name, b] : l.tx_bytes) {
      if (double(b) < 0.05 * double(total)) continue;
      double raw = 0;
      for (const RawProbe& p : l.raw)
        if (p.iface == name) raw = p.gbps;
      split += cat(split.empty() ? "" : ", ", int(100.0 * double(b) / double(total) + 0.5), "% over ", name,
                   " (raw TCP ", num(raw), " GB/s)");
    }
    out.push_back({"wrong-iface",
                   cat("traffic on the wrong interface: MPI sent ", link_name(r, l), " ", split, "; it reached ",
                       num(l.mpi_gbps), " GB/s, ", num(l.mpi_gbps / best->gbps, 2), "x what ", best->iface,
                       " carries alone (", num(best->gbps), " GB/s). Fix: --iface ", best->iface,
                       " (strata launch/train/doctor; OpenMPI: --mca btl_tcp_if_include ", best->iface, ")")});
    return;  // one finding: the same fix holds for every link
  }
}

// Every link out of (or into) one host below threshold x the reference.
void degraded(const HostNetResult& r, double threshold, double ref, std::vector<HostFinding>& out) {
  const int H = int(r.hosts.size());
  auto slow = [&](const HostLink& l) { return capacity(l) < threshold * ref; };
  for (int h = 0; h < H; ++h)
    for (bool outgoing : {true, false}) {
      std::vector<const HostLink*> mine;
      for (const HostLink& l : r.links)
        if ((outgoing ? l.from : l.to) == h) mine.push_back(&l);
      if (mine.empty() || !std::all_of(mine.begin(), mine.end(), [&](const HostLink* l) { return slow(*l); }))
        continue;
      // Two hosts: the slow direction is the sender's uplink or the receiver's downlink;
      // name it once, from the sender.
      if (!outgoing && H == 2) continue;
      std::string evidence;
      for (const HostLink* l : mine) {
        const RawProbe* b = l->best_raw();
        evidence += cat(evidence.empty() ? "" : ", ", link_name(r, *l), " ", num(capacity(*l)), " GB/s",
                        b ? cat(" over ", b->iface) : std::string());
      }
      double worst = capacity(*mine.front());
      for (const HostLink* l : mine) worst = std::min(worst, capacity(*l));
      std::string who = outgoing ? (H == 2 ? cat("host ", r.hosts[size_t(h)], "'s uplink (or host ",
                                                  r.hosts[size_t(1 - h)], "'s downlink)")
                                          : cat("host ", r.hosts[size_t(h)], "'s uplink"))
                                 : cat("host ", r.hosts[size_t(h)], "'s downlink");
      out.push_back({"degraded", cat("degraded link: ", who, " runs at ", num(worst / ref, 2),
                                     "x the reference link (", num(ref), " GB/s): ", evidence)});
    }
}

void collectives(const HostNetResult& r, const std::vector<CollectiveResult>& colls, double threshold,
                 std::vector<HostFinding>& out) {
  const int H = int(r.hosts.size()), N = int(r.host_of.size());
  if (H < 2 || r.links.empty()) return;
  // The slowest host uplink bounds every collective that crosses hosts.
  double uplink = INFINITY;
  for (int h = 0; h < H; ++h) {
    double best = 0;
    for (const HostLink& l : r.links)
      if (l.from == h) best = std::max(best, capacity(l));
    uplink = std::min(uplink, best);
  }
  const double factor = double(H) / double(H - 1) * double(N - 1) / double(N);
  for (const CollectiveResult& c : colls) {
    double bound = uplink * factor / (c.op == "alltoall" ? double(N) / H : 1.0);
    if (c.busbw_gbps >= threshold * bound) continue;
    out.push_back({"collective", cat(c.op, ": busbw ", num(c.busbw_gbps), " GB/s, ", num(c.busbw_gbps / bound, 2),
                                     "x what the slowest host uplink (", num(uplink), " GB/s) allows (",
                                     num(bound), " GB/s)")});
  }
}

void topology(const HostNetResult& r, std::vector<HostFinding>& out) {
  const TpPlacement& t = r.tp;
  if (t.spanning.empty()) return;
  const std::string groups = comm::describe_rank_groups(t.spanning, r.hosts, r.host_of);
  std::string placement;
  for (size_t h = 0; h < r.hosts.size(); ++h) {
    placement += cat(h ? "; " : "", r.hosts[h], ":");
    for (size_t q = 0; q < r.host_of.size(); ++q)
      if (r.host_of[q] == int(h)) placement += cat(" ", q);
  }
  std::string cost = t.local_us > 0
                         ? cat(" An all-reduce of ", t.bytes >> 10, " KiB over a tp group takes ", num(t.group_us / 1e3, 1),
                               " ms, on ", t.tp, " ranks of one host ", num(t.local_us / 1e3, 1), " ms (",
                               num(t.group_us / t.local_us, 1), "x), and every tensor-parallel layer pays it.")
                         : cat(" An all-reduce of ", t.bytes >> 10, " KiB over a tp group takes ", num(t.group_us / 1e3, 1),
                               " ms.");
  out.push_back({"topology", cat("topology strata did not choose: ", t.spanning.size(), " tp group(s) of ", t.tp,
                                 " span hosts (", groups, "; placement ", placement, ").", cost,
                                 " Start ranks host by host (strata launch/train --hosts or --hostfile fill "
                                 "each host in order; mpirun --map-by slot), so tp peers share a host.")});
}

}  // namespace

std::vector<HostFinding> judge_hosts(const HostNetResult& r, const std::vector<CollectiveResult>& colls,
                                     double threshold, double expect_link_gbps) {
  STRATA_CHECK_SETTING(threshold > 0 && threshold <= 1, setting("threshold"),
                       " must be in (0, 1], got ", threshold);
  std::vector<HostFinding> out;
  for (std::string& p : launcher::interface_problems(r.hosts, r.ifaces, r.wanted_ifaces))
    out.push_back({"down", "interface down: " + p});
  wrong_interface(r, threshold, out);
  double ref = expect_link_gbps;
  if (ref <= 0)
    for (const HostLink& l : r.links) ref = std::max(ref, capacity(l));
  if (ref > 0) degraded(r, threshold, ref, out);
  collectives(r, colls, threshold, out);
  topology(r, out);
  return out;
}

std::string format_host_report(const HostNetResult& r) {
  std::string out = cat("Hosts: ", r.hosts.size(), " (");
  for (size_t h = 0; h < r.hosts.size(); ++h) {
    out += cat(h ? "; " : "", r.hosts[h], ":");
    for (size_t q = 0; q < r.host_of.size(); ++q)
      if (r.host_of[q] == int(h)) out += cat(" ", q);
  }
  out += ")\n";
  for (size_t h = 0; h < r.ifaces.size(); ++h) {
    out += cat("  ", r.hosts[h], " interfaces:");
    for (const launcher::NetIface& f : r.ifaces[h])
      if (!f.loopback()) out += cat(" ", f.name, " ", f.state, f.ipv4.empty() ? "" : " " + f.ipv4, ";");
    out += "\n";
  }
  if (!r.links.empty()) out += "Host links (MPI: best repetition; raw TCP per interface; MPI bytes per interface):\n";
  for (const HostLink& l : r.links) {
    out += cat("  ", link_name(r, l), ": MPI ", num(l.mpi_gbps), " GB/s; raw");
    for (const RawProbe& p : l.raw) out += cat(" ", p.iface, " ", p.gbps > 0 ? num(p.gbps) + " GB/s" : "failed (" + p.error + ")");
    uint64_t total = 0;
    for (auto& [n, b] : l.tx_bytes) total += b;
    out += "; MPI bytes";
    for (auto& [n, b] : l.tx_bytes) out += cat(" ", n, " ", total ? int(100.0 * double(b) / double(total) + 0.5) : 0, "%");
    out += "\n";
  }
  return out;
}

nlohmann::json host_report_json(const HostNetResult& r) {
  nlohmann::json ifaces = nlohmann::json::array(), links = nlohmann::json::array();
  for (const auto& host : r.ifaces) {
    nlohmann::json h = nlohmann::json::array();
    for (const launcher::NetIface& f : host) h.push_back({{"name", f.name}, {"state", f.state}, {"up", f.up}, {"ipv4", f.ipv4}});
    ifaces.push_back(h);
  }
  for (const HostLink& l : r.links) {
    nlohmann::json raw = nlohmann::json::array(), tx = nlohmann::json::array();
    for (const RawProbe& p : l.raw) raw.push_back({{"iface", p.iface}, {"gbps", p.gbps}, {"error", p.error}});
    for (auto& [n, b] : l.tx_bytes) tx.push_back({{"iface", n}, {"bytes", b}});
    links.push_back({{"from", l.from}, {"to", l.to}, {"mpi_gbps", l.mpi_gbps}, {"raw", raw}, {"tx_bytes", tx}});
  }
  return {{"hosts", r.hosts}, {"host_of", r.host_of}, {"ifaces", ifaces}, {"links", links},
          {"wanted_ifaces", r.wanted_ifaces},
          {"tp", {{"tp", r.tp.tp}, {"spanning", r.tp.spanning}, {"group_us", r.tp.group_us},
                  {"local_us", r.tp.local_us}, {"bytes", r.tp.bytes}}}};
}

HostNetResult host_result_from_json(const nlohmann::json& j) {
  HostNetResult r;
  r.hosts = j.at("hosts").get<std::vector<std::string>>();
  r.host_of = j.at("host_of").get<std::vector<int>>();
  r.wanted_ifaces = j.at("wanted_ifaces").get<std::vector<std::string>>();
  for (const auto& host : j.at("ifaces")) {
    std::vector<launcher::NetIface> h;
    for (const auto& f : host) {
      launcher::NetIface x;
      x.name = f.at("name"), x.state = f.at("state"), x.up = f.at("up"), x.ipv4 = f.at("ipv4");
      h.push_back(x);
    }
    r.ifaces.push_back(h);
  }
  for (const auto& l : j.at("links")) {
    HostLink x;
    x.from = l.at("from"), x.to = l.at("to"), x.mpi_gbps = l.at("mpi_gbps");
    for (const auto& p : l.at("raw")) x.raw.push_back({p.at("iface"), p.at("gbps"), p.at("error")});
    for (const auto& t : l.at("tx_bytes")) x.tx_bytes.emplace_back(t.at("iface"), t.at("bytes"));
    r.links.push_back(x);
  }
  const auto& t = j.at("tp");
  r.tp.tp = t.at("tp"), r.tp.group_us = t.at("group_us"), r.tp.local_us = t.at("local_us"), r.tp.bytes = t.at("bytes");
  r.tp.spanning = t.at("spanning").get<std::vector<std::vector<int>>>();
  return r;
}

}  // namespace strata::diag
