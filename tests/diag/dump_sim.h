// Builds flight-recorder dump sets for the hang doctor's tests by simulating a small
// data-parallel job: every step each rank loads data, runs forward over the layers, then
// backward from the last layer down with one all-reduce per layer (count 100*(layer+1),
// or 100 when equal_counts), and an all-reduce of the gradient norm (count 1) in the
// optimizer phase; optionally a checkpoint save. With `zero` >= 1 the gradients are
// reduce-scattered instead (uneven per-rank counts, as ZeRO's shards of a bucket are: a
// layer's range lies mostly in one rank's shard) and the updated parameters all-gathered
// after the optimizer; with `zero` 3 each layer's parameters are also all-gathered before
// its forward and its backward. A v-collective records its counts vector (the same on every
// rank) and "count" = this rank's own block, as the flight recorder did before it recorded
// the sum: the harder case for the doctor, which must compare the vectors. A collective
// completes when every member posted the same call at its sequence number; a mismatch
// never completes (as a transport that checks sizes would stop). Faults are injected per rank and step. Each
// rank keeps its last `capacity` entries, as the flight recorder's ring does.
#pragma once
#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "diag/flight_dump.h"
#include "nlohmann/json.hpp"

namespace sim {

enum class Fault { skip, wrong_count, stop_in_forward, stop_in_ckpt, kill, slow, sleep_once, stall };

struct Inject {
  Fault kind;
  int rank = 0, step = 0, layer = 0;
  double value = 0;  // slow: compute factor; sleep_once: seconds
};

struct Config {
  int world = 4, steps = 4, layers = 3;
  bool checkpoint = false;  // a checkpoint save after every step
  bool equal_counts = false;
  int zero = 0;  // ZeRO stage 0-3: which collectives the step calls (see above)
  int capacity = 2000;
  double timeout_s = 30;
  std::vector<Inject> faults;
};

struct Action {
  bool collective = false;
  int64_t step = 0;
  int layer = -1;
  std::string kind;
  int64_t count = 0;
  double compute_s = 0;
  std::string op = "allreduce";
  std::vector<int64_t> counts;  // v-collectives: per-rank counts, the same on every rank
};

// The per-rank counts of a layer's range under ZeRO: most of it in the shard of rank
// (layer % world), a few elements in the next one, nothing elsewhere.
inline std::vector<int64_t> shard_counts(const Config& c, int layer, int64_t n) {
  std::vector<int64_t> v(size_t(c.world), 0);
  v[size_t(layer % c.world)] = n - 7;
  v[size_t((layer + 1) % c.world)] += 7;
  return v;
}

struct RankState {
  std::vector<Action> program;
  size_t pc = 0;
  int64_t clock = 1'000'000'000;  // ns
  int64_t next_seq = 0;
  bool blocked = false, stopped = false, dead = false;
  nlohmann::json entries = nlohmann::json::array();
  nlohmann::json phase = {{"step", -1}, {"layer", -1}, {"kind", "idle"}};
};

inline nlohmann::json phase_json(int64_t step, int layer, const std::string& kind) {
  return {{"step", step}, {"layer", layer}, {"kind", kind}};
}

inline const Inject* fault_at(const Config& c, int rank, Fault kind, int64_t step, int layer) {
  for (const Inject& f : c.faults)
    if (f.kind == kind && f.rank == rank && f.step == step && f.layer == layer) return &f;
  return nullptr;
}

inline Action compute(int64_t step, int layer, const char* kind, double secs) {
  Action a;
  a.step = step, a.layer = layer, a.kind = kind, a.compute_s = secs;
  return a;
}

inline Action collective(int64_t step, int layer, const char* kind, const char* op, int64_t count,
                         std::vector<int64_t> counts = {}) {
  Action a;
  a.collective = true;
  a.step = step, a.layer = layer, a.kind = kind, a.op = op, a.count = count, a.counts = std::move(counts);
  return a;
}

inline std::vector<Action> program_for(const Config& c, int rank) {
  std::vector<Action> p;
  double factor = 1;
  for (const Inject& f : c.faults)
    if (f.kind == Fault::slow && f.rank == rank) factor = f.value;
  // Deterministic per-rank jitter of up to 2 ms so healthy runs are not perfectly even.
  auto jitter = [&](int64_t step, int layer) { return 1e-3 * double((rank * 7 + step * 3 + layer * 5) % 3); };
  auto gather = [&](int64_t s, int l, const char* kind) {
    p.push_back(collective(s, l, kind, "allgatherv", 0, shard_counts(c, l, 50 * (l + 1))));
  };
  for (int64_t s = 0; s < c.steps; ++s) {
    p.push_back(compute(s, -1, "data loading", 0.002));
    for (int l = 0; l < c.layers; ++l) {
      if (c.zero == 3) gather(s, l, "forward");
      p.push_back(compute(s, l, "forward", (0.010 + jitter(s, l)) * factor));
    }
    for (int l = c.layers - 1; l >= 0; --l) {
      if (c.zero == 3) gather(s, l, "backward");
      p.push_back(compute(s, l, "backward", (0.020 + jitter(s, l)) * factor));
      int64_t n = c.equal_counts ? 100 : 100 * (l + 1);
      if (c.zero >= 1) p.push_back(collective(s, l, "backward", "reducescatter", 0, shard_counts(c, l, n)));
      else p.push_back(collective(s, l, "backward", "allreduce", n));
    }
    p.push_back(collective(s, -1, "optimizer", "allreduce", 1));
    p.push_back(compute(s, -1, "optimizer", 0.003));
    if (c.zero == 1 || c.zero == 2)
      for (int l = 0; l < c.layers; ++l) gather(s, l, "optimizer");
    if (c.checkpoint) p.push_back(compute(s, -1, "checkpoint save", 0.050));
  }
  return p;
}

// Runs rank r until it blocks, stops, dies or finishes.
inline void advance(const Config& c, int r, RankState& st) {
  while (!st.blocked && !st.stopped && !st.dead && st.pc < st.program.size()) {
    Action a = st.program[st.pc++];
    st.phase = phase_json(a.step, a.layer, a.kind);
    if (!a.collective) {
      if (a.kind == "forward" && fault_at(c, r, Fault::kill, a.step, a.layer)) {
        st.dead = true;
        return;
      }
      bool stop = (a.kind == "forward" && fault_at(c, r, Fault::stop_in_forward, a.step, a.layer)) ||
                  (a.kind == "checkpoint save" && fault_at(c, r, Fault::stop_in_ckpt, a.step, -1));
      if (stop) {
        st.stopped = true;
        return;
      }
      double extra = 0;
      if (a.kind == "forward")
        if (auto f = fault_at(c, r, Fault::sleep_once, a.step, a.layer)) extra = f->value;
      st.clock += int64_t((a.compute_s + extra) * 1e9);
      continue;
    }
    // Faults hit the gradient collective of (step, layer), not ZeRO 3's gathers before it.
    bool grad = a.kind == "backward" && a.op != "allgatherv";
    if (fault_at(c, r, Fault::skip, a.step, a.layer) && grad) continue;
    if (fault_at(c, r, Fault::wrong_count, a.step, a.layer) && grad) {
      a.count /= 2;
      for (int64_t& n : a.counts) n /= 2;
    }
    if (!a.counts.empty()) a.count = a.counts[size_t(r)];
    std::vector<int> members;
    for (int k = 0; k < c.world; ++k) members.push_back(k);
    nlohmann::json e = {{"group", "world"}, {"group_ranks", members}, {"seq", st.next_seq++},
                        {"p2p", false}, {"op", a.op}, {"dtype", "float"}, {"count", a.count}, {"peer", -1},
                        {"root", -1}, {"redop", a.op == "allgatherv" ? "" : "sum"},
                        {"tag", 0}, {"state", "started"}, {"t_scheduled_ns", st.clock},
                        {"t_started_ns", st.clock + 1000}, {"t_completed_ns", 0}, {"phase", st.phase}};
    if (!a.counts.empty()) e["counts"] = a.counts;
    st.entries.push_back(std::move(e));
    st.blocked = true;
  }
}

inline nlohmann::json* entry_at(RankState& st, int64_t seq) {
  for (auto& e : st.entries)
    if (e["seq"] == seq) return &e;
  return nullptr;
}

// Completes every collective all members posted with equal calls. True on progress.
inline bool complete_ready(const Config& c, std::vector<RankState>& ranks) {
  bool progress = false;
  for (;;) {
    std::vector<nlohmann::json*> posted;
    for (auto& st : ranks) {
      if (!st.blocked) break;
      posted.push_back(&st.entries.back());
    }
    if (posted.size() != ranks.size()) return progress;
    int64_t seq = (*posted[0])["seq"];
    bool same = true;
    for (auto* e : posted)
      same = same && (*e)["seq"] == seq && (*e)["op"] == (*posted[0])["op"] &&
             (e->contains("counts") ? (*e)["counts"] == (*posted[0])["counts"]
                                    : (*e)["count"] == (*posted[0])["count"]);
    for (const Inject& f : c.faults)
      if (f.kind == Fault::stall && f.step == (*posted[0])["phase"]["step"] &&
          f.layer == (*posted[0])["phase"]["layer"])
        same = false;
    if (!same) return progress;
    int64_t t = 0;
    for (auto* e : posted) t = std::max(t, (*e)["t_started_ns"].get<int64_t>());
    t += 1'000'000;
    for (size_t k = 0; k < ranks.size(); ++k) {
      (*posted[k])["state"] = "completed";
      (*posted[k])["t_completed_ns"] = t;
      ranks[k].clock = t;
      ranks[k].blocked = false;
    }
    progress = true;
    for (size_t k = 0; k < ranks.size(); ++k) advance(c, int(k), ranks[k]);
  }
}

// rank -> dump JSON; dead ranks have none.
inline std::map<int, nlohmann::json> simulate(const Config& c) {
  std::vector<RankState> ranks(c.world);
  for (int r = 0; r < c.world; ++r) {
    ranks[r].program = program_for(c, r);
    advance(c, r, ranks[r]);
  }
  complete_ready(c, ranks);
  std::vector<int> dead;
  int64_t end = 0;
  for (int r = 0; r < c.world; ++r) {
    if (ranks[r].dead) dead.push_back(r);
    end = std::max(end, ranks[r].clock);
  }
  end += int64_t(c.timeout_s * 1e9);
  std::map<int, nlohmann::json> dumps;
  for (int r = 0; r < c.world; ++r) {
    RankState& st = ranks[r];
    if (st.dead) continue;
    bool finished = !st.blocked && !st.stopped;
    if (finished) st.phase = phase_json(c.steps - 1, -1, "idle");
    std::string reason = !dead.empty() ? "peer-dead" : st.blocked ? "timeout" : finished ? "manual" : "signal";
    // The transports' words (comm/shm): "allreduce #4 on group world: peer rank 3 (pid 1003) died ...".
    std::string detail = !dead.empty() ? "allreduce on group world: peer rank " + std::to_string(dead[0]) +
                                             " (pid " + std::to_string(1000 + dead[0]) +
                                             ") died while this rank was waiting for it"
                                       : "simulated";
    nlohmann::json entries = nlohmann::json::array();
    size_t n = st.entries.size(), first = n > size_t(c.capacity) ? n - c.capacity : 0;
    for (size_t k = first; k < n; ++k) entries.push_back(st.entries[k]);
    dumps[r] = {{"rank", r}, {"world", c.world}, {"pid", 1000 + r}, {"host", "node0"},
                {"reason", reason}, {"detail", detail}, {"time_ns", end}, {"phase", st.phase},
                {"recorder_capacity", c.capacity}, {"entries", entries}};
  }
  return dumps;
}

// The simulated dumps as the hang doctor reads them.
inline strata::diag::DumpSet to_set(const std::map<int, nlohmann::json>& dumps) {
  strata::diag::DumpSet set;
  set.dir = "sim";
  for (auto& [rank, j] : dumps) {
    set.dumps.push_back(strata::diag::parse_flight_dump(j, "flight-rank" + std::to_string(rank) + ".json"));
    set.world = std::max(set.world, set.dumps.back().world);
  }
  return set;
}

}  // namespace sim
