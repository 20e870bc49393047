#include "diag/flight_dump.h"

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <filesystem>
#include <map>
#include <regex>

#include "core/error.h"
#include "diag/json_salvage.h"
#include "nlohmann/json.hpp"

namespace strata::diag {

namespace fs = std::filesystem;
using nlohmann::json;

std::string describe_phase(const Phase& p) {
  std::string s = p.kind.empty() ? "an unknown phase" : p.kind;
  if (p.layer >= 0) s += cat(" of layer ", p.layer);
  if (p.step >= 0) s += cat(" (step ", p.step, ")");
  return s;
}

namespace {

// Decimal digits to a rank in [0, kMaxWorld); false when out of range.
bool parse_rank(const std::string& digits, int& rank) {
  int64_t v = 0;
  auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), v);
  if (ec != std::errc() || end != digits.data() + digits.size() || v < 0 || v >= kMaxWorld) return false;
  rank = int(v);
  return true;
}

const json& field(const json& j, const char* name) {
  auto it = j.find(name);
  STRATA_CHECK(it != j.end(), "field '", name, "' is missing");
  return *it;
}

// An integer of JSON as int64 (an unsigned one beyond int64 is out of range, not wrapped).
int64_t as_int(const json& v, const char* name) {
  STRATA_CHECK(v.is_number_integer(), "field '", name, "' is not an integer");
  STRATA_CHECK(!v.is_number_unsigned() || v.get<uint64_t>() <= uint64_t(INT64_MAX), "field '", name,
               "' is ", v.get<uint64_t>(), ", out of range");
  return v.get<int64_t>();
}

int64_t int_field(const json& j, const char* name) { return as_int(field(j, name), name); }

// Timestamps of steps not reached may be absent, null or 0.
int64_t optional_int(const json& j, const char* name, int64_t fallback) {
  auto it = j.find(name);
  if (it == j.end() || it->is_null()) return fallback;
  return as_int(*it, name);
}

// A rank, layer or world size: checked against [lo, hi] before it is narrowed to int.
int bounded(int64_t v, const char* name, int64_t lo, int64_t hi) {
  STRATA_CHECK(v >= lo && v <= hi, "field '", name, "' is ", v, ", outside [", lo, ", ", hi, "]");
  return int(v);
}

std::string string_field(const json& j, const char* name) {
  const json& v = field(j, name);
  STRATA_CHECK(v.is_string(), "field '", name, "' is not a string");
  return v.get<std::string>();
}

std::string optional_string(const json& j, const char* name) {
  auto it = j.find(name);
  if (it == j.end() || it->is_null()) return {};
  STRATA_CHECK(it->is_string(), "field '", name, "' is not a string");
  return it->get<std::string>();
}

template <typename T>
std::vector<T> int_list(const json& j, const char* name) {
  auto it = j.find(name);
  if (it == j.end() || it->is_null()) return {};
  STRATA_CHECK(it->is_array(), "field '", name, "' is not a list");
  std::vector<T> out;
  for (const json& v : *it) {
    STRATA_CHECK(v.is_number_integer(), "field '", name, "' holds a non-integer");
    int64_t x = as_int(v, name);
    if constexpr (sizeof(T) < sizeof(int64_t)) x = bounded(x, name, INT32_MIN, INT32_MAX);  // ranks: see bound_ranks
    out.push_back(T(x));
  }
  return out;
}

Phase parse_phase(const json& j) {
  Phase p;
  auto it = j.find("phase");
  if (it == j.end() || it->is_null()) return p;
  STRATA_CHECK(it->is_object(), "field 'phase' is not an object");
  p.step = optional_int(*it, "step", -1);
  p.layer = bounded(optional_int(*it, "layer", -1), "layer", -1, INT32_MAX);
  std::string kind = optional_string(*it, "kind");
  if (!kind.empty()) p.kind = kind;
  return p;
}

OpState parse_state(const std::string& s) {
  if (std::optional<OpState> state = comm::parse_op_state(s)) return *state;
  fail("field 'state' is '", s, "', not scheduled, started, completed or failed");
}

FlightEntry parse_entry(const json& j) {
  STRATA_CHECK(j.is_object(), "entry is not an object");
  FlightEntry e;
  e.group = string_field(j, "group");
  e.group_ranks = int_list<int>(j, "group_ranks");
  e.seq = int_field(j, "seq");
  e.op = string_field(j, "op");
  e.dtype = optional_string(j, "dtype");
  e.count = optional_int(j, "count", 0);
  e.counts = int_list<int64_t>(j, "counts");
  e.peer = bounded(optional_int(j, "peer", -1), "peer", -1, kMaxWorld - 1);
  e.root = bounded(optional_int(j, "root", -1), "root", -1, kMaxWorld - 1);
  e.redop = optional_string(j, "redop");
  auto p2p = j.find("p2p");
  if (p2p != j.end() && !p2p->is_null()) {
    STRATA_CHECK(p2p->is_boolean(), "field 'p2p' is not true or false");
    e.p2p = p2p->get<bool>();
  } else {
    e.p2p = e.op == "send" || e.op == "recv";
  }
  e.tag = optional_int(j, "tag", 0);
  e.state = parse_state(string_field(j, "state"));
  e.t_scheduled_ns = optional_int(j, "t_scheduled_ns", 0);
  e.t_started_ns = optional_int(j, "t_started_ns", 0);
  e.t_completed_ns = optional_int(j, "t_completed_ns", 0);
  e.phase = parse_phase(j);
  return e;
}

// A peer-dead dump without "dead_peers" names them in its detail, in the words of the
// transports: "peer rank 3 (pid 812) died while ...", "rank 3 (pid 812) died; ...",
// "peer rank 3 left the group (its process exited)".
std::vector<int> peers_named_in(const std::string& detail) {
  static const std::regex dead(
      R"(\branks?\s+(\d+)(?:\s*\(pid\s+\d+\))?\s+(?:died|is dead|has died|exited|has exited|left|has left))",
      std::regex::icase);
  std::vector<int> out;
  for (auto it = std::sregex_iterator(detail.begin(), detail.end(), dead); it != std::sregex_iterator(); ++it) {
    int r = -1;
    if (parse_rank((*it)[1].str(), r)) out.push_back(r);  // else: no rank of any job; ignored
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

}  // namespace

FlightDump parse_flight_dump(const json& j, const std::string& file, bool truncated, int file_rank) {
  STRATA_CHECK(j.is_object(), "not a JSON object");
  FlightDump d;
  d.file = file;
  d.truncated = truncated;
  bool cut_rank = truncated && !j.contains("rank") && file_rank >= 0;
  bool cut_world = truncated && !j.contains("world");
  d.rank = cut_rank ? file_rank : bounded(int_field(j, "rank"), "rank", 0, kMaxWorld - 1);
  d.world = cut_world ? 0 : bounded(int_field(j, "world"), "world", 1, kMaxWorld);
  STRATA_CHECK(cut_world || d.rank < d.world, "rank ", d.rank, " does not fit world size ", d.world);
  d.capacity = optional_int(j, "recorder_capacity", 0);
  d.pid = optional_int(j, "pid", 0);
  d.host = optional_string(j, "host");
  d.reason = optional_string(j, "reason");
  d.detail = optional_string(j, "detail");
  d.time_ns = optional_int(j, "time_ns", 0);
  d.phase = parse_phase(j);
  d.dead_peers = int_list<int>(j, "dead_peers");
  if (d.dead_peers.empty() && d.reason == "peer-dead") d.dead_peers = peers_named_in(d.detail);
  std::erase(d.dead_peers, d.rank);
  const json& entries = field(j, "entries");
  STRATA_CHECK(entries.is_array(), "field 'entries' is not a list");
  for (const json& e : entries) {
    try {
      d.entries.push_back(parse_entry(e));
    } catch (const Error&) {
      ++d.dropped_entries;  // a half-written entry at the cut, or a malformed one
    }
  }
  return d;
}

namespace {

// "flight-rank12.json" -> 12 (final = true); "flight-rank12.json.tmp" -> 12 (final = false).
bool dump_file_rank(const std::string& name, int& rank, bool& final_file) {
  static const std::regex re(R"(flight-rank(\d+)\.json(\..+)?)");
  std::smatch m;
  if (!std::regex_match(name, m, re)) return false;
  rank = -1;  // a number no job has: listed as a problem by the caller
  parse_rank(m[1].str(), rank);
  final_file = !m[2].matched;
  return true;
}

// The world size most dumps state; on a tie, the smallest that holds every dump's rank. A
// dump that claims a larger world alone cannot make the others' ranks or lists grow.
int agreed_world(const std::map<int, FlightDump>& by_rank) {
  std::map<int, int> votes;  // stated world -> dumps stating it
  int top_rank = -1;
  for (auto& [rank, d] : by_rank) {
    if (d.world > 0) ++votes[d.world];
    top_rank = std::max(top_rank, rank);
  }
  int best = 0, best_votes = 0;
  bool best_fits = false;
  for (auto& [w, n] : votes) {  // ascending w: the first of equals wins, unless it does not fit
    bool fits = w > top_rank;
    if (n > best_votes || (n == best_votes && fits && !best_fits)) best = w, best_votes = n, best_fits = fits;
  }
  return best > 0 ? best : top_rank + 1;
}

// Drops what names a rank outside the agreed world: dead peers, and entries whose group,
// peer or root does not fit it. Each kind of drop is listed once.
void bound_ranks(FlightDump& d, std::vector<std::string>& problems) {
  const int w = d.world;
  for (int p : d.dead_peers)
    if (p < 0 || p >= w)
      problems.push_back(cat(d.file, ": names rank ", p, " as a dead peer, outside world size ", w, "; ignored"));
  std::erase_if(d.dead_peers, [&](int p) { return p < 0 || p >= w; });
  size_t before = d.entries.size();
  std::erase_if(d.entries, [&](const FlightEntry& e) {
    int size = e.group_ranks.empty() ? w : int(e.group_ranks.size());
    bool bad = size > w || e.peer >= size || e.root >= size;
    for (int r : e.group_ranks) bad = bad || r < 0 || r >= w;
    return bad;
  });
  if (d.entries.size() != before)
    problems.push_back(cat(d.file, ": ", before - d.entries.size(), " entries name ranks outside world size ",
                           w, "; skipped"));
}

}  // namespace

DumpSet load_flight_dumps(const std::string& dir) {
  std::error_code ec;
  STRATA_CHECK(fs::is_directory(dir, ec), "run directory ", dir, " does not exist or is not a directory");
  DumpSet set;
  set.dir = dir;
  // rank -> candidate files, finished ones first.
  std::map<int, std::vector<std::pair<bool, std::string>>> files;
  for (const auto& ent : fs::directory_iterator(dir, ec)) {
    int rank;
    bool final_file;
    std::string name = ent.path().filename().string();
    if (dump_file_rank(name, rank, final_file)) files[rank].emplace_back(final_file, name);
  }
  STRATA_CHECK(!ec, "cannot list run directory ", dir, ": ", ec.message());
  std::map<int, FlightDump> by_rank;
  for (auto& [file_rank, names] : files) {
    std::sort(names.begin(), names.end(), [](auto& a, auto& b) {
      return a.first != b.first ? a.first : a.second < b.second;
    });
    for (auto& [final_file, name] : names) {
      if (file_rank < 0) {
        set.problems.push_back(cat(name, ": the rank in the file name is beyond any job (at most ",
                                   kMaxWorld - 1, "); ignored"));
        continue;
      }
      std::string text, error;
      ParsedJson parsed;
      if (!read_text_file((fs::path(dir) / name).string(), text, error) ||
          !parse_json_salvaging(text, parsed, error)) {
        set.problems.push_back(cat(name, ": ", error));
        continue;
      }
      FlightDump d;
      try {
        d = parse_flight_dump(parsed.value, name, parsed.truncated, file_rank);
      } catch (const Error& e) {
        set.problems.push_back(cat(name, ": ", parsed.truncated ? "cut off, and " : "", e.what()));
        continue;
      }
      if (d.rank != file_rank)
        set.problems.push_back(cat(name, ": says it is rank ", d.rank, "; used as rank ", d.rank));
      if (by_rank.count(d.rank)) {
        set.problems.push_back(cat(name, ": a second dump of rank ", d.rank, "; ignored"));
        continue;
      }
      if (d.truncated)
        set.problems.push_back(cat(name, ": cut off; used the ", d.entries.size(),
                                   " entries written before the cut"));
      else if (d.dropped_entries > 0)
        set.problems.push_back(cat(name, ": ", d.dropped_entries, " malformed entries skipped"));
      if (!final_file)
        set.problems.push_back(cat(name, ": an unfinished dump; used because no finished file exists"));
      by_rank.emplace(d.rank, std::move(d));
      break;
    }
  }
  set.world = agreed_world(by_rank);
  for (auto& [rank, d] : by_rank) {
    if (d.world == 0) {
      d.world = set.world;  // cut off before "world"
    } else if (d.world != set.world) {
      set.problems.push_back(cat(d.file, ": says world size ", d.world, ", others say ", set.world,
                                 "; read as ", set.world));
      d.world = set.world;
    }
    if (d.rank >= set.world) {
      set.problems.push_back(cat(d.file, ": rank ", d.rank, " does not fit world size ", set.world));
      continue;
    }
    bound_ranks(d, set.problems);
    set.dumps.push_back(std::move(d));
  }
  return set;
}

}  // namespace strata::diag
