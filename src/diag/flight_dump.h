// Flight-recorder dumps as the hang doctor reads them. Each rank's watchdog writes
// RUN_DIR/flight-rank<R>.json when an operation times out, a peer dies, or on request:
//
//   {"rank": R, "world": W, "pid": P, "host": "...", "reason": "timeout|peer-dead|signal|manual|error",
//    "detail": "one line", "time_ns": T, "phase": {"step": S, "layer": L, "kind": "backward"},
//    "recorder_capacity": N, "dead_peers": [optional ranks],
//    "entries": [{"group": "world", "group_ranks": [0,1], "seq": 17, "p2p": false,
//    "op": "allreduce", "dtype": "float", "count": 1024, "counts": [optional], "peer": -1,
//    "root": -1, "redop": "sum", "tag": 0, "state": "scheduled|started|completed|failed",
//    "t_scheduled_ns": .., "t_started_ns": .., "t_completed_ns": .., "phase": {...}}]}
//
// (comm/flight_recorder.h writes it.) Collectives and point-to-point operations have
// separate sequence numbers per group. Times are the writing rank's monotonic clock
// (comparable within one rank, and across ranks only on one host). Loading never throws
// for a bad file: it records which files could not be used and why, and keeps the rest; a
// dump cut off mid-write keeps the entries before the cut (its rank comes from the file
// name, its world size from the other dumps).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "comm/op_state.h"
#include "nlohmann/json_fwd.hpp"

namespace strata::diag {

// The largest world size a dump may state; numbers beyond it (ranks, peers, world sizes)
// make the field malformed rather than allocate for a job no machine runs.
constexpr int kMaxWorld = 1 << 17;

struct Phase {
  int64_t step = -1;
  int32_t layer = -1;  // -1: not inside a layer
  std::string kind = "idle";  // core/phase.h phase_name(): "forward", "checkpoint save", ...
  bool operator==(const Phase&) const = default;
};

// "backward of layer 2 (step 3)", "checkpoint save (step 3)", "idle".
std::string describe_phase(const Phase& p);

using comm::OpState;  // the recorder's states, read back by name
using comm::op_state_name;

struct FlightEntry {
  std::string group;
  std::vector<int> group_ranks;  // global ranks in the group
  int64_t seq = 0;               // the group's sequence number of this operation
  std::string op, dtype;
  int64_t count = 0;
  std::vector<int64_t> counts;  // per-rank counts of v-collectives, else empty
  bool p2p = false;             // send/recv (own sequence numbers)
  int peer = -1;                // point-to-point peer (group rank); -1 for collectives
  int root = -1;                // rooted collectives (broadcast, reduce)
  std::string redop;            // reductions: "sum", "avg", ...
  int64_t tag = 0;
  OpState state = OpState::scheduled;
  int64_t t_scheduled_ns = 0, t_started_ns = 0, t_completed_ns = 0;  // 0: not reached
  Phase phase;  // where the operation was called from

  bool is_p2p() const { return p2p; }
  bool done() const { return state == OpState::completed; }
};

struct FlightDump {
  std::string file;  // base name, e.g. "flight-rank2.json"
  int rank = -1, world = 0;
  int64_t pid = 0;
  std::string host, reason, detail;
  int64_t time_ns = 0;
  Phase phase;  // what the rank was doing when it dumped
  int64_t capacity = 0;  // the recorder's ring size; 0 when unknown
  std::vector<int> dead_peers;  // from "dead_peers", or read from the detail of a peer-dead dump
  std::vector<FlightEntry> entries;  // oldest first
  bool truncated = false;            // the file was cut off; entries are those before the cut
  int dropped_entries = 0;           // entries skipped because fields were missing or wrong
};

struct DumpSet {
  std::string dir;
  int world = 0;                  // the world size most dumps state (see load_flight_dumps)
  std::vector<FlightDump> dumps;  // usable dumps, by rank, at most one per rank
  std::vector<std::string> problems;  // "flight-rank2.json: not valid JSON (...)", one per file
};

// Parses one dump; throws strata::Error naming the missing or malformed field. A cut-off
// dump (`truncated`) may lack "rank" (then `file_rank` is used) and "world" (then 0).
FlightDump parse_flight_dump(const nlohmann::json& j, const std::string& file, bool truncated = false,
                             int file_rank = -1);

// Reads every flight-rank<R>.json under `dir` (a leftover "flight-rank<R>.json.<suffix>"
// stands in for a rank with no finished file). Throws only when `dir` is not a directory.
// Every number is bounded by what the dumps agree on: the world is the size most dumps
// state (a tie goes to the smallest that holds every dump's rank); a dump stating another
// is read with the agreed one, a rank outside it is not used, and dead peers, group members,
// peers and roots outside it are dropped. Each file or part not used is listed in `problems`.
DumpSet load_flight_dumps(const std::string& dir);

}  // namespace strata::diag
