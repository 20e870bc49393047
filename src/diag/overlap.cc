// Interval arithmetic for the overlap report (terms in overlap.h).
#include "diag/overlap.h"

#include <algorithm>
#include <cstdio>
#include <regex>

#include "core/error.h"
#include "nlohmann/json.hpp"

namespace strata::diag {

namespace {

using Intervals = std::vector<std::pair<int64_t, int64_t>>;  // [start, end), sorted, disjoint

Intervals union_of(const std::vector<Span>& spans, const char* cat_name, int64_t lo, int64_t hi) {
  Intervals v;
  for (const Span& s : spans)
    if (s.cat == cat_name) {
      int64_t a = std::max(s.start_ns, lo), b = std::min(s.end_ns, hi);
      if (a < b) v.emplace_back(a, b);
    }
  std::sort(v.begin(), v.end());
  Intervals out;
  for (auto& iv : v) {
    if (!out.empty() && iv.first <= out.back().second) out.back().second = std::max(out.back().second, iv.second);
    else out.push_back(iv);
  }
  return out;
}

int64_t length(const Intervals& v) {
  int64_t n = 0;
  for (auto& [a, b] : v) n += b - a;
  return n;
}

int64_t intersection(const Intervals& x, const Intervals& y) {
  int64_t n = 0;
  size_t i = 0, j = 0;
  while (i < x.size() && j < y.size()) {
    int64_t a = std::max(x[i].first, y[j].first), b = std::min(x[i].second, y[j].second);
    if (a < b) n += b - a;
    (x[i].second < y[j].second ? i : j)++;
  }
  return n;
}

double ms(int64_t ns) { return double(ns) * 1e-6; }

void add_to(StepOverlap& s, const RankStepOverlap& r) {
  ++s.ranks;
  s.step_ms += ms(r.step_ns);
  s.compute_ms += ms(r.compute_ns);
  s.comm_ms += ms(r.comm_ns);
  s.exposed_ms += ms(r.exposed_ns);
  s.hidden_ms += ms(r.hidden_ns);
  if (s.worst_rank < 0 || ms(r.exposed_ns) > s.worst_exposed_ms) {
    s.worst_rank = r.rank;
    s.worst_exposed_ms = ms(r.exposed_ns);
  }
}

// Sums -> means over ranks (the share from the sums first).
void finish(StepOverlap& s) {
  s.hidden_share = s.comm_ms > 0 ? s.hidden_ms / s.comm_ms : 0;
  if (s.ranks == 0) return;
  for (double* x : {&s.step_ms, &s.compute_ms, &s.comm_ms, &s.exposed_ms, &s.hidden_ms}) *x /= s.ranks;
}

}  // namespace

RankStepOverlap measure_window(const std::vector<Span>& spans, int64_t start_ns, int64_t end_ns) {
  RankStepOverlap r;
  Intervals comm = union_of(spans, "comm", start_ns, end_ns);
  Intervals compute = union_of(spans, "compute", start_ns, end_ns);
  r.step_ns = end_ns - start_ns;
  r.comm_ns = length(comm);
  r.compute_ns = length(compute);
  r.hidden_ns = intersection(comm, compute);
  r.exposed_ns = r.comm_ns - r.hidden_ns;
  return r;
}

OverlapReport compute_overlap(const std::map<int, std::vector<Span>>& spans_by_rank) {
  static const std::regex step_name(R"(step\s+(-?\d+))");
  OverlapReport rep;
  std::map<int64_t, StepOverlap> steps;
  rep.total.step = -1;
  for (auto& [rank, spans] : spans_by_rank) {
    std::vector<std::pair<int64_t, const Span*>> windows;
    for (const Span& s : spans) {
      std::smatch m;
      if (s.cat == "step" && std::regex_search(s.name, m, step_name)) windows.emplace_back(std::stoll(m[1]), &s);
    }
    if (windows.empty()) {
      if (spans.empty()) {
        rep.notes.push_back(cat("rank ", rank, ": no complete events in its trace"));
        continue;
      }
      int64_t lo = INT64_MAX, hi = INT64_MIN;
      for (const Span& s : spans) lo = std::min(lo, s.start_ns), hi = std::max(hi, s.end_ns);
      RankStepOverlap r = measure_window(spans, lo, hi);
      r.rank = rank;
      rep.per_rank.push_back(r);
      rep.notes.push_back(cat("rank ", rank, ": no \"step N\" spans (cat \"step\"); measured its whole trace as one window"));
      continue;
    }
    for (auto& [step, s] : windows) {
      RankStepOverlap r = measure_window(spans, s->start_ns, s->end_ns);
      r.rank = rank;
      r.step = step;
      rep.per_rank.push_back(r);
    }
  }
  std::stable_sort(rep.per_rank.begin(), rep.per_rank.end(), [](auto& a, auto& b) {
    return a.step != b.step ? a.step < b.step : a.rank < b.rank;
  });
  for (const RankStepOverlap& r : rep.per_rank) {
    StepOverlap& s = steps[r.step];
    s.step = r.step;
    add_to(s, r);
    add_to(rep.total, r);
  }
  for (auto& [k, s] : steps) {
    finish(s);
    rep.steps.push_back(s);
  }
  finish(rep.total);
  bool any_comm = rep.total.comm_ms > 0;
  if (!rep.per_rank.empty() && !any_comm) rep.notes.push_back("no spans with cat \"comm\": nothing to overlap");
  return rep;
}

std::string format_overlap(const OverlapReport& r) {
  std::string out =
      "  step  ranks    step ms  compute ms    comm ms  exposed ms  hidden   worst rank (exposed ms)\n";
  char buf[200];
  auto row = [&](const StepOverlap& s, const std::string& label) {
    std::string share = s.comm_ms > 0 ? cat(int(s.hidden_share * 1000 + 0.5) / 10.0, "%") : "-";
    std::snprintf(buf, sizeof buf, "%6s  %5d  %9.3f  %10.3f  %9.3f  %10.3f  %6s   %d (%.3f)\n", label.c_str(), s.ranks,
                  s.step_ms, s.compute_ms, s.comm_ms, s.exposed_ms, share.c_str(), s.worst_rank, s.worst_exposed_ms);
    out += buf;
  };
  for (const StepOverlap& s : r.steps) row(s, s.step < 0 ? "whole" : std::to_string(s.step));
  if (r.steps.size() > 1) row(r.total, "all");
  out += "(times are means over ranks; hidden = share of communication time covered by compute)\n";
  for (auto& n : r.notes) out += "Note: " + n + "\n";
  return out;
}

nlohmann::json overlap_json(const OverlapReport& r) {
  auto step_json = [](const StepOverlap& s) {
    return nlohmann::json{{"step", s.step}, {"ranks", s.ranks}, {"step_ms", s.step_ms}, {"compute_ms", s.compute_ms},
                          {"comm_ms", s.comm_ms}, {"exposed_ms", s.exposed_ms}, {"hidden_ms", s.hidden_ms},
                          {"hidden_share", s.hidden_share}, {"worst_rank", s.worst_rank},
                          {"worst_exposed_ms", s.worst_exposed_ms}};
  };
  nlohmann::json steps = nlohmann::json::array(), ranks = nlohmann::json::array();
  for (auto& s : r.steps) steps.push_back(step_json(s));
  for (auto& x : r.per_rank)
    ranks.push_back({{"rank", x.rank}, {"step", x.step}, {"step_ms", ms(x.step_ns)}, {"compute_ms", ms(x.compute_ns)},
                     {"comm_ms", ms(x.comm_ns)}, {"hidden_ms", ms(x.hidden_ns)}, {"exposed_ms", ms(x.exposed_ns)}});
  return {{"steps", steps}, {"total", step_json(r.total)}, {"per_rank", ranks}, {"notes", r.notes}};
}

}  // namespace strata::diag
