// The bandwidth doctor's pure parts: throttle specs, thresholds, and the report.
#include "diag/net_doctor.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <sstream>

#include "core/env.h"
#include "core/error.h"
#include "core/stats.h"
#include "nlohmann/json.hpp"

namespace strata::diag {

static const EnvVar kThrottleLink("STRATA_THROTTLE_LINK", "",
                                  "tests/demos: slow links in `strata doctor net`'s measurements, e.g. 0-2:0.25");

std::vector<LinkThrottle> link_throttle_from_env(int world) {
  return kThrottleLink.is_set() ? parse_link_throttle(kThrottleLink.get(), world) : std::vector<LinkThrottle>{};
}

std::vector<LinkThrottle> parse_link_throttle(const std::string& text, int world) {
  std::vector<LinkThrottle> out;
  std::stringstream ss(text);
  for (std::string item; std::getline(ss, item, ',');) {
    if (item.empty()) continue;
    LinkThrottle t;
    char dash = 0, colon = 0;
    std::istringstream is(item);
    std::string rest;
    bool ok = bool(is >> t.a >> dash >> t.b >> colon >> t.factor) && dash == '-' && colon == ':' && !(is >> rest);
    STRATA_CHECK(ok, "STRATA_THROTTLE_LINK entry '", item, "' is not RANK-RANK:FACTOR (e.g. 0-2:0.25)");
    STRATA_CHECK(t.a >= 0 && t.b >= 0 && t.a != t.b, "STRATA_THROTTLE_LINK entry '", item,
                 "' must name two different ranks");
    STRATA_CHECK(t.factor > 0 && t.factor <= 1, "STRATA_THROTTLE_LINK entry '", item,
                 "': the factor must be in (0, 1] (0.25 = four times slower)");
    STRATA_CHECK(world <= 0 || (t.a < world && t.b < world), "STRATA_THROTTLE_LINK entry '", item,
                 "' names a rank outside 0-", world - 1);
    out.push_back(t);
  }
  return out;
}

double throttle_factor(const std::vector<LinkThrottle>& t, int a, int b) {
  double f = 1;
  for (const LinkThrottle& x : t)
    if ((x.a == a && x.b == b) || (x.a == b && x.b == a)) f = std::min(f, x.factor);
  return f;
}

double slowest_factor(const std::vector<LinkThrottle>& t, int n) {
  double f = 1;
  for (const LinkThrottle& x : t)
    if (x.a < n && x.b < n) f = std::min(f, x.factor);
  return f;
}

namespace {

std::string num(double x, int prec = 2) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", prec, x);
  return buf;
}

}  // namespace

NetVerdict judge_net(const NetResult& r, double threshold, double expect) {
  STRATA_CHECK_SETTING(threshold > 0 && threshold <= 1, setting("threshold"),
                       " must be in (0, 1], got ", threshold);
  NetVerdict v;
  // Kind of a pair: 0 within a host, 1 between hosts (one kind on one host).
  const bool hosts = !r.host_of.empty() && *std::max_element(r.host_of.begin(), r.host_of.end()) > 0;
  auto kind = [&](int i, int j) { return hosts && r.host_of[size_t(i)] != r.host_of[size_t(j)] ? 1 : 0; };
  std::vector<double> bws[2], lats[2], busbws;
  for (int i = 0; i < r.world; ++i)
    for (int j = i + 1; j < r.world; ++j) {
      bws[kind(i, j)].push_back(r.bw_gbps[i][j]);
      lats[kind(i, j)].push_back(r.latency_us[i][j]);
    }
  for (auto& c : r.collectives) busbws.push_back(c.busbw_gbps);
  double med_bw[2] = {median(bws[0]), median(bws[1])}, med_lat[2] = {median(lats[0]), median(lats[1])};
  std::vector<double> all_bw = bws[0], all_lat = lats[0];
  all_bw.insert(all_bw.end(), bws[1].begin(), bws[1].end());
  all_lat.insert(all_lat.end(), lats[1].begin(), lats[1].end());
  v.median_pair_bw = median(all_bw);
  v.median_pair_latency = median(all_lat);
  v.median_busbw = median(busbws);
  bool relative_colls = busbws.size() >= 3 && !hosts;
  for (int i = 0; i < r.world; ++i)
    for (int j = i + 1; j < r.world; ++j) {
      std::string pair = cat("pair ", i, "-", j);
      const int k = kind(i, j);
      const bool relative = bws[k].size() >= 3;
      const std::string of = hosts ? (k ? " between hosts" : " within a host") : "";
      double bw = r.bw_gbps[i][j], lat = r.latency_us[i][j];
      if (relative && bw < threshold * med_bw[k])
        v.flags.push_back({pair, cat(pair, ": bandwidth ", num(bw), " GB/s, ", num(bw / med_bw[k]),
                                     "x the median pair", of, " (", num(med_bw[k]), " GB/s)")});
      if (expect > 0 && bw < threshold * expect)
        v.flags.push_back({pair, cat(pair, ": bandwidth ", num(bw), " GB/s, ", num(bw / expect),
                                     "x the expected ", num(expect), " GB/s")});
      if (relative && med_lat[k] > 0 && lat > med_lat[k] / threshold)
        v.flags.push_back({pair, cat(pair, ": latency ", num(lat, 1), " us, ", num(lat / med_lat[k], 1),
                                     "x the median pair", of, " (", num(med_lat[k], 1), " us)")});
    }
  for (const CollectiveResult& c : r.collectives) {
    if (relative_colls && c.busbw_gbps < threshold * v.median_busbw)
      v.flags.push_back({c.op, cat(c.op, ": busbw ", num(c.busbw_gbps), " GB/s, ", num(c.busbw_gbps / v.median_busbw),
                                   "x the median collective (", num(v.median_busbw), " GB/s)")});
    if (expect > 0 && c.busbw_gbps < threshold * expect)
      v.flags.push_back({c.op, cat(c.op, ": busbw ", num(c.busbw_gbps), " GB/s, ", num(c.busbw_gbps / expect),
                                   "x the expected ", num(expect), " GB/s")});
  }
  return v;
}

std::string format_net_report(const NetResult& r, const NetVerdict& v, double threshold, double expect) {
  std::string out = cat("strata doctor net: ", r.world, " ranks, backend ", r.backend, ", ",
                        num(double(r.p2p_bytes) / (1 << 20), 1), " MiB point-to-point messages\n");
  auto matrix = [&](const char* title, const std::vector<std::vector<double>>& m, int prec) {
    out += title;
    out += "\n      ";
    char buf[64];
    for (int j = 0; j < r.world; ++j) std::snprintf(buf, sizeof buf, "%9d", j), out += buf;
    out += "\n";
    for (int i = 0; i < r.world; ++i) {
      std::snprintf(buf, sizeof buf, "  %4d", i);
      out += buf;
      for (int j = 0; j < r.world; ++j) {
        if (i == j) std::snprintf(buf, sizeof buf, "%9s", "-");
        else std::snprintf(buf, sizeof buf, "%9.*f", prec, m[i][j]);
        out += buf;
      }
      out += "\n";
    }
  };
  matrix("Point-to-point bandwidth, GB/s (best repetition):", r.bw_gbps, 2);
  matrix("Point-to-point latency, us (half the best round trip):", r.latency_us, 1);
  if (!r.collectives.empty()) {
    out += cat("Collectives (", num(double(r.collectives[0].bytes) / (1 << 20), 1), " MiB, best iteration):\n");
    out += "  op              time us   algbw GB/s   busbw GB/s\n";
    char buf[128];
    for (auto& c : r.collectives) {
      std::snprintf(buf, sizeof buf, "  %-13s %9.1f %12.2f %12.2f\n", c.op.c_str(), c.time_us, c.algbw_gbps, c.busbw_gbps);
      out += buf;
    }
  }
  out += cat("Median pair: ", num(v.median_pair_bw), " GB/s, ", num(v.median_pair_latency, 1),
             " us; median collective busbw: ", num(v.median_busbw), " GB/s; threshold ", threshold,
             expect > 0 ? cat(", expected busbw ", num(expect), " GB/s") : std::string(), "\n");
  if (r.world < 3 && expect <= 0 && r.host_of.empty())
    out += "Note: with fewer than 3 ranks there is no median to compare pairs against; give --expect-busbw\n";
  if (v.flags.empty()) out += "No slow link or collective found.\n";
  for (auto& f : v.flags) out += "SLOW " + f.text + "\n";
  return out;
}

nlohmann::json net_report_json(const NetResult& r, const NetVerdict& v, double threshold, double expect) {
  nlohmann::json colls = nlohmann::json::array(), flags = nlohmann::json::array();
  for (auto& c : r.collectives)
    colls.push_back({{"op", c.op}, {"bytes", c.bytes}, {"time_us", c.time_us}, {"algbw_gbps", c.algbw_gbps},
                     {"busbw_gbps", c.busbw_gbps}});
  for (auto& f : v.flags) flags.push_back({{"what", f.what}, {"text", f.text}});
  return {{"world", r.world}, {"backend", r.backend}, {"p2p_bytes", r.p2p_bytes}, {"bw_gbps", r.bw_gbps},
          {"latency_us", r.latency_us}, {"collectives", colls}, {"median_pair_bw_gbps", v.median_pair_bw},
          {"median_pair_latency_us", v.median_pair_latency}, {"median_busbw_gbps", v.median_busbw},
          {"threshold", threshold}, {"expect_busbw_gbps", expect}, {"flags", flags}, {"healthy", v.flags.empty()},
          {"host_of", r.host_of}};
}

}  // namespace strata::diag

namespace strata::diag {

NetResult net_result_from_json(const nlohmann::json& j) {
  NetResult r;
  r.world = j.at("world").get<int>();
  r.backend = j.at("backend").get<std::string>();
  r.p2p_bytes = j.at("p2p_bytes").get<size_t>();
  r.bw_gbps = j.at("bw_gbps").get<std::vector<std::vector<double>>>();
  r.latency_us = j.at("latency_us").get<std::vector<std::vector<double>>>();
  for (const auto& c : j.at("collectives"))
    r.collectives.push_back({c.at("op").get<std::string>(), c.at("bytes").get<size_t>(), c.at("time_us").get<double>(),
                             c.at("algbw_gbps").get<double>(), c.at("busbw_gbps").get<double>()});
  if (j.contains("host_of")) r.host_of = j.at("host_of").get<std::vector<int>>();
  return r;
}

}  // namespace strata::diag
