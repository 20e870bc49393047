#include "diag/net_check.h"

#include <ostream>

#include "comm/process_group.h"
#include "nlohmann/json.hpp"

namespace strata::diag {

nlohmann::json run_net_check(comm::ProcessGroup& pg, const NetCheckOptions& o) {
  NetResult r = measure_net(pg, o.net);
  HostNetResult h = measure_hosts(pg, o.host);
  if (h.hosts.size() > 1) r.host_of = h.host_of;
  NetVerdict v = judge_net(r, o.threshold, o.expect_busbw);
  nlohmann::json report = net_report_json(r, v, o.threshold, o.expect_busbw);
  report["hosts"] = host_report_json(h);
  report["expect_link_gbps"] = o.expect_link_gbps;
  return report;
}

int print_net_check(const nlohmann::json& report, bool json, std::ostream& out) {
  NetResult r = net_result_from_json(report);
  const double threshold = report.at("threshold"), expect = report.at("expect_busbw_gbps");
  NetVerdict v = judge_net(r, threshold, expect);
  std::vector<HostFinding> findings;
  HostNetResult h;
  if (report.contains("hosts")) {
    h = host_result_from_json(report.at("hosts"));
    findings = judge_hosts(h, r.collectives, threshold, report.value("expect_link_gbps", 0.0));
  }
  if (json) {
    nlohmann::json j = net_report_json(r, v, threshold, expect);
    j["hosts"] = report.at("hosts");
    nlohmann::json f = nlohmann::json::array();
    for (const HostFinding& x : findings) f.push_back({{"kind", x.kind}, {"text", x.text}});
    j["host_findings"] = f;
    j["healthy"] = v.flags.empty() && findings.empty();
    out << j.dump(2) << "\n";
  } else {
    std::string text = format_net_report(r, v, threshold, expect);
    if (h.hosts.size() > 1) {
      // "No slow link" is the last verdict line only when the hosts add nothing either.
      const std::string none = "No slow link or collective found.\n";
      if (!findings.empty() && text.size() >= none.size() && text.compare(text.size() - none.size(), none.size(), none) == 0)
        text.resize(text.size() - none.size());
      text += format_host_report(h);
      for (const HostFinding& x : findings) text += "FOUND " + x.text + "\n";
    }
    out << text;
  }
  out.flush();
  return int(v.flags.size() + findings.size());
}

}  // namespace strata::diag
