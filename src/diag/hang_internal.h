// Internals shared by the hang doctor's files (hang_doctor.cc finds the facts,
// hang_explain.cc turns them into culprits and sentences). Not a public interface.
#pragma once
#include <cstdio>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "core/error.h"
#include "diag/hang_doctor.h"

namespace strata::diag::detail {

inline std::string ranks_word(const std::vector<int>& r) {
  return cat(r.size() == 1 ? "rank " : "ranks ", format_ranks(r));
}

// Point-to-point peers are recorded as group ranks; reports speak of world ranks.
inline int peer_world_rank(const FlightEntry& e) {
  return e.peer >= 0 && size_t(e.peer) < e.group_ranks.size() ? e.group_ranks[e.peer] : e.peer;
}

inline std::string call_text(const FlightEntry& e) {
  std::string s = e.op;
  if (!e.dtype.empty()) s += " " + e.dtype;
  if (!e.counts.empty()) {
    s += " x [";
    for (size_t i = 0; i < e.counts.size(); ++i) s += cat(i ? "," : "", e.counts[i]);
    s += "]";
  } else {
    s += cat(" x ", e.count);
  }
  if (e.root >= 0) s += cat(" root ", e.root);
  if (e.is_p2p()) s += cat(e.op == "recv" ? " from rank " : " to rank ", peer_world_rank(e));
  return s;
}

inline std::string op_label(const FlightEntry& e) {
  return cat(e.op, " #", e.seq, " of group \"", e.group, "\"");
}

// What must agree across the members of a collective about its size. A v-collective's
// "count" is the rank's own block (it differs from rank to rank by design: a ZeRO shard of a
// bucket may be 0 on one rank and the whole bucket on another), so its counts vector is
// compared instead; all-to-all-v's send counts differ per rank too, so nothing is.
inline std::string count_key(const FlightEntry& e) {
  if (e.op == "alltoallv") return "";
  if (e.counts.empty()) return std::to_string(e.count);
  std::string s = "[";
  for (int64_t c : e.counts) s += std::to_string(c) + ",";
  return s + "]";
}

inline std::string signature(const FlightEntry& e) {
  return cat(e.op, "|", e.dtype, "|", e.redop, "|", e.root, "|", count_key(e));
}

inline std::string site(const FlightEntry& e, bool with_step) {
  return cat(with_step ? e.phase.step : 0, "|", e.phase.kind, "|", e.phase.layer);
}

// Where phases sit in one training step, to tell "still before the call" from "past it".
inline int kind_rank(const std::string& kind) {
  static const char* order[] = {"data loading", "forward", "backward", "optimizer", "checkpoint save"};
  for (int i = 0; i < 5; ++i)
    if (kind == order[i]) return i;
  return -1;
}

// True when `a` is known to come after `b` in the training loop.
inline bool phase_after(const Phase& a, const Phase& b) {
  if (a.step < 0 || b.step < 0) return false;
  if (a.step != b.step) return a.step > b.step;
  int ka = kind_rank(a.kind), kb = kind_rank(b.kind);
  if (ka < 0 || kb < 0) return false;
  if (ka != kb) return ka > kb;
  if (a.layer < 0 || b.layer < 0) return false;
  return a.kind == "backward" ? a.layer < b.layer : a.layer > b.layer;
}

// A member that never reached stuck collective `s` is past its call site: it skipped the
// call. Idle, its dump's phase tells (a later step, or a later phase of the step); blocked in
// another operation, only a later step of that operation does, since within a step
// schedules interleave the groups' operations (a pipeline's stages, overlapped reductions).
// Pipeline schedules interleave forward and backward, so for point-to-point the order of
// phases says nothing.
inline bool past_call_site(const FlightDump& d, const FlightEntry* blocking, const StuckOp& s) {
  if (s.p2p) return false;
  if (!blocking) return phase_after(d.phase, s.phase);
  return s.phase.step >= 0 && blocking->phase.step > s.phase.step;
}

inline double seconds(int64_t ns) { return double(ns) * 1e-9; }

inline std::string fmt_s(double s) {
  char buf[32];
  if (s < 0.01) std::snprintf(buf, sizeof buf, "%.1f ms", s * 1e3);
  else if (s < 1) std::snprintf(buf, sizeof buf, "%.0f ms", s * 1e3);
  else std::snprintf(buf, sizeof buf, s < 10 ? "%.2f s" : "%.1f s", s);
  return buf;
}

inline bool is_op(const FlightEntry& e, const StuckOp& s) {
  return e.group == s.group && e.seq == s.seq && e.is_p2p() == s.p2p;
}

struct Group {
  std::string name;
  std::vector<int> ranks;
  std::map<int, std::map<int64_t, const FlightEntry*>> by_rank;  // collectives only
};

struct Analysis {
  const DumpSet& set;
  std::map<int, const FlightDump*> dump;
  std::map<std::string, Group> groups;           // key: name|ranks
  std::map<int, const FlightEntry*> blocking;    // rank -> its oldest unfinished operation
  std::set<int> dead;
  std::map<int, std::vector<int>> dead_reporters;  // dead rank -> ranks naming it

  explicit Analysis(const DumpSet& s) : set(s) {}
};


void explain_hang(HangReport& r, const Analysis& a, const StragglerRule& rule);

}  // namespace strata::diag::detail
