// From facts to culprits: who holds the stuck operation up, and why, in plain sentences.
// Order of evidence: a mismatch (different op/count/dtype/call site at one seq) explains a
// hang by itself; then, for each root stuck operation, every member that never reached it
// is dead, silent (no dump), busy outside communication, past it (skipped), or blocked in
// another group; ranks blocked in point-to-point operations around a cycle with no send
// facing a recv are an order-of-operations deadlock; when all members reached it the
// transport itself is stalled. Stragglers are named as causes only when nothing else is.
#include <algorithm>

#include "core/stats.h"
#include "diag/hang_internal.h"

namespace strata::diag::detail {

namespace {

std::string stuck_label(const StuckOp& s) {
  if (s.p2p) return cat(s.op, " #", s.seq, " of group \"", s.group, "\" (point-to-point)");
  return cat(s.op, " #", s.seq, " of group \"", s.group, "\"");
}

// "ranks 0, 1 report it as a dead peer" / "rank 0 reports it as a dead peer"
std::string reporters(const Analysis& a, int dead) {
  const std::vector<int>& by = a.dead_reporters.at(dead);
  return cat(ranks_word(by), by.size() == 1 ? " reports" : " report", " it as a dead peer");
}

bool has_culprit(const HangReport& r, int rank) {
  return std::any_of(r.culprits.begin(), r.culprits.end(), [&](auto& c) { return c.rank == rank; });
}

std::string last_operation(const FlightDump& d) {
  if (d.entries.empty()) return "it recorded no operation";
  const FlightEntry& e = d.entries.back();
  std::string s = cat("its last operation was ", op_label(e), " (", op_state_name(e.state));
  int64_t t = e.done() ? e.t_completed_ns : e.t_scheduled_ns;
  if (t > 0 && d.time_ns >= t) s += cat(", ", fmt_s(seconds(d.time_ns - t)), " before its dump");
  return s + ")";
}

void explain_mismatch(HangReport& r, const Mismatch& m) {
  std::string at = cat("#", m.seq, " of group \"", m.group, "\"");
  if (m.culprits.empty()) {
    std::string sides;
    for (auto& s : m.sides) sides += cat(sides.empty() ? "" : "; ", ranks_word(s.ranks), " called ", s.call);
    r.culprits.push_back({-1, Cause::mismatch,
                          cat("ranks disagree at ", at, " (", m.what, "): ", sides,
                              ". No majority and no earlier step to compare, so neither side can be named")});
    return;
  }
  // The reference side: the largest one holding no culprit.
  const Mismatch::Side* reference = nullptr;
  for (const Mismatch::Side& side : m.sides)
    if (!reference && !std::includes(m.culprits.begin(), m.culprits.end(), side.ranks.begin(), side.ranks.end()))
      reference = &side;
  for (const Mismatch::Side& side : m.sides) {
    if (!std::includes(m.culprits.begin(), m.culprits.end(), side.ranks.begin(), side.ranks.end()))
      continue;
    bool skipped = m.left_out || m.what == "call site" || (reference && phase_after(side.phase, reference->phase));
    std::string others;
    for (const Mismatch::Side& o : m.sides)
      if (&o != &side && !std::includes(m.culprits.begin(), m.culprits.end(), o.ranks.begin(), o.ranks.end()))
        others += cat(others.empty() ? "" : "; ", ranks_word(o.ranks), " called ", o.call);
    std::string why;
    if (m.how == "history")
      why = cat("; its calls in step ", side.phase.step,
                m.left_out ? " are its calls of the step before with that one left out"
                           : " differ from its calls in the step before");
    else if (m.how == "step")
      why = cat("; its call comes from step ", side.phase.step, ", a step the others have not reached");
    for (int rank : side.ranks) {
      std::string text = skipped ? cat("rank ", rank, " skipped a collective: ")
                                 : cat("rank ", rank, " called a different ", m.what, ": ");
      text += cat("as ", at, " it called ", side.call, ", where ", others, why);
      r.culprits.push_back({rank, skipped ? Cause::skipped : Cause::mismatch, text});
    }
  }
}

// A member of stuck operation `s` with no usable dump: it did not finish without it.
void explain_absent(HangReport& r, const Analysis& a, const StuckOp& s, int m) {
  if (has_culprit(r, m)) return;
  std::string held = cat(stuck_label(s), " did not finish without it");
  if (a.dead.count(m))
    r.culprits.push_back({m, Cause::dead, cat("rank ", m, " died: ", reporters(a, m), "; ", held)});
  else
    r.culprits.push_back({m, Cause::no_dump, cat("rank ", m, " left no usable dump and ", held,
                                                 ": it may have died, or hung where its watchdog could not write")});
}

// A member whose dump shows it never reached stuck operation `s`. When a rank died, the
// others were stopped wherever they were: a rank still computing is then not a culprit.
void explain_missing(HangReport& r, const Analysis& a, const StuckOp& s, int m) {
  if (has_culprit(r, m)) return;
  std::string never = cat(" never reached ", stuck_label(s));
  const FlightDump& d = *a.dump.at(m);
  if (a.dead.count(m)) {
    r.culprits.push_back({m, Cause::dead, cat("rank ", m, " died: ", reporters(a, m), "; it", never,
                                              "; its dump says ", d.reason, ": ", d.detail)});
    return;
  }
  auto bit = a.blocking.find(m);
  const FlightEntry* blocked = bit != a.blocking.end() && !is_op(*bit->second, s) ? bit->second : nullptr;
  if (blocked && a.dead.empty() && past_call_site(d, blocked, s)) {
    const FlightEntry& e = *blocked;
    r.culprits.push_back({m, Cause::skipped,
                          cat("rank ", m, never, " (the others called it from ", describe_phase(s.phase),
                              ") and went on to ", describe_phase(e.phase), ", where it is blocked in ",
                              op_label(e), " (", call_text(e), "): it skipped that collective")});
    return;
  }
  if (blocked) {
    const FlightEntry& e = *blocked;
    r.ranks.push_back({m, cat("rank ", m, " is blocked in ", op_label(e), " (", call_text(e), " from ",
                              describe_phase(e.phase), ") and", never)});
    return;
  }
  if (!a.dead.empty()) {
    // One line per rank: it is missing from every operation the death left stuck.
    std::string text =
        cat("rank ", m, " was in ", describe_phase(d.phase), " when the job stopped; ", last_operation(d));
    if (std::none_of(r.ranks.begin(), r.ranks.end(), [&](auto& f) { return f.text == text; }))
      r.ranks.push_back({m, std::move(text)});
    return;
  }
  // Past the call site means skipped, for collectives; pipeline schedules interleave
  // forward and backward, so for point-to-point the order of phases says nothing.
  if (past_call_site(d, nullptr, s)) {
    r.culprits.push_back({m, Cause::skipped,
                          cat("rank ", m, never, " (the others called it from ", describe_phase(s.phase),
                              ") and is already in ", describe_phase(d.phase),
                              ": it skipped that collective; ", last_operation(d))});
    return;
  }
  bool elsewhere = d.phase.kind == "checkpoint save" || d.phase.kind == "data loading" || d.phase.kind == "eval";
  r.culprits.push_back({m, Cause::outside_comm,
                        cat("rank ", m, elsewhere ? " is in " : " is still in ", describe_phase(d.phase),
                            " and", never, "; ", last_operation(d))});
}

// Root stuck operations are those not explained by their missing members waiting elsewhere.
void mark_roots(HangReport& r, const Analysis& a) {
  for (StuckOp& s : r.stuck) {
    bool waits_elsewhere = false, terminal = s.missing.empty() || !s.absent.empty();
    for (int m : s.missing) {
      auto b = a.blocking.find(m);
      bool elsewhere = a.dump.count(m) && !a.dead.count(m) && b != a.blocking.end() && !is_op(*b->second, s);
      // A member blocked elsewhere from past the call site skipped the call: its wait is a
      // consequence, and this operation is where the job broke.
      if (elsewhere && a.dead.empty() && past_call_site(*a.dump.at(m), b->second, s)) elsewhere = false;
      (elsewhere ? waits_elsewhere : terminal) = true;
    }
    s.root = terminal || !waits_elsewhere;
  }
  if (!r.stuck.empty() && std::none_of(r.stuck.begin(), r.stuck.end(), [](auto& s) { return s.root; })) {
    for (StuckOp& s : r.stuck) s.root = true;
    r.notes.push_back("ranks wait on each other across groups: some ranks called collectives of "
                      "different groups in a different order (a cross-group deadlock)");
  }
  std::stable_sort(r.stuck.begin(), r.stuck.end(), [](auto& x, auto& y) {
    return x.root != y.root ? x.root : x.waiting.size() > y.waiting.size();
  });
}

// Ranks each blocked in a point-to-point operation with the next as its peer, the last
// back to the first, where no two neighbours hold a matching send/recv pair: no transport
// can finish any of them, so the program's order of operations is at fault. Returns the
// ranks of every such cycle and adds one culprit per cycle.
std::set<int> explain_order_deadlocks(HangReport& r, const Analysis& a) {
  auto p2p_of = [&](int rank) -> const FlightEntry* {
    auto it = a.blocking.find(rank);
    return it != a.blocking.end() && it->second->is_p2p() ? it->second : nullptr;
  };
  std::set<int> in_cycle;
  for (auto& [start, first] : a.blocking) {
    if (!first->is_p2p() || in_cycle.count(start)) continue;
    std::vector<int> path{start};
    for (const FlightEntry* e = first; e;) {
      int next = peer_world_rank(*e);
      auto at = std::find(path.begin(), path.end(), next);
      if (at != path.end()) {
        // Only the cycle through `start` is reported from here; others get their own start.
        if (at != path.begin()) path.clear();
        break;
      }
      path.push_back(next);
      e = p2p_of(next);
      if (!e) path.clear();
    }
    if (path.size() < 2) continue;
    bool matched = false;  // a send facing a recv is a pair the transport should finish
    for (size_t i = 0; i < path.size(); ++i) {
      const FlightEntry& x = *p2p_of(path[i]);
      const FlightEntry& y = *p2p_of(path[(i + 1) % path.size()]);
      if (peer_world_rank(y) == path[i] && x.op != y.op) matched = true;
    }
    if (matched) continue;
    std::string chain, ops;
    for (int k : path) {
      const FlightEntry& e = *p2p_of(k);
      chain += cat(k, " -> ");
      ops += cat(ops.empty() ? "" : "; ", "rank ", k, " is in ", op_label(e), " (", call_text(e), " from ",
                 describe_phase(e.phase), ")");
    }
    chain += cat(path.front());
    r.culprits.push_back({-1, Cause::order_deadlock,
                          cat("ranks ", chain, " wait on each other in point-to-point operations with no "
                              "matching receive (a deadlock in the order of operations): ", ops)});
    in_cycle.insert(path.begin(), path.end());
  }
  return in_cycle;
}

void find_stragglers(HangReport& r, const Analysis& a, const StragglerRule& rule) {
  struct Tally {
    int samples = 0, last = 0;
    std::vector<double> late;
    double max_late = 0;
    const FlightEntry* worst = nullptr;
  };
  std::map<int, Tally> tally;
  for (auto& [key, g] : a.groups) {
    std::set<int64_t> seqs;
    for (auto& [rk, m] : g.by_rank)
      for (auto& [seq, e] : m) seqs.insert(seq);
    for (int64_t k : seqs) {
      std::vector<std::pair<int, double>> waits;
      for (auto& [rk, m] : g.by_rank) {
        auto it = m.find(k);
        if (it == m.end() || !it->second->done()) break;
        const FlightEntry& e = *it->second;
        int64_t t0 = e.t_started_ns ? e.t_started_ns : e.t_scheduled_ns;
        if (t0 <= 0 || e.t_completed_ns < t0) break;
        waits.emplace_back(rk, seconds(e.t_completed_ns - t0));
      }
      if (waits.size() < 2 || waits.size() != g.by_rank.size()) continue;
      // The last to arrive waited least; a tie names nobody.
      std::sort(waits.begin(), waits.end(), [](auto& x, auto& y) { return x.second < y.second; });
      int last = waits[0].second < waits[1].second ? waits[0].first : -1;
      for (auto& [rk, w] : waits) {
        std::vector<double> others;
        for (auto& [o, wo] : waits)
          if (o != rk) others.push_back(wo);
        const double late = strata::median(others) - w;
        Tally& t = tally[rk];
        ++t.samples;
        t.last += rk == last;
        t.late.push_back(late);
        if (late > t.max_late) t.max_late = late, t.worst = g.by_rank.at(rk).at(k);
      }
    }
  }
  for (auto& [rk, t] : tally) {
    const double median = strata::median(t.late);
    bool consistent = t.samples >= rule.min_samples && t.last >= rule.min_last_share * t.samples &&
                      median >= rule.min_median_late_s;
    bool once = t.max_late >= rule.single_late_s;
    if (!consistent && !once) continue;
    StragglerFinding f{rk, t.last, t.samples, median, t.max_late, {}};
    f.text = consistent ? cat("rank ", rk, " arrived last at ", t.last, " of ", t.samples,
                              " completed collectives, ", fmt_s(median), " after the others on median")
                        : cat("rank ", rk, " arrived ", fmt_s(t.max_late), " after the others at ",
                              op_label(*t.worst), " (called from ", describe_phase(t.worst->phase), ")");
    if (consistent && once) f.text += cat(" and once ", fmt_s(t.max_late), " at ", op_label(*t.worst));
    r.stragglers.push_back(std::move(f));
  }
}

// A dead rank explains the waits of the survivors: operations whose members all reached
// them stall when a member's other groups lose a peer, and pipeline stages stopped with
// receives posted ahead on both channels face each other in two receives. Its death leads
// the culprits, and those stalls and cycles are listed under it instead of as causes.
void fold_under_deaths(HangReport& r) {
  if (r.dead.empty()) return;
  std::vector<Culprit> kept;
  for (Culprit& c : r.culprits) {
    if (c.cause == Cause::comm_stalled || c.cause == Cause::order_deadlock)
      r.notes.push_back(cat("after the death of ", ranks_word(r.dead), ": ", c.text));
    else
      kept.push_back(std::move(c));
  }
  std::stable_partition(kept.begin(), kept.end(), [](auto& c) { return c.cause == Cause::dead; });
  r.culprits = std::move(kept);
}

}  // namespace

void explain_hang(HangReport& r, const Analysis& a, const StragglerRule& rule) {
  for (const Mismatch& m : r.mismatches) explain_mismatch(r, m);
  mark_roots(r, a);
  const std::set<int> deadlocked = explain_order_deadlocks(r, a);
  for (const StuckOp& s : r.stuck) {
    if (!s.root) continue;
    if (s.p2p && std::all_of(s.waiting.begin(), s.waiting.end(), [&](int k) { return deadlocked.count(k); }) &&
        std::all_of(s.missing.begin(), s.missing.end(), [&](int k) { return deadlocked.count(k); }))
      continue;  // named with its cycle
    bool explained_by_mismatch = std::any_of(r.mismatches.begin(), r.mismatches.end(), [&](auto& m) {
      return m.group == s.group && m.group_ranks == s.group_ranks && m.seq <= s.seq;
    });
    for (int m : s.absent) explain_absent(r, a, s, m);
    for (int m : s.missing) explain_missing(r, a, s, m);
    bool all_present = s.missing.empty() && s.absent.empty();
    if (all_present && !s.unknown.empty() && !explained_by_mismatch)
      r.notes.push_back(cat(ranks_word(s.unknown), " may be holding up ", stuck_label(s),
                            ": their dumps are cut off before it, so the doctor cannot tell"));
    if (all_present && s.unknown.empty() && !explained_by_mismatch)
      r.culprits.push_back({-1, Cause::comm_stalled,
                            cat("every member (", ranks_word(s.waiting), ") reached ", stuck_label(s),
                                " and it has not finished after ", fmt_s(s.waited_s),
                                ": the transport or a link is stuck (check with `strata doctor net`)")});
  }
  for (int d : r.dead)
    if (!has_culprit(r, d))
      r.culprits.push_back({d, Cause::dead, cat("rank ", d, " died: ", reporters(a, d))});
  fold_under_deaths(r);
  find_stragglers(r, a, rule);
  if (r.culprits.empty())
    for (const StragglerFinding& f : r.stragglers) r.culprits.push_back({f.rank, Cause::straggler, f.text});
  std::map<std::string, std::vector<int>> errors;  // detail -> ranks reporting it
  for (const FlightDump& d : a.set.dumps)
    if (d.reason == "error" && !d.detail.empty()) errors[d.detail].push_back(d.rank);
  for (auto& [detail, ranks] : errors)
    r.notes.push_back(cat(ranks_word(ranks), " reported an error: ", detail));
  r.cause_found = !r.culprits.empty();
}

}  // namespace strata::diag::detail
