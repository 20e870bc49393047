// Per-rank Chrome traces as strata writes them (core/trace.h): RUN_DIR/trace-rank<R>.json,
//   {"traceEvents": [...], "displayTimeUnit": "ms"}   (a bare [...] array is accepted too)
// with pid = rank, "X" (complete) events carrying ts and dur in microseconds, and "M"
// metadata events naming threads ("compute", "comm"). Times are CLOCK_MONOTONIC, so the
// ranks of one host share a time axis. Loading never throws for a bad file: it records which
// files could not be used and why, salvages traces cut off mid-write, and keeps the rest.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"

namespace strata::diag {

// One complete ("X") event.
struct Span {
  std::string name, cat;
  int64_t start_ns = 0, end_ns = 0;
  int64_t tid = 0;
};

struct RankTrace {
  int rank = -1;
  std::string file;
  nlohmann::json events = nlohmann::json::array();  // every event of the file, as written
  std::vector<Span> spans;                          // its complete events
  bool truncated = false;
};

struct TraceSet {
  std::string dir;
  std::vector<RankTrace> ranks;       // by rank
  std::vector<std::string> problems;  // "trace-rank2.json: not valid JSON (...)"
};

// Reads every trace-rank<R>.json under `dir`. Throws only when `dir` is not a directory.
TraceSet load_traces(const std::string& dir);

// Parses one trace's JSON (object with "traceEvents", or an array). Throws Error naming the
// problem; events that are not objects, and "X" events without numeric ts/dur, are skipped.
RankTrace parse_trace(const nlohmann::json& j, int rank, const std::string& file);

struct MergeOptions {
  bool align_start = false;  // shift each rank so its first event is at 0 (different hosts)
};

// One Chrome trace with a process (track group) per rank, named "rank R" and sorted by
// rank, and that rank's threads under it.
nlohmann::json merge_traces(const TraceSet& set, const MergeOptions& opt = {});

}  // namespace strata::diag
