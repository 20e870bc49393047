// One run of the bandwidth doctor over a process group: the rank-pair matrix and the
// collectives (net_doctor.h) and, when the ranks span hosts, the host links, interfaces and
// placement (host_net.h), as one JSON report; and its text. `strata doctor net` and
// `strata train --preflight` share it.
#pragma once
#include <iosfwd>

#include "diag/host_net.h"
#include "diag/net_doctor.h"
#include "nlohmann/json_fwd.hpp"

namespace strata::comm {
class ProcessGroup;
}

namespace strata::diag {

struct NetCheckOptions {
  NetConfig net;
  HostNetConfig host;
  double threshold = 0.5;
  double expect_busbw = 0;      // GB/s, <= 0: not given
  double expect_link_gbps = 0;  // GB/s per host link, <= 0: the fastest link measured
};

// Collective over every rank of `pg`; every rank returns the report.
nlohmann::json run_net_check(comm::ProcessGroup& pg, const NetCheckOptions& o);

// Writes the report as text (or JSON with the findings) and returns the number of findings
// (slow pairs and collectives, host findings).
int print_net_check(const nlohmann::json& report, bool json, std::ostream& out);

}  // namespace strata::diag
