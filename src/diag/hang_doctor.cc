// Hang analysis over parsed flight-recorder dumps (terms and cost in hang_doctor.h).
#include "diag/hang_doctor.h"

#include <algorithm>
#include <map>
#include <set>

#include "core/error.h"
#include "diag/hang_internal.h"

namespace strata::diag {

using namespace detail;

const char* cause_name(Cause c) {
  switch (c) {
    case Cause::mismatch: return "mismatch";
    case Cause::skipped: return "skipped";
    case Cause::dead: return "dead";
    case Cause::no_dump: return "no-dump";
    case Cause::outside_comm: return "outside-comm";
    case Cause::waiting_elsewhere: return "waiting-elsewhere";
    case Cause::comm_stalled: return "comm-stalled";
    case Cause::order_deadlock: return "order-deadlock";
    case Cause::straggler: return "straggler";
  }
  return "?";
}

std::string format_ranks(std::vector<int> ranks) {
  std::sort(ranks.begin(), ranks.end());
  ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
  std::string s;
  for (size_t i = 0; i < ranks.size();) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    if (!s.empty()) s += ", ";
    s += j == i ? cat(ranks[i]) : j == i + 1 ? cat(ranks[i], ", ", ranks[j]) : cat(ranks[i], "-", ranks[j]);
    i = j + 1;
  }
  return s;
}

namespace {

std::string group_key(const FlightEntry& e) {
  std::string k = e.group + "|";
  for (int r : e.group_ranks) k += cat(r, ",");
  return k;
}

void index_dumps(Analysis& a) {
  for (const FlightDump& d : a.set.dumps) {
    a.dump[d.rank] = &d;
    for (const FlightEntry& e : d.entries) {
      if (!a.blocking.count(d.rank) && !e.done()) a.blocking[d.rank] = &e;
      if (e.is_p2p()) continue;
      Group& g = a.groups[group_key(e)];
      g.name = e.group;
      if (g.ranks.empty()) {
        g.ranks = e.group_ranks;
        if (g.ranks.empty())
          for (int r = 0; r < a.set.world; ++r) g.ranks.push_back(r);
      }
      g.by_rank[d.rank][e.seq] = &e;
    }
    for (int p : d.dead_peers) {
      a.dead.insert(p);
      a.dead_reporters[p].push_back(d.rank);
    }
  }
  // A rank that wrote its own dump was alive when the failure struck: a peer that found its
  // pid gone later (it exited after dumping, stopped by the launcher) saw an effect, not a cause.
  for (auto it = a.dead.begin(); it != a.dead.end();) {
    if (a.dump.count(*it)) {
      a.dead_reporters.erase(*it);
      it = a.dead.erase(it);
    } else {
      ++it;
    }
  }
}

// Rank r's calls in group g during `step`, up to seq `upto`, as (signature, site) pairs.
std::vector<std::string> calls_in_step(const Group& g, int r, int64_t step, int64_t upto) {
  std::vector<std::string> out;
  for (auto& [seq, e] : g.by_rank.at(r))
    if (seq <= upto && e->phase.step == step) out.push_back(signature(*e) + "@" + site(*e, false));
  return out;
}

// +1: rank r's calls in the step of seq k differ from its calls in the step before;
// 0: they match; -1: no evidence (no step numbers, or the earlier step is not recorded).
int deviates_from_history(const Group& g, int r, int64_t k, bool complete_history) {
  const auto& mine = g.by_rank.at(r);
  const FlightEntry* e = mine.at(k);
  int64_t s = e->phase.step;
  if (s < 1) return -1;
  const FlightEntry* oldest = mine.begin()->second;
  if (oldest->phase.step >= s - 1 && oldest->seq != 0 && !complete_history) return -1;  // s-1 may be evicted
  auto now = calls_in_step(g, r, s, k);
  auto before = calls_in_step(g, r, s - 1, INT64_MAX);
  if (now.size() > before.size()) return 1;
  return std::equal(now.begin(), now.end(), before.begin()) ? 0 : 1;
}

// Rank r's calls in the step of seq k are its calls in the step before with exactly one
// left out, and that one is `other` (another side's call at k, as signature@site): r
// skipped it.
bool left_out_in_step(const Group& g, int r, int64_t k, const std::string& other) {
  const int64_t s = g.by_rank.at(r).at(k)->phase.step;
  const auto now = calls_in_step(g, r, s, k), before = calls_in_step(g, r, s - 1, INT64_MAX);
  if (now.size() >= before.size()) return false;
  size_t i = 0;
  while (i < now.size() && now[i] == before[i]) ++i;
  return before[i] == other && std::equal(now.begin() + long(i), now.end(), before.begin() + long(i) + 1);
}

// What two calls at one seq disagree on, most telling first.
constexpr const char* kFields[] = {"op", "dtype", "reduce op", "root", "count", "call site"};
int first_difference(const FlightEntry& a, const FlightEntry& b) {
  if (a.op != b.op) return 0;
  if (a.dtype != b.dtype) return 1;
  if (a.redop != b.redop) return 2;
  if (a.root != b.root) return 3;
  if (count_key(a) != count_key(b)) return 4;
  return 5;
}

// The minority side; with no strict majority, the ranks whose calls deviate from their
// own previous step (when some other rank's calls provably do not).
void pick_culprits(const Analysis& a, const Group& g, int present, Mismatch& mm) {
  if (2 * mm.sides[0].ranks.size() > size_t(present)) {
    for (size_t i = 1; i < mm.sides.size(); ++i)
      mm.culprits.insert(mm.culprits.end(), mm.sides[i].ranks.begin(), mm.sides[i].ranks.end());
    mm.how = "majority";
    return;
  }
  std::vector<int> deviating;
  bool some_consistent = false;
  for (auto& [r, m] : g.by_rank) {
    if (!m.count(mm.seq)) continue;
    const FlightDump* dump = a.dump.at(r);
    bool complete = dump->capacity > 0 && int64_t(dump->entries.size()) < dump->capacity;
    int d = deviates_from_history(g, r, mm.seq, complete);
    if (d == 1) deviating.push_back(r);
    if (d == 0) some_consistent = true;
  }
  if (!deviating.empty() && some_consistent) {
    mm.culprits = deviating;
    mm.how = "history";
    // Left out: every culprit's step is its step before less the call the others made here.
    const Mismatch::Side* ref = nullptr;
    for (const Mismatch::Side& side : mm.sides)
      if (!ref && std::find(deviating.begin(), deviating.end(), side.ranks[0]) == deviating.end()) ref = &side;
    if (ref) {
      const FlightEntry& e = *g.by_rank.at(ref->ranks[0]).at(mm.seq);
      const std::string other = signature(e) + "@" + site(e, false);
      mm.left_out = std::all_of(deviating.begin(), deviating.end(),
                                [&](int r) { return left_out_in_step(g, r, mm.seq, other); });
    }
    return;
  }
  // Every rank counts its group's calls from 0 in the same order, so at one seq a side
  // calling from a later step than all the others has passed a call it never made.
  const Mismatch::Side* latest = nullptr;
  for (const Mismatch::Side& side : mm.sides)
    if (!latest || side.phase.step > latest->phase.step) latest = &side;
  bool strictly_later = latest && std::all_of(mm.sides.begin(), mm.sides.end(), [&](auto& o) {
    return &o == latest || (o.phase.step >= 0 && o.phase.step < latest->phase.step);
  });
  if (strictly_later) {
    mm.culprits = latest->ranks;
    mm.how = "step";
  }
}

std::optional<Mismatch> find_mismatch(const Analysis& a, const Group& g) {
  std::set<int64_t> seqs;
  for (auto& [r, m] : g.by_rank)
    for (auto& [seq, e] : m) seqs.insert(seq);
  for (int64_t k : seqs) {
    std::map<std::string, std::vector<int>> variants;  // signature@site -> ranks
    std::map<std::string, const FlightEntry*> example;
    for (auto& [r, m] : g.by_rank) {
      auto it = m.find(k);
      if (it == m.end()) continue;
      std::string key = signature(*it->second) + "@" + site(*it->second, true);
      variants[key].push_back(r);
      example[key] = it->second;
    }
    if (variants.size() < 2) continue;
    Mismatch mm;
    mm.group = g.name;
    mm.group_ranks = g.ranks;
    mm.seq = k;
    const FlightEntry* first = example.begin()->second;
    int worst = 5;  // index into kFields: the most telling field that differs
    for (auto& [key, e] : example) worst = std::min(worst, first_difference(*first, *e));
    mm.what = kFields[worst];
    int present = 0;
    for (auto& [key, ranks] : variants) present += int(ranks.size());
    for (auto& [key, ranks] : variants) {
      const FlightEntry* e = example[key];
      std::string call = call_text(*e);
      if (mm.what == "reduce op") call += " (" + e->redop + ")";
      mm.sides.push_back({ranks, call + " from " + describe_phase(e->phase), e->phase});
    }
    std::stable_sort(mm.sides.begin(), mm.sides.end(),
                     [](auto& x, auto& y) { return x.ranks.size() > y.ranks.size(); });
    pick_culprits(a, g, present, mm);
    std::sort(mm.culprits.begin(), mm.culprits.end());
    return mm;
  }
  return std::nullopt;
}

// The lowest unfinished seq of each group (collectives).
std::vector<StuckOp> find_stuck_collectives(const Analysis& a) {
  std::vector<StuckOp> out;
  for (auto& [key, g] : a.groups) {
    int64_t k = INT64_MAX;
    for (auto& [r, m] : g.by_rank)
      for (auto& [seq, e] : m)
        if (!e->done()) k = std::min(k, seq);
    if (k == INT64_MAX) continue;
    StuckOp s;
    s.group = g.name;
    s.group_ranks = g.ranks;
    s.seq = k;
    std::map<std::string, std::pair<std::vector<int>, const FlightEntry*>> calls;  // call -> (ranks, example)
    for (int r : g.ranks) {
      auto dit = a.dump.find(r);
      auto mit = g.by_rank.find(r);
      if (dit == a.dump.end()) {
        s.absent.push_back(r);
        continue;
      }
      if (mit == g.by_rank.end()) {  // no entry of this group at all
        (dit->second->truncated ? s.unknown : s.missing).push_back(r);
        continue;
      }
      auto it = mit->second.find(k);
      if (it != mit->second.end()) {
        if (it->second->done()) continue;
        s.waiting.push_back(r);
        if (it->second->state == OpState::failed) s.failed.push_back(r);
        auto& c = calls[signature(*it->second) + "@" + site(*it->second, true)];
        if (c.first.empty()) c.second = it->second;
        c.first.push_back(r);
        int64_t t0 = it->second->t_started_ns ? it->second->t_started_ns : it->second->t_scheduled_ns;
        if (t0 > 0 && dit->second->time_ns > t0)
          s.waited_s = std::max(s.waited_s, seconds(dit->second->time_ns - t0));
      } else if (mit->second.rbegin()->first < k) {
        (dit->second->truncated ? s.unknown : s.missing).push_back(r);
      }  // else: seq k was evicted from r's ring, so r passed it long ago
    }
    // Describe it as most of its waiting members called it.
    const FlightEntry* rep = nullptr;
    size_t most = 0;
    for (auto& [key, c] : calls)
      if (c.first.size() > most) most = c.first.size(), rep = c.second;
    if (calls.size() > 1) {
      for (auto& [key, c] : calls)
        s.calls.push_back({c.first, call_text(*c.second) + " from " + describe_phase(c.second->phase)});
      std::sort(s.calls.begin(), s.calls.end(), [](auto& x, auto& y) { return x.ranks < y.ranks; });
    }
    if (rep) {
      s.op = rep->op;
      s.dtype = rep->dtype;
      s.count = rep->count;
      s.phase = rep->phase;
    }
    out.push_back(std::move(s));
  }
  return out;
}

// Point-to-point operations that ranks are blocked in: one StuckOp per blocked pair.
std::vector<StuckOp> find_stuck_p2p(const Analysis& a) {
  std::vector<StuckOp> out;
  std::set<std::pair<int, int>> seen;
  for (auto& [r, e] : a.blocking) {
    if (!e->is_p2p()) continue;
    int p = peer_world_rank(*e);
    if (seen.count({std::min(r, p), std::max(r, p)})) continue;
    seen.insert({std::min(r, p), std::max(r, p)});
    StuckOp s;
    s.group = e->group;
    s.group_ranks = {std::min(r, p), std::max(r, p)};
    if (e->group.rfind("pp(", 0) == 0)
      for (int x : s.group_ranks) {
        const auto at = std::find(e->group_ranks.begin(), e->group_ranks.end(), x);
        if (at != e->group_ranks.end()) s.stages.push_back(int(at - e->group_ranks.begin()));
      }
    s.seq = e->seq;
    s.op = e->op;
    s.dtype = e->dtype;
    s.count = e->count;
    s.p2p = true;
    s.peer = p;
    s.phase = e->phase;
    s.waiting.push_back(r);
    auto pb = a.blocking.find(p);
    if (pb != a.blocking.end() && pb->second->is_p2p() && peer_world_rank(*pb->second) == r)
      s.waiting.push_back(p);
    else (a.dump.count(p) ? s.missing : s.absent).push_back(p);
    auto d = a.dump.find(r);
    int64_t t0 = e->t_started_ns ? e->t_started_ns : e->t_scheduled_ns;
    if (t0 > 0 && d->second->time_ns > t0) s.waited_s = seconds(d->second->time_ns - t0);
    std::sort(s.waiting.begin(), s.waiting.end());
    out.push_back(std::move(s));
  }
  return out;
}

}  // namespace

HangReport diagnose_hang(const DumpSet& set, const StragglerRule& rule) {
  Analysis a(set);
  index_dumps(a);
  HangReport r;
  r.dir = set.dir;
  r.world = set.world;
  r.unusable = set.problems;
  for (const FlightDump& d : set.dumps) {
    r.dumped.push_back(d.rank);
    auto it = std::find_if(r.phases.begin(), r.phases.end(), [&](auto& g) { return g.phase == d.phase; });
    if (it == r.phases.end()) r.phases.push_back({{d.rank}, d.phase});
    else it->ranks.push_back(d.rank);
  }
  r.dead.assign(a.dead.begin(), a.dead.end());
  for (int k = 0; k < set.world; ++k)
    if (!a.dump.count(k) && !a.dead.count(k)) r.no_dump.push_back(k);
  for (auto& [key, g] : a.groups)
    if (auto mm = find_mismatch(a, g)) r.mismatches.push_back(std::move(*mm));
  r.stuck = find_stuck_collectives(a);
  for (StuckOp& s : find_stuck_p2p(a)) r.stuck.push_back(std::move(s));
  explain_hang(r, a, rule);
  return r;
}

}  // namespace strata::diag
