#include "parallel/pipeline/schedule.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <tuple>

#include "core/error.h"
#include "cost/bubble.h"

namespace strata::parallel::pipeline {

namespace {
std::string fixed3(double x) {
  char b[32];
  std::snprintf(b, sizeof b, "%.3f", x);
  return b;
}
}  // namespace

ScheduleKind parse_schedule(const std::string& name) {
  if (name == "gpipe") return ScheduleKind::gpipe;
  if (name == "1f1b") return ScheduleKind::one_f_one_b;
  if (name == "interleaved") return ScheduleKind::interleaved;
  if (name == "zb") return ScheduleKind::zb;
  throw SettingError(
      cat(setting("schedule"), " ", name, " is not a schedule (gpipe, 1f1b, interleaved, zb)"));
}

const char* schedule_name(ScheduleKind k) {
  switch (k) {
    case ScheduleKind::gpipe: return "gpipe";
    case ScheduleKind::one_f_one_b: return "1f1b";
    case ScheduleKind::interleaved: return "interleaved";
    case ScheduleKind::zb: return "zb";
  }
  return "?";
}

const char* op_name(Op op) {
  switch (op) {
    case Op::F: return "F";
    case Op::B: return "B";
    case Op::W: return "W";
    case Op::send_act: return "SEND activation";
    case Op::recv_act: return "RECV activation";
    case Op::send_grad: return "SEND gradient";
    case Op::recv_grad: return "RECV gradient";
  }
  return "?";
}

namespace {

using Order = std::vector<Action>;  // one stage's compute actions

Action compute(Op op, int micro, int chunk = 0) { return Action{op, micro, chunk, -1}; }

Order gpipe_order(int M) {
  Order o;
  for (int m = 0; m < M; ++m) o.push_back(compute(Op::F, m));
  for (int m = 0; m < M; ++m) o.push_back(compute(Op::B, m));
  return o;
}

Order one_f_one_b_order(int P, int M, int s) {
  const int warm = std::min(P - s - 1, M);
  Order o;
  for (int m = 0; m < warm; ++m) o.push_back(compute(Op::F, m));
  for (int j = 0; j < M - warm; ++j) {
    o.push_back(compute(Op::F, warm + j));
    o.push_back(compute(Op::B, j));
  }
  for (int m = M - warm; m < M; ++m) o.push_back(compute(Op::B, m));
  return o;
}

// Megatron-LM's interleaved order: chunk-steps k = 0 .. V·M−1 take micro-batches in groups
// of P per chunk; backward visits the chunks in reverse.
Order interleaved_order(int P, int M, int V, int s) {
  const int total = M * V;
  auto micro = [&](int k) { return (k / (P * V)) * P + k % P; };
  auto chunk = [&](int k, bool fwd) {
    const int c = (k % (P * V)) / P;
    return fwd ? c : V - 1 - c;
  };
  const int warm = M == P ? total : std::min((P - s - 1) * 2 + (V - 1) * P, total);
  Order o;
  for (int k = 0; k < warm; ++k) o.push_back(compute(Op::F, micro(k), chunk(k, true)));
  for (int k = 0; k < total - warm; ++k) {
    o.push_back(compute(Op::F, micro(warm + k), chunk(warm + k, true)));
    o.push_back(compute(Op::B, micro(k), chunk(k, false)));
  }
  for (int k = total - warm; k < total; ++k) o.push_back(compute(Op::B, micro(k), chunk(k, false)));
  return o;
}

// ZB-H1 by list scheduling under unit costs F = B = W. A free stage runs, in this order of
// preference: a W when stage s already defers more than s of them (later stages defer more,
// so input gradients travel upstream first), a ready F while fewer than P−s micro-batches
// await their B (1F1B's bound), a ready B, any deferred W (filling what would be bubble);
// with nothing ready it waits for the next arrival. Stage 0 holds at most P micro-batches
// from F to W, as under 1F1B.
std::vector<Order> zb_orders(int P, int M) {
  constexpr double kInf = 1e300;
  std::vector<Order> out(static_cast<size_t>(P));
  std::vector<std::vector<double>> f_end(P, std::vector<double>(M, kInf)),
      b_end(P, std::vector<double>(M, kInf));
  std::vector<int> next_f(P, 0), next_b(P, 0), in_flight(P, 0);
  std::vector<std::vector<int>> pending_w(P);
  std::vector<double> clock(P, 0);
  int left = 3 * P * M;
  while (left > 0) {
    int best = -1;
    double best_t = kInf;
    Op best_op = Op::F;
    for (int s = 0; s < P; ++s) {
      const double t = clock[s];
      double tb = kInf, tf = kInf;
      if (next_b[s] < M) {
        const int m = next_b[s];
        const double ready = s == P - 1 ? f_end[s][m] : b_end[s + 1][m];
        if (f_end[s][m] < kInf && ready < kInf) tb = std::max(t, ready);
      }
      if (next_f[s] < M && in_flight[s] < P - s) {
        const double ready = s == 0 ? 0 : f_end[s - 1][next_f[s]];
        if (ready < kInf) tf = std::max(t, ready);
      }
      double start = kInf;
      Op op = Op::F;
      const bool w_due = int(pending_w[s].size()) > s;  // keep memory near 1F1B's
      if (w_due) {
        start = t, op = Op::W;
      } else if (tf <= t) {
        start = t, op = Op::F;
      } else if (tb <= t) {
        start = t, op = Op::B;
      } else if (!pending_w[s].empty()) {
        start = t, op = Op::W;
      } else if (std::min(tb, tf) < kInf) {
        start = std::min(tb, tf), op = tb <= tf ? Op::B : Op::F;
      }
      if (start < best_t) best = s, best_t = start, best_op = op;
    }
    STRATA_CHECK(best >= 0, "internal: zero-bubble list scheduling found nothing to run");
    const int s = best;
    int m = 0;
    if (best_op == Op::F) {
      m = next_f[s]++;
      ++in_flight[s];
      f_end[s][m] = best_t + 1;
    } else if (best_op == Op::B) {
      m = next_b[s]++;
      b_end[s][m] = best_t + 1;
      pending_w[s].push_back(m);
      --in_flight[s];
    } else {
      m = pending_w[s].front();
      pending_w[s].erase(pending_w[s].begin());
    }
    clock[s] = best_t + 1;
    out[size_t(s)].push_back(compute(best_op, m));
    --left;
  }
  return out;
}

// Inserts each compute action's messages: RECV right before the consumer, SEND right after
// the producer.
void add_messages(Schedule& s, const std::vector<Order>& orders) {
  const int P = s.stages, VP = s.virtual_stages();
  s.actions.assign(size_t(P), {});
  for (int st = 0; st < P; ++st) {
    Order& out = s.actions[size_t(st)];
    for (const Action& a : orders[size_t(st)]) {
      const int v = s.virtual_stage(st, a.chunk);
      if (a.op == Op::F && v > 0) out.push_back({Op::recv_act, a.micro, a.chunk, (v - 1) % P});
      if (a.op == Op::B && v < VP - 1) out.push_back({Op::recv_grad, a.micro, a.chunk, (v + 1) % P});
      out.push_back(a);
      if (a.op == Op::F && v < VP - 1) out.push_back({Op::send_act, a.micro, a.chunk, (v + 1) % P});
      if (a.op == Op::B && v > 0) out.push_back({Op::send_grad, a.micro, a.chunk, (v - 1) % P});
    }
  }
}

void check_shape(ScheduleKind kind, int P, int M, int V) {
  STRATA_CHECK_SETTING(P >= 1, setting("pp"), " must be at least 1 (got ", P, ")");
  STRATA_CHECK_SETTING(M >= 1, setting("micro-batches"), " must be at least 1 (got ", M, ")");
  STRATA_CHECK_SETTING(V >= 1, setting("virtual-stages"), " must be at least 1 (got ", V, ")");
  STRATA_CHECK_SETTING(V == 1 || kind == ScheduleKind::interleaved, setting("virtual-stages"), " ",
                       V, " needs ", setting("schedule"), " interleaved (got ", schedule_name(kind),
                       ")");
  if (kind != ScheduleKind::interleaved) return;
  STRATA_CHECK_SETTING(P >= 2, setting("schedule"), " interleaved needs ", setting("pp"),
                       " 2 or more (got ", P, ")");
  STRATA_CHECK_SETTING(M >= P, setting("schedule"), " interleaved needs ", setting("micro-batches"),
                       " >= ", setting("pp"), ": ", M, " < ", P);
  STRATA_CHECK_SETTING(M % P == 0, setting("schedule"), " interleaved needs ",
                       setting("micro-batches"), " a multiple of ", setting("pp"), ": ", M,
                       " is not a multiple of ", P);
}

}  // namespace

Schedule make_schedule(ScheduleKind kind, int P, int M, int V, bool checked) {
  check_shape(kind, P, M, V);
  Schedule s;
  s.kind = kind;
  s.stages = P;
  s.micro = M;
  s.virt = V;
  s.split_backward = kind == ScheduleKind::zb;
  std::vector<Order> orders;
  if (kind == ScheduleKind::zb) {
    orders = zb_orders(P, M);
  } else {
    for (int st = 0; st < P; ++st) {
      if (kind == ScheduleKind::gpipe) orders.push_back(gpipe_order(M));
      if (kind == ScheduleKind::one_f_one_b) orders.push_back(one_f_one_b_order(P, M, st));
      if (kind == ScheduleKind::interleaved) orders.push_back(interleaved_order(P, M, V, st));
    }
  }
  add_messages(s, orders);
  if (checked) validate(s);
  return s;
}

Schedule make_forward_only(int P, int M, int V) {
  STRATA_CHECK(P >= 1 && M >= 1 && V >= 1, "forward-only schedule needs P, M, V >= 1 (got ", P,
               ", ", M, ", ", V, ")");
  Schedule s;
  s.kind = V > 1 ? ScheduleKind::interleaved : ScheduleKind::gpipe;
  s.stages = P;
  s.micro = M;
  s.virt = V;
  s.forward_only = true;
  // Chunk-major order (every micro-batch through chunk 0, then chunk 1) deadlocks with V > 1:
  // each stage blocks reusing an activation slot whose send waits on a peer that is itself
  // blocked the same way. Visit the micro-batches in groups of P per chunk, as the
  // interleaved training schedule does, so each chunk's output is consumed before the next
  // group overwrites it; the last group may hold fewer than P.
  std::vector<Order> orders(static_cast<size_t>(P));
  for (int st = 0; st < P; ++st)
    for (int g = 0; g < M; g += P)
      for (int c = 0; c < V; ++c)
        for (int m = g; m < std::min(M, g + P); ++m) orders[size_t(st)].push_back(compute(Op::F, m, c));
  add_messages(s, orders);
  validate(s);
  return s;
}

namespace {

std::string describe(const Schedule& s, int stage, size_t i) {
  const Action& a = s.actions[size_t(stage)][i];
  std::string t = cat("stage ", stage, " action ", i, " (", op_name(a.op), " micro-batch ",
                      a.micro);
  if (s.virt > 1) t += cat(" chunk ", a.chunk);
  if (!is_compute(a.op)) t += cat(a.op == Op::send_act || a.op == Op::send_grad ? " to" : " from",
                                  " stage ", a.peer);
  return t + ")";
}

// Each compute once, in the order F < B < W on its stage.
void check_computes(const Schedule& s) {
  const int want_b = s.forward_only ? 0 : 1, want_w = s.split_backward ? 1 : 0;
  for (int st = 0; st < s.stages; ++st) {
    std::map<std::tuple<int, int, int>, size_t> seen;  // (op, micro, chunk) -> index
    const auto& acts = s.actions[size_t(st)];
    for (size_t i = 0; i < acts.size(); ++i) {
      const Action& a = acts[i];
      STRATA_CHECK(a.micro >= 0 && a.micro < s.micro && a.chunk >= 0 && a.chunk < s.virt,
                   "schedule: ", describe(s, st, i), " is outside ", s.micro,
                   " micro-batches x ", s.virt, " chunks");
      if (!is_compute(a.op)) {
        STRATA_CHECK(a.peer >= 0 && a.peer < s.stages && a.peer != st, "schedule: ",
                     describe(s, st, i), " names no other stage: a stage never waits on itself");
        continue;
      }
      STRATA_CHECK(a.op != Op::W || s.split_backward, "schedule: ", describe(s, st, i),
                   " is a weight-gradient pass in a schedule without split backward");
      const auto key = std::make_tuple(int(a.op), a.micro, a.chunk);
      STRATA_CHECK(!seen.count(key), "schedule: ", describe(s, st, i), " runs twice");
      seen[key] = i;
      if (a.op != Op::F) {
        const Op before = a.op == Op::B ? Op::F : Op::B;
        STRATA_CHECK(seen.count(std::make_tuple(int(before), a.micro, a.chunk)), "schedule: ",
                     describe(s, st, i), " comes before its ", op_name(before));
      }
    }
    for (int m = 0; m < s.micro; ++m)
      for (int c = 0; c < s.virt; ++c) {
        const int counts[3] = {1, want_b, want_w};
        for (int op = 0; op < 3; ++op)
          STRATA_CHECK(bool(seen.count(std::make_tuple(op, m, c))) == bool(counts[op]),
                       "schedule: stage ", st, " has no ", op_name(Op(op)), " for micro-batch ", m,
                       s.virt > 1 ? cat(" chunk ", c) : std::string());
      }
  }
}

// A message: which virtual stage produced it and for which micro-batch.
struct Msg {
  int micro, producer;
  bool operator!=(const Msg& o) const { return micro != o.micro || producer != o.producer; }
};

// Every SEND matches the RECV at the same position of its channel and pair, and messages go
// to (and come from) the virtual stage next to the producer.
void check_messages(const Schedule& s) {
  const int P = s.stages, VP = s.virtual_stages();
  // (channel, src, dst) -> messages in order, with the stage-local action index.
  std::map<std::tuple<int, int, int>, std::vector<std::pair<Msg, size_t>>> sent, received;
  for (int st = 0; st < P; ++st) {
    const auto& acts = s.actions[size_t(st)];
    for (size_t i = 0; i < acts.size(); ++i) {
      const Action& a = acts[i];
      if (is_compute(a.op)) continue;
      const int v = s.virtual_stage(st, a.chunk);
      const bool act = a.op == Op::send_act || a.op == Op::recv_act;
      const bool send = a.op == Op::send_act || a.op == Op::send_grad;
      const int other = act == send ? v + 1 : v - 1;  // the virtual stage at the other end
      STRATA_CHECK(other >= 0 && other < VP && other % P == a.peer, "schedule: ",
                   describe(s, st, i), " does not go to the neighbouring virtual stage");
      const int producer = send ? v : other;
      const auto key = send ? std::make_tuple(act ? 0 : 1, st, a.peer)
                            : std::make_tuple(act ? 0 : 1, a.peer, st);
      (send ? sent : received)[key].push_back({Msg{a.micro, producer}, i});
    }
  }
  for (const auto& [key, list] : sent) {
    const auto& [ch, src, dst] = key;
    const auto& got = received[key];
    for (size_t n = 0; n < list.size(); ++n) {
      STRATA_CHECK(n < got.size(), "schedule: unmatched send: ", describe(s, src, list[n].second),
                   " is never received by stage ", dst);
      STRATA_CHECK(!(list[n].first != got[n].first), "schedule: ", ch == 0 ? "activation" : "gradient",
                   " message ", n, " from stage ", src, " to stage ", dst, " is ",
                   describe(s, src, list[n].second), " but stage ", dst, " receives it as ",
                   describe(s, dst, got[n].second), " (messages arrive in send order)");
    }
  }
  for (const auto& [key, got] : received) {
    const auto& [ch, src, dst] = key;
    const size_t n = sent.count(key) ? sent[key].size() : 0;
    STRATA_CHECK(got.size() <= n, "schedule: unmatched receive: ", describe(s, dst, got[n].second),
                 " waits for a message stage ", src, " never sends");
  }
}

// A compute consumes what the RECV right before it delivered, and a SEND follows its producer.
void check_placement(const Schedule& s) {
  const int VP = s.virtual_stages();
  for (int st = 0; st < s.stages; ++st) {
    const auto& acts = s.actions[size_t(st)];
    for (size_t i = 0; i < acts.size(); ++i) {
      const Action& a = acts[i];
      const int v = s.virtual_stage(st, a.chunk);
      const bool needs = (a.op == Op::F && v > 0) || (a.op == Op::B && v < VP - 1);
      if (needs) {
        const Op want = a.op == Op::F ? Op::recv_act : Op::recv_grad;
        bool found = false;
        for (size_t j = 0; j < i && !found; ++j)
          found = acts[j].op == want && acts[j].micro == a.micro && acts[j].chunk == a.chunk;
        STRATA_CHECK(found, "schedule: ", describe(s, st, i), " has no ", op_name(want),
                     " before it");
      }
      if (a.op == Op::send_act || a.op == Op::send_grad) {
        const Op from = a.op == Op::send_act ? Op::F : Op::B;
        bool found = false;
        for (size_t j = 0; j < i && !found; ++j)
          found = acts[j].op == from && acts[j].micro == a.micro && acts[j].chunk == a.chunk;
        STRATA_CHECK(found, "schedule: ", describe(s, st, i), " comes before the ", op_name(from),
                     " that produces it");
      }
    }
  }
}

}  // namespace

Costs default_costs(const Schedule& s) {
  Costs c;
  if (s.split_backward) c.b = 1, c.w = 1;
  return c;
}

double Timeline::busy(int stage) const {
  double t = 0;
  for (const Timed& x : stages[size_t(stage)]) t += x.end - x.start;
  return t;
}

Timeline simulate(const Schedule& s, const Costs& c) {
  const int P = s.stages;
  Timeline tl;
  tl.stages.assign(size_t(P), {});
  // Per (channel, src, dst): the send times in order, and how many were received.
  const auto chan = [P](int ch, int src, int dst) { return size_t((ch * P + src) * P + dst); };
  std::vector<std::vector<double>> sends(size_t(2 * P * P));
  std::vector<size_t> taken(sends.size(), 0);
  std::vector<size_t> at(size_t(P), 0);
  std::vector<double> clock(size_t(P), 0);
  for (;;) {
    bool moved = false, done = true;
    for (int st = 0; st < P; ++st) {
      const auto& acts = s.actions[size_t(st)];
      while (at[size_t(st)] < acts.size()) {
        const Action& a = acts[at[size_t(st)]];
        double& t = clock[size_t(st)];
        if (is_compute(a.op)) {
          const Costs::Virtual k = c.virt.empty() ? Costs::Virtual{c.f, c.b, c.w}
                                                  : c.virt.at(size_t(s.virtual_stage(st, a.chunk)));
          const double d = a.op == Op::F ? k.f : a.op == Op::B ? k.b : k.w;
          tl.stages[size_t(st)].push_back({a, t, t + d});
          t += d;
        } else if (a.op == Op::send_act || a.op == Op::send_grad) {
          sends[chan(a.op == Op::send_act ? 0 : 1, st, a.peer)].push_back(t);
        } else {
          const size_t key = chan(a.op == Op::recv_act ? 0 : 1, a.peer, st);
          const std::vector<double>& q = sends[key];
          size_t& n = taken[key];
          if (n >= q.size()) break;  // its message is not sent yet
          t = std::max(t, q[n++] + c.transfer);
        }
        ++at[size_t(st)];
        moved = true;
      }
      done = done && at[size_t(st)] == acts.size();
    }
    if (done) break;
    if (!moved) {
      std::string stuck;
      for (int st = 0; st < P; ++st)
        if (at[size_t(st)] < s.actions[size_t(st)].size())
          stuck += cat(stuck.empty() ? "" : "; ", describe(s, st, at[size_t(st)]), " waits");
      throw Error(cat("schedule: deadlock: ", stuck));
    }
  }
  for (int st = 0; st < P; ++st) tl.makespan = std::max(tl.makespan, clock[size_t(st)]);
  return tl;
}

void validate(const Schedule& s) {
  STRATA_CHECK(int(s.actions.size()) == s.stages, "schedule: ", s.actions.size(),
               " action lists for ", s.stages, " stages");
  check_computes(s);
  check_messages(s);
  check_placement(s);
  simulate(s, default_costs(s));  // throws on a deadlock
}

namespace {
// Most micro-batches held at once by `stage`, over one chunk (chunk >= 0) or all of them.
int peak_held(const Schedule& s, int stage, int chunk) {
  int now = 0, peak = 0;
  const Op release = s.forward_only ? Op::F : s.split_backward ? Op::W : Op::B;
  for (const Action& a : s.actions[size_t(stage)]) {
    if (chunk >= 0 && a.chunk != chunk) continue;
    if (a.op == Op::F) peak = std::max(peak, ++now);
    if (a.op == release) --now;
  }
  return peak;
}
}  // namespace

int chunk_slots(const Schedule& s, int stage, int chunk) { return peak_held(s, stage, chunk); }
int max_in_flight(const Schedule& s, int stage) { return peak_held(s, stage, -1); }

int max_deferred_weight_passes(const Schedule& s) {
  int most = 0;
  for (const std::vector<Action>& stage : s.actions) {
    int pending = 0;
    for (const Action& a : stage) {
      if (a.op == Op::B && s.split_backward) ++pending;
      if (a.op == Op::W) --pending;
      most = std::max(most, pending);
    }
  }
  return most;
}

double bubble_formula(ScheduleKind kind, int stages, int micro, int virt) {
  if (kind == ScheduleKind::interleaved) return cost::pipeline_bubble(stages, micro, virt);
  if (kind == ScheduleKind::zb) return cost::zero_bubble_bubble(stages, micro);
  return cost::pipeline_bubble(stages, micro);
}

double bubble_formula(const Schedule& s) { return bubble_formula(s.kind, s.stages, s.micro, s.virt); }

int message_tag(const Schedule& s, int stage, const Action& a) {
  const int v = s.virtual_stage(stage, a.chunk);
  const bool send = a.op == Op::send_act || a.op == Op::send_grad;
  const bool act = a.op == Op::send_act || a.op == Op::recv_act;
  const int producer = send ? v : act ? v - 1 : v + 1;
  return producer * s.micro + a.micro;
}

std::string render(const Schedule& s) {
  const Timeline tl = simulate(s, default_costs(s));
  const int digits = int(std::to_string(s.micro - 1).size());
  const int width = 1 + digits + (s.virt > 1 ? 1 : 0) + 1;  // "F12a "
  const int units = int(tl.makespan + 0.5);
  std::string out = cat("schedule ", schedule_name(s.kind), ": ", s.stages, " stages, ", s.micro,
                        " micro-batches", s.virt > 1 ? cat(", ", s.virt, " chunks per stage") : "",
                        s.split_backward ? " (B: input gradient, W: weight gradient)" : "",
                        "; one column = one forward of one chunk\n");
  for (int st = 0; st < s.stages; ++st) {
    std::string row(size_t(units * width), ' ');
    for (int u = 0; u < units; ++u) row[size_t(u * width)] = '.';
    for (const Timed& x : tl.stages[size_t(st)]) {
      std::string label = cat(op_name(x.action.op), x.action.micro);
      if (s.virt > 1) label += char('a' + x.action.chunk);
      const int a = int(x.start + 0.5), b = int(x.end + 0.5);
      std::string cell(size_t((b - a) * width - 1), '-');
      cell.replace(0, label.size(), label);
      row.replace(size_t(a * width), cell.size(), cell);
    }
    while (!row.empty() && row.back() == ' ') row.pop_back();
    out += cat("stage ", st, " |", row, "\n");
  }
  for (int st = 0; st < s.stages; ++st)
    out += cat("stage ", st, ": in flight <= ", max_in_flight(s, st), ", bubble ",
               fixed3(tl.bubble(st)), "\n");
  out += cat("bubble ", fixed3(tl.bubble(0)), " (stage 0, simulated) vs formula ",
             fixed3(bubble_formula(s)),
             s.kind == ScheduleKind::interleaved ? " = (P-1)/(V*M+P-1)"
             : s.kind == ScheduleKind::zb        ? " = (P-1)/(3M+P-1) for F = B = W"
                                                 : " = (P-1)/(M+P-1)",
             "\n");
  return out;
}

}  // namespace strata::parallel::pipeline
