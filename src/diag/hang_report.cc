// Rendering a HangReport: plain words for people, JSON for scripts.
#include <algorithm>

#include "diag/hang_internal.h"
#include "nlohmann/json.hpp"

namespace strata::diag {

using namespace detail;
using nlohmann::json;

namespace {

json phase_json(const Phase& p) { return {{"step", p.step}, {"layer", p.layer}, {"kind", p.kind}}; }

std::string stuck_line(const StuckOp& s) {
  if (!s.calls.empty()) {  // members called it differently: each call, not one as if all had
    std::string calls;
    for (const StuckOp::Call& c : s.calls) calls += cat(calls.empty() ? "" : "; ", ranks_word(c.ranks), ": ", c.call);
    return cat(s.op, " #", s.seq, " of group \"", s.group, "\" (", ranks_word(s.group_ranks),
               "), called differently: ", calls);
  }
  std::string call = s.dtype.empty() ? "" : s.dtype + " ";
  call += cat("x ", s.count);
  if (s.p2p) call += cat(", between ranks ", s.group_ranks[0], " and ", s.group_ranks[1]);
  if (s.stages.size() == 2)
    call += cat(" (pipeline stages ", s.stages[0], " and ", s.stages[1], ")");
  return cat(s.op, " #", s.seq, " of group \"", s.group, "\" (", ranks_word(s.group_ranks), "): ", call,
             ", called from ", describe_phase(s.phase));
}

}  // namespace

std::string format_hang_report(const HangReport& r) {
  std::string out = cat("Run ", r.dir, ": ", r.world, " ranks; dumps from ",
                        r.dumped.empty() ? "no rank" : ranks_word(r.dumped));
  std::vector<int> absent = r.no_dump;
  for (int d : r.dead)
    if (!std::binary_search(r.dumped.begin(), r.dumped.end(), d)) absent.push_back(d);
  if (!absent.empty()) out += cat(" (none from ", ranks_word(absent), ")");
  out += "\n";
  if (!r.unusable.empty()) {
    out += "Files not (fully) used:\n";
    for (auto& u : r.unusable) out += "  " + u + "\n";
  }
  for (const StuckOp& s : r.stuck) {
    out += cat(s.root ? "Stuck on " : "Also stuck (waits on the above): ", stuck_line(s), "\n");
    std::string waited = s.waited_s > 0 ? cat(" (waited up to ", fmt_s(s.waited_s), ")") : std::string();
    std::vector<int> only_waiting;
    for (int w : s.waiting)
      if (!std::count(s.failed.begin(), s.failed.end(), w)) only_waiting.push_back(w);
    if (!only_waiting.empty()) out += cat("  waiting in it: ", ranks_word(only_waiting), waited, "\n");
    if (!s.failed.empty())
      out += cat("  reached it and failed there (timeout or peer error): ", ranks_word(s.failed),
                 only_waiting.empty() ? waited : "", "\n");
    if (!s.missing.empty()) out += cat("  never reached it: ", ranks_word(s.missing), "\n");
    if (!s.absent.empty()) {
      out += cat("  no usable dump from: ", ranks_word(s.absent));
      bool all_dead = std::all_of(s.absent.begin(), s.absent.end(),
                                  [&](int x) { return std::binary_search(r.dead.begin(), r.dead.end(), x); });
      out += all_dead ? " (dead)\n" : "\n";
    }
    if (!s.unknown.empty())
      out += cat("  unknown (their dumps are cut off before it): ", ranks_word(s.unknown), "\n");
  }
  for (const Mismatch& m : r.mismatches) {
    out += cat("Mismatch at #", m.seq, " of group \"", m.group, "\" (", m.what, " differs):\n");
    for (const auto& side : m.sides) out += cat("  ", ranks_word(side.ranks), ": ", side.call, "\n");
  }
  if (r.culprits.empty()) {
    out += r.stuck.empty() ? "No hang found: every recorded operation completed on every rank that dumped.\n"
                           : "No cause found.\n";
  } else {
    out += r.culprits.size() == 1 ? "Cause:\n" : "Causes:\n";
    for (const Culprit& c : r.culprits) out += "  " + c.text + "\n";
  }
  for (const RankFinding& f : r.ranks) out += "  " + f.text + "\n";
  bool straggler_is_cause = std::any_of(r.culprits.begin(), r.culprits.end(),
                                        [](auto& c) { return c.cause == Cause::straggler; });
  if (!r.stragglers.empty() && !straggler_is_cause) {
    out += "Stragglers:\n";
    for (auto& f : r.stragglers) out += "  " + f.text + "\n";
  }
  if (!r.phases.empty()) {
    out += "When they dumped:";
    for (auto& g : r.phases) out += cat(r.phases.size() > 1 ? "\n  " : " ", ranks_word(g.ranks), " in ", describe_phase(g.phase));
    out += "\n";
  }
  for (auto& n : r.notes) out += "Note: " + n + "\n";
  return out;
}

json hang_report_json(const HangReport& r) {
  json j = {{"run_dir", r.dir}, {"world", r.world}, {"dumped", r.dumped}, {"unusable", r.unusable},
            {"dead", r.dead}, {"no_dump", r.no_dump}, {"cause_found", r.cause_found}, {"notes", r.notes}};
  j["stuck"] = json::array();
  for (const StuckOp& s : r.stuck)
    j["stuck"].push_back({{"group", s.group}, {"group_ranks", s.group_ranks}, {"seq", s.seq}, {"op", s.op},
                          {"dtype", s.dtype}, {"count", s.count}, {"p2p", s.p2p},
                          {"peer", s.peer >= 0 ? json(s.peer) : json(nullptr)},
                          {"phase", phase_json(s.phase)}, {"waiting", s.waiting}, {"failed", s.failed},
                          {"missing", s.missing}, {"unknown", s.unknown}, {"absent", s.absent},
                          {"waited_s", s.waited_s}, {"root", s.root}});
  for (size_t i = 0; i < r.stuck.size(); ++i) {
    json calls = json::array();
    for (const StuckOp::Call& c : r.stuck[i].calls) calls.push_back({{"ranks", c.ranks}, {"call", c.call}});
    j["stuck"][i]["calls"] = calls;
  }
  j["mismatches"] = json::array();
  for (const Mismatch& m : r.mismatches) {
    json sides = json::array();
    for (auto& s : m.sides) sides.push_back({{"ranks", s.ranks}, {"call", s.call}, {"phase", phase_json(s.phase)}});
    j["mismatches"].push_back({{"group", m.group}, {"group_ranks", m.group_ranks}, {"seq", m.seq},
                               {"what", m.what}, {"sides", sides}, {"culprits", m.culprits}, {"how", m.how}});
  }
  j["culprits"] = json::array();
  for (const Culprit& c : r.culprits)
    j["culprits"].push_back({{"rank", c.rank >= 0 ? json(c.rank) : json(nullptr)},  // null: no rank (the op itself)
                             {"cause", cause_name(c.cause)}, {"text", c.text}});
  j["ranks"] = json::array();
  for (const RankFinding& f : r.ranks) j["ranks"].push_back({{"rank", f.rank}, {"text", f.text}});
  j["phases"] = json::array();
  for (auto& g : r.phases) j["phases"].push_back({{"ranks", g.ranks}, {"phase", phase_json(g.phase)}});
  j["stragglers"] = json::array();
  for (const StragglerFinding& f : r.stragglers)
    j["stragglers"].push_back({{"rank", f.rank}, {"last", f.last_count}, {"samples", f.samples},
                               {"median_late_s", f.median_late_s}, {"max_late_s", f.max_late_s},
                               {"text", f.text}});
  return j;
}

}  // namespace strata::diag
