#include "diag/trace_file.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <regex>

#include "core/error.h"
#include "diag/json_salvage.h"

namespace strata::diag {

namespace fs = std::filesystem;
using nlohmann::json;

RankTrace parse_trace(const json& j, int rank, const std::string& file) {
  const json* events = &j;
  if (j.is_object()) {
    auto it = j.find("traceEvents");
    STRATA_CHECK(it != j.end(), "no 'traceEvents' list");
    events = &*it;
  }
  STRATA_CHECK(events->is_array(), j.is_object() ? "'traceEvents' is not a list" : "not a Chrome trace");
  RankTrace t;
  t.rank = rank;
  t.file = file;
  for (const json& e : *events) {
    if (!e.is_object()) continue;
    t.events.push_back(e);
    if (e.value("ph", "") != "X") continue;
    auto ts = e.find("ts"), dur = e.find("dur");
    if (ts == e.end() || dur == e.end() || !ts->is_number() || !dur->is_number()) continue;
    double start_us = ts->get<double>(), dur_us = dur->get<double>();
    if (!std::isfinite(start_us) || !std::isfinite(dur_us) || dur_us < 0) continue;
    Span s;
    s.name = e.value("name", "");
    s.cat = e.value("cat", "");
    s.start_ns = std::llround(start_us * 1e3);
    s.end_ns = s.start_ns + std::llround(dur_us * 1e3);
    auto tid = e.find("tid");
    s.tid = tid != e.end() && tid->is_number_integer() ? tid->get<int64_t>() : 0;
    t.spans.push_back(std::move(s));
  }
  return t;
}

TraceSet load_traces(const std::string& dir) {
  std::error_code ec;
  STRATA_CHECK(fs::is_directory(dir, ec), "run directory ", dir, " does not exist or is not a directory");
  static const std::regex re(R"(trace-rank(\d+)\.json)");
  std::vector<std::pair<int, std::string>> files;
  for (const auto& ent : fs::directory_iterator(dir, ec)) {
    std::string name = ent.path().filename().string();
    std::smatch m;
    if (std::regex_match(name, m, re)) files.emplace_back(std::stoi(m[1]), name);
  }
  STRATA_CHECK(!ec, "cannot list run directory ", dir, ": ", ec.message());
  std::sort(files.begin(), files.end());
  TraceSet set;
  set.dir = dir;
  for (auto& [rank, name] : files) {
    std::string text, error;
    ParsedJson parsed;
    if (!read_text_file((fs::path(dir) / name).string(), text, error) ||
        !parse_json_salvaging(text, parsed, error)) {
      set.problems.push_back(cat(name, ": ", error));
      continue;
    }
    try {
      RankTrace t = parse_trace(parsed.value, rank, name);
      t.truncated = parsed.truncated;
      if (t.truncated)
        set.problems.push_back(cat(name, ": cut off; used the ", t.events.size(), " events written before the cut"));
      set.ranks.push_back(std::move(t));
    } catch (const Error& e) {
      set.problems.push_back(cat(name, ": ", e.what()));
    }
  }
  return set;
}

json merge_traces(const TraceSet& set, const MergeOptions& opt) {
  json out = json::array();
  for (const RankTrace& t : set.ranks) {
    double shift_us = 0;
    if (opt.align_start) {
      double first = INFINITY;
      for (const json& e : t.events)
        if (e.contains("ts") && e["ts"].is_number()) first = std::min(first, e["ts"].get<double>());
      if (std::isfinite(first)) shift_us = first;
    }
    out.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", t.rank}, {"args", {{"name", cat("rank ", t.rank)}}}});
    out.push_back({{"name", "process_sort_index"}, {"ph", "M"}, {"pid", t.rank}, {"args", {{"sort_index", t.rank}}}});
    for (json e : t.events) {
      if (e.value("ph", "") == "M" && (e.value("name", "") == "process_name" || e.value("name", "") == "process_sort_index"))
        continue;  // replaced above
      e["pid"] = t.rank;  // one track group per rank, whatever pid the writer used
      if (shift_us != 0 && e.contains("ts") && e["ts"].is_number()) e["ts"] = e["ts"].get<double>() - shift_us;
      out.push_back(std::move(e));
    }
  }
  return {{"traceEvents", out}, {"displayTimeUnit", "ms"}};
}

}  // namespace strata::diag
