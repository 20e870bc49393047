// The hang doctor: from the flight-recorder dumps of a wedged job, name what bit.
//
// Terms. Each process group numbers its operations 0, 1, 2, ... in call order on every
// member ("seq"); rank r has "reached" seq k of group g when its recorder holds that entry.
// The job is "stuck on" (g, k) when k is the lowest seq of g that some rank has not
// completed. At (g, k) a member is "waiting" (reached, not completed) or "missing" (never
// reached it: still computing, in a checkpoint, skipped it, dead, or left no dump). A
// "mismatch" is a seq at which members called a different op, dtype or count, or called it
// from a different place (step, phase, layer) - the mark of a skipped collective. Its
// culprit is the minority; with no majority (two ranks), the rank whose calls in that step
// differ from its own calls in the step before. A "straggler" arrives last at collectives:
// with one clock per rank, lateness at a collective is how much less a rank waited in it
// than the median member (rank-local durations, so hosts' clocks need not agree).
//
// Cost: O(E log E) in the number of recorded entries. Pure: no I/O.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "diag/flight_dump.h"
#include "nlohmann/json_fwd.hpp"

namespace strata::diag {

enum class Cause {
  mismatch,      // called a different op / dtype / count at the same seq
  skipped,       // skipped a collective the others called
  dead,          // process died (peers report it dead)
  no_dump,       // left no usable dump and never reached the operation
  outside_comm,  // alive but busy elsewhere: compute, checkpoint save, data loading
  waiting_elsewhere,  // blocked in another group's operation
  comm_stalled,  // every member reached the operation and it still did not finish
  order_deadlock,  // a cycle of point-to-point waits with no matching receive
  straggler,     // consistently, or once by far, the last to arrive
};
const char* cause_name(Cause c);  // "mismatch", "skipped", "dead", ...

struct Culprit {
  int rank = -1;  // -1: the operation itself (comm_stalled), or no side could be named
  Cause cause;
  std::string text;  // one plain sentence
};

// A (group, seq) where members disagree.
struct Mismatch {
  std::string group;
  std::vector<int> group_ranks;
  int64_t seq = 0;
  std::string what;  // "count", "op", "dtype", "call site"
  struct Side {
    std::vector<int> ranks;
    std::string call;  // "allreduce float x 1024 from backward of layer 2 (step 3)"
    Phase phase;       // where this side called it from
  };
  std::vector<Side> sides;   // largest first
  std::vector<int> culprits;  // empty when no side can be singled out
  std::string how;            // "majority", "history", "step" (a side called from a later step), or ""
  // "history": the culprits' calls in the step are those of their step before with one left
  // out, the one the other side called at this seq: a skipped call, not a different one.
  bool left_out = false;
};

struct StuckOp {
  std::string group;
  std::vector<int> group_ranks;
  int64_t seq = 0;
  std::string op, dtype;
  int64_t count = 0;
  bool p2p = false;
  int peer = -1;  // point-to-point: the peer (world rank) of the first waiting rank
  // Point-to-point on a pipeline group ("pp(...)", parallel/mesh.h): the stage of each of
  // group_ranks (its position in the group); empty otherwise.
  std::vector<int> stages;
  Phase phase;    // where the waiting ranks called it from
  // The waiting ranks' calls at this seq when they differ (a mismatch): each one with its
  // ranks, in the order of their lowest rank; empty when they all called the same. The
  // fields above then describe the call most of them made.
  struct Call {
    std::vector<int> ranks;
    std::string call;  // "allreduce double x 1 from optimizer (step 3)"
  };
  std::vector<Call> calls;
  std::vector<int> waiting;  // reached it, not finished (includes those where it failed)
  std::vector<int> failed;   // reached it and it failed there (timeout, peer error)
  std::vector<int> missing;  // their dumps show they never reached it
  std::vector<int> unknown;  // dump cut off before this seq: cannot tell
  std::vector<int> absent;   // no usable dump (dead, or silent): it did not finish without them
  double waited_s = 0;  // longest wait among the waiting ranks, by their own clocks
  bool root = true;     // false when its missing ranks are themselves blocked elsewhere
};

struct RankFinding {
  int rank;
  std::string text;  // "rank 3 is still in backward of layer 2 (step 3); its last operation ..."
};

struct StragglerFinding {
  int rank;
  int last_count = 0, samples = 0;  // arrived last at last_count of samples collectives
  double median_late_s = 0, max_late_s = 0;
  std::string text;
};

struct HangReport {
  std::string dir;
  int world = 0;
  std::vector<int> dumped;     // ranks with a usable dump
  std::vector<std::string> unusable;  // per file: why it could not be (fully) used
  std::vector<StuckOp> stuck;         // roots first
  std::vector<Mismatch> mismatches;
  std::vector<int> dead, no_dump;
  std::vector<RankFinding> ranks;   // what the ranks that hold the job up are doing
  std::vector<Culprit> culprits;
  std::vector<StragglerFinding> stragglers;
  struct PhaseGroup {
    std::vector<int> ranks;
    Phase phase;
  };
  std::vector<PhaseGroup> phases;  // where the dumped ranks were when they dumped, grouped
  std::vector<std::string> notes;
  bool cause_found = false;
};

// Thresholds for stragglers, in one place so docs and tests agree.
struct StragglerRule {
  int min_samples = 5;           // completed collectives needed to call a rank consistent
  double min_last_share = 0.5;  // ... and it arrived last at this share of them
  double min_median_late_s = 0.02;  // ... by at least this much on median
  double single_late_s = 1.0;       // or once arrived this late
};

HangReport diagnose_hang(const DumpSet& dumps, const StragglerRule& rule = {});
std::string format_hang_report(const HangReport& r);  // plain words, ends with a newline
nlohmann::json hang_report_json(const HangReport& r);

// "0-3, 5, 7-9"
std::string format_ranks(std::vector<int> ranks);

}  // namespace strata::diag
