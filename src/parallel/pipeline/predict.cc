// Pipeline step time from the schedule: terms in parallel/pipeline/predict.h.
#include "parallel/pipeline/predict.h"

#include <algorithm>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>

#include "cost/bubble.h"

namespace strata::parallel::pipeline {

namespace {

// Schedules are generated once per shape (the planner asks for the same ones many times).
std::shared_ptr<const Schedule> schedule_of(ScheduleKind kind, int P, int M, int V) {
  static std::mutex mu;
  static std::map<std::tuple<int, int, int, int>, std::shared_ptr<const Schedule>> cache;
  const std::tuple<int, int, int, int> key{int(kind), P, M, V};
  std::lock_guard lk(mu);
  auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  if (cache.size() >= 4096) cache.clear();  // bounded; rebuilt on demand
  return cache[key] = std::make_shared<const Schedule>(make_schedule(kind, P, M, V, false));
}

double makespan(ScheduleKind kind, int P, int M, int V, const Costs& c) {
  if (c.virt.empty() && kind == ScheduleKind::gpipe) return cost::gpipe_makespan(P, M, c.f, c.b, c.transfer);
  return simulate(*schedule_of(kind, P, M, V), c).makespan;
}

// Compute seconds of one micro-batch on each stage, summed over its chunks.
std::vector<double> busy_per_micro(int P, int V, const Costs& c) {
  std::vector<double> busy(size_t(P), 0);
  for (int s = 0; s < P; ++s)
    for (int ch = 0; ch < V; ++ch) {
      const Costs::Virtual k =
          c.virt.empty() ? Costs::Virtual{c.f, c.b, c.w} : c.virt.at(size_t(ch * P + s));
      busy[size_t(s)] += k.f + k.b + k.w;
    }
  return busy;
}

}  // namespace

Prediction predict(ScheduleKind kind, int P, int M, int V, const Costs& c, int exact_up_to) {
  Costs ideal = c;
  ideal.transfer = 0;
  auto span = [&](const Costs& k) {
    const int M1 = 3 * P + M % P, M2 = M1 + P;
    if (M <= std::max(exact_up_to, M2)) return makespan(kind, P, M, V, k);
    const double t1 = makespan(kind, P, M1, V, k), t2 = makespan(kind, P, M2, V, k);
    return t1 + (t2 - t1) * double(M - M1) / P;
  };
  const std::vector<double> busy = busy_per_micro(P, V, c);
  Prediction p;
  p.makespan = span(c);
  if (c.transfer <= 0)
    p.makespan_ideal = p.makespan;
  else if (c.virt.empty() && kind != ScheduleKind::zb)  // equal stages: the formula's makespan
    p.makespan_ideal = M * busy[0] / (1 - bubble_formula(kind, P, M, V));
  else
    p.makespan_ideal = span(ideal);
  double bub = 0, bub_ideal = 0;
  for (double b : busy) {
    p.busy_mean += M * b / P;
    bub += p.makespan > 0 ? (1 - M * b / p.makespan) / P : 0;
    bub_ideal += p.makespan_ideal > 0 ? (1 - M * b / p.makespan_ideal) / P : 0;
  }
  p.bubble = bub;
  p.bubble_ideal = bub_ideal;
  return p;
}

std::vector<int> predicted_slots(ScheduleKind kind, int P, int M, int V, int stage) {
  if (kind == ScheduleKind::gpipe) return std::vector<int>(size_t(V), std::max(M, 1));
  const std::shared_ptr<const Schedule> s = schedule_of(kind, P, M <= 4 * P ? M : 4 * P + M % P, V);
  std::vector<int> slots;
  for (int c = 0; c < V; ++c) slots.push_back(std::max(1, chunk_slots(*s, stage, c)));
  return slots;
}

}  // namespace strata::parallel::pipeline
