// The HTML report: sections of charts and tables over the runs (terms in report.h).
#include "report/report.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
#include <iterator>
#include <map>
#include <set>

#include "core/error.h"
#include "cost/reliability.h"
#include "report/svg.h"

namespace strata::report {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr size_t kMaxEventRows = 200;

const char* color(size_t i) { return kPalette[i % 8]; }

// The step-time parts, in stacking order, with fixed colours across charts.
struct Part {
  const char* name;
  const char* color;
};
const Part kParts[] = {{"compute", "#4c78a8"},          {"optimizer", "#72b7b2"},
                       {"data wait", "#eeca3b"},        {"exposed comm (dp)", "#e45756"},
                       {"pipeline bubble", "#b279a2"},  {"straggler wait", "#ff9da6"},
                       {"checkpoint stall", "#9d755d"}, {"outer sync (replica groups)", "#f58518"},
                       {"other", "#bab0ac"}};
constexpr int kNumParts = int(std::size(kParts));

std::string fixed(double v, int digits) {
  if (!std::isfinite(v)) return "–";
  char b[48];
  std::snprintf(b, sizeof b, "%.*f", digits, v);
  return b;
}

std::string section(const std::string& id, const std::string& title, const std::string& body) {
  return "<section id=\"" + id + "\"><h2>" + escape(title) + "</h2>" + body + "</section>\n";
}

std::string note(const std::string& text) { return "<p class=\"note\">" + escape(text) + "</p>"; }

// Checkpoint and restart markers for curves over steps.
std::vector<LineChart::Mark> event_marks(const std::vector<RunData>& runs) {
  std::vector<LineChart::Mark> marks;
  for (const RunData& r : runs)
    for (const Event& e : r.events) {
      if (e.kind == "restart")
        marks.push_back({double(e.step), "#d62728", r.label + ": " + e.text});
      else if (e.kind == "fault")
        marks.push_back({double(e.step), "#000000", r.label + ": " + e.text});
    }
  return marks;
}

Series step_series(const RunData& r, size_t i, double StepRow::*field, double scale = 1) {
  Series s;
  s.name = r.label;
  s.color = color(i);
  s.x.reserve(r.steps.size());
  s.y.reserve(r.steps.size());
  for (const StepRow& row : r.steps) {
    s.x.push_back(double(row.step));
    s.y.push_back(row.*field * scale);
  }
  return s;
}

std::string loss_section(const std::vector<RunData>& runs) {
  LineChart c{"Loss (train and held-out)", "step", "loss (nats/token)", {}, false, event_marks(runs)};
  std::set<double> floors;
  for (size_t i = 0; i < runs.size(); ++i) {
    const RunData& r = runs[i];
    Series train = step_series(r, i, &StepRow::loss);
    train.name = r.label + " train";
    c.series.push_back(train);
    if (!r.evals.empty()) {
      Series ev{r.label + " eval", color(i), {}, {}, true, true};
      for (const EvalRow& e : r.evals) ev.x.push_back(double(e.step)), ev.y.push_back(e.loss);
      c.series.push_back(ev);
    }
    const double f = r.entropy_floor();
    if (std::isfinite(f)) floors.insert(f);
  }
  // The entropy floor spans the steps of every run.
  double first = std::numeric_limits<double>::infinity(), last = -first;
  for (const RunData& r : runs)
    for (const StepRow& s : r.steps) first = std::min(first, double(s.step)), last = std::max(last, double(s.step));
  for (double f : floors)
    if (std::isfinite(first))
      c.series.push_back({"entropy floor " + fixed(f, 4), "#555555", {first, last}, {f, f}, true, false});
  std::string body = render(c);
  std::string rows;
  for (const RunData& r : runs) {
    const double f = r.entropy_floor();
    const double ev = r.evals.empty() ? kNaN : r.evals.back().loss;
    rows += "<tr><td>" + escape(r.label) + "</td><td>" +
            fixed(r.steps.empty() ? kNaN : r.steps.back().loss, 4) + "</td><td>" + fixed(ev, 4) +
            "</td><td>" + fixed(f, 4) + "</td><td>" + (std::isfinite(f) && std::isfinite(ev) ? fixed(ev - f, 4) : "–") +
            "</td></tr>";
  }
  body += "<table><tr><th>run</th><th>last train loss</th><th>last eval loss</th><th>entropy "
          "floor</th><th>eval − floor</th></tr>" + rows + "</table>";
  if (floors.empty()) body += note("No entropy floor: the data's entropy is not known (only the synthetic corpus has one).");
  return section("loss", "Loss", body);
}

std::string throughput_section(const std::vector<RunData>& runs) {
  LineChart t{"Throughput", "step", "tokens/s", {}, true, event_marks(runs)};
  LineChart m{"Model FLOPs utilisation", "step", "MFU (%)", {}, true, {}};
  for (size_t i = 0; i < runs.size(); ++i) {
    t.series.push_back(step_series(runs[i], i, &StepRow::tokens_per_s));
    m.series.push_back(step_series(runs[i], i, &StepRow::mfu, 100));
  }
  std::string rows;
  for (const RunData& r : runs)
    rows += "<tr><td>" + escape(r.label) + "</td><td>" +
            fixed(number(r.summary, "median_tokens_per_s"), 0) + "</td><td>" +
            fixed(100 * number(r.summary, "median_mfu"), 1) + "</td><td>" +
            fixed(number(r.summary, "median_ms"), 2) + "</td><td>" +
            fixed(number(r.summary, "peak_gflops"), 1) + "</td></tr>";
  return section("throughput", "Tokens/s and MFU",
                 render(t) + render(m) +
                     "<table><tr><th>run</th><th>median tokens/s</th><th>median MFU %</th><th>median "
                     "ms/step</th><th>peak GFLOP/s (per rank)</th></tr>" + rows + "</table>");
}

// Mean of each step-time part over buckets of steps (at most 60 bars per run).
std::string split_chart(const RunData& r) {
  std::map<int64_t, double> stall;
  for (const Event& e : r.events)
    if (e.kind == "checkpoint" && std::isfinite(e.value)) stall[e.step] += e.value;
  std::vector<const StepRow*> rows;
  for (const StepRow& s : r.steps)
    if (std::isfinite(s.compute_ms)) rows.push_back(&s);
  if (rows.empty()) return "";
  const size_t buckets = std::min<size_t>(60, rows.size());
  BarChart c{"Step time split: " + r.label, "steps (bucket start)", "ms per step", {}, {}, true};
  for (const Part& p : kParts) c.parts.push_back({p.name, p.color, std::vector<double>(buckets, 0)});
  for (size_t b = 0; b < buckets; ++b) {
    const size_t lo = b * rows.size() / buckets, hi = (b + 1) * rows.size() / buckets;
    c.categories.push_back(std::to_string(rows[lo]->step));
    double sum[kNumParts] = {};
    for (size_t k = lo; k < hi; ++k) {
      const StepRow& s = *rows[k];
      const double strag = std::isfinite(s.straggler_wait_ms) ? s.straggler_wait_ms : 0;
      // The outer sync's wait is in comm_wait_ms and the rest of it in optimizer_ms: both move
      // to its own part.
      const double outer = std::isfinite(s.outer_ms) ? s.outer_ms : 0;
      const double outer_wait = std::isfinite(s.outer_wait_ms) ? std::min(s.outer_wait_ms, outer) : 0;
      const double comm = std::max(0.0, s.comm_wait_ms - strag - outer_wait);
      const double optimizer = std::max(0.0, s.optimizer_ms - (outer - outer_wait));
      const double ck = stall.count(s.step) ? stall[s.step] : 0;
      const double parts[kNumParts] = {s.compute_ms, optimizer, s.data_ms, comm, 0, strag, ck, outer, 0};
      double known = 0;
      for (int p = 0; p < kNumParts - 1; ++p) sum[p] += parts[p], known += p == 6 ? 0 : parts[p];
      sum[kNumParts - 1] += std::max(0.0, s.ms - known);
    }
    for (int p = 0; p < kNumParts; ++p) c.parts[size_t(p)].values[b] = sum[p] / double(hi - lo);
  }
  return render(c);
}

std::string split_section(const std::vector<RunData>& runs) {
  std::string body;
  for (const RunData& r : runs) {
    std::string chart = split_chart(r);
    body += chart.empty() ? note(r.label + ": metrics.jsonl has no per-step split (data_ms, "
                                           "compute_ms, optimizer_ms, comm_wait_ms); older runs lack it.")
                          : chart;
  }
  body += note("Rank 0's view. compute = forward + backward; exposed comm = time blocked in "
               "communication less the straggler wait; straggler wait = how much longer the "
               "slowest rank computed (measured on steps that run a straggler check); checkpoint "
               "stall = time the save held training; outer sync = replica groups' exchanges and merges "
               "(docs/diloco.md); other = the step's remaining time.");
  return section("split", "Where each step's time goes", body);
}

// RLHF runs: the gold score against iterations (DPO: against steps, at its evaluations), and
// where each iteration of the generating algorithms went (at most 60 bars per run).
std::string rlhf_section(const std::vector<RunData>& runs) {
  LineChart gold{"Gold score (RLHF)", "iteration (DPO: step)", "gold score", {}, false, {}};
  std::string bars, rows;
  for (size_t i = 0; i < runs.size(); ++i) {
    const RunData& r = runs[i];
    if (r.rl.empty()) continue;
    Series s{r.label, color(i), {}, {}, false, r.rl.size() < 30};
    for (const RlRow& row : r.rl) s.x.push_back(double(row.iteration)), s.y.push_back(row.gold);
    gold.series.push_back(s);
    double t[3] = {0, 0, 0};
    std::vector<const RlRow*> timed;
    for (const RlRow& row : r.rl)
      if (std::isfinite(row.generate_s)) timed.push_back(&row), t[0] += row.generate_s, t[1] += row.score_s, t[2] += row.train_s;
    const double total = t[0] + t[1] + t[2];
    rows += "<tr><td>" + escape(r.label) + "</td><td>" + escape(r.summary.value("algo", std::string("?"))) + "</td><td>" +
            fixed(r.rl.front().gold, 3) + "</td><td>" + fixed(r.rl.back().gold, 3) + "</td><td>" +
            (total > 0 ? fixed(100 * t[0] / total, 0) + " / " + fixed(100 * t[1] / total, 0) + " / " +
                             fixed(100 * t[2] / total, 0)
                       : std::string("–")) + "</td></tr>";
    if (timed.empty()) continue;
    const size_t buckets = std::min<size_t>(60, timed.size());
    BarChart c{"Iteration time split: " + r.label, "iterations (bucket start)", "seconds per iteration", {}, {}, true};
    const char* names[3] = {"generate", "score", "train"};
    const char* colors[3] = {"#f58518", "#72b7b2", "#4c78a8"};
    for (int p = 0; p < 3; ++p) c.parts.push_back({names[p], colors[p], std::vector<double>(buckets, 0)});
    for (size_t b = 0; b < buckets; ++b) {
      const size_t lo = b * timed.size() / buckets, hi = (b + 1) * timed.size() / buckets;
      c.categories.push_back(std::to_string(timed[lo]->iteration));
      for (size_t k = lo; k < hi; ++k) {
        c.parts[0].values[b] += timed[k]->generate_s / double(hi - lo);
        c.parts[1].values[b] += timed[k]->score_s / double(hi - lo);
        c.parts[2].values[b] += timed[k]->train_s / double(hi - lo);
      }
    }
    bars += render(c);
  }
  if (gold.series.empty()) return "";
  return section("rlhf", "RLHF: gold score and the iteration's split",
                 render(gold) + bars +
                     "<table><tr><th>run</th><th>algorithm</th><th>first gold</th><th>last gold</th><th>generate / "
                     "score / train %</th></tr>" + rows + "</table>" +
                     note("generate = sampling the rollout; score = the log-probabilities, values and rewards "
                          "of the scoring models; train = the updates (docs/rlhf.md). DPO generates nothing "
                          "to train on: its gold score is measured at its evaluations."));
}

// MoE runs: each block's max/mean expert load over the steps, and the spread of its balancing
// bias when the run balances without an auxiliary loss.
std::string moe_section(const std::vector<RunData>& runs) {
  LineChart load{"MoE load: max/mean tokens per expert", "step", "max / mean", {}, false, event_marks(runs)};
  LineChart bias{"MoE balancing bias: max - min per block", "step", "bias spread", {}, true, {}};
  std::string rows;
  for (size_t i = 0; i < runs.size(); ++i) {
    const RunData& r = runs[i];
    size_t blocks = 0;
    for (const StepRow& s : r.steps) blocks = std::max(blocks, s.moe_max_over_mean.size());
    if (blocks == 0) continue;
    double last = 0;
    for (size_t m = 0; m < blocks; ++m) {
      Series l{cat(r.label, " block ", m), color(i), {}, {}, m > 0, false};
      Series b = l;
      for (const StepRow& s : r.steps) {
        if (m >= s.moe_max_over_mean.size()) continue;
        l.x.push_back(double(s.step)), l.y.push_back(s.moe_max_over_mean[m]);
        b.x.push_back(double(s.step)), b.y.push_back(s.moe_bias_spread[m]);
      }
      if (!l.y.empty()) last += l.y.back() / double(blocks);
      load.series.push_back(l);
      if (!b.y.empty() && std::isfinite(b.y.back())) bias.series.push_back(b);
    }
    rows += "<tr><td>" + escape(r.label) + "</td><td>" + std::to_string(blocks) + "</td><td>" + fixed(last, 2) +
            "</td></tr>";
  }
  if (load.series.empty()) return "";
  return section("moe", "MoE load",
                 render(load) + (bias.series.empty() ? std::string() : render(bias)) +
                     "<table><tr><th>run</th><th>MoE blocks</th><th>last max/mean (mean of the blocks)</th></tr>" +
                     rows + "</table>" +
                     note("1.00 is a perfect balance. Balancing: --aux-loss-coef (Switch) or "
                          "--router-bias-update-rate (a bias on the top-k choice, docs/moe.md)."));
}

std::string comm_section(const std::vector<RunData>& runs) {
  LineChart w{"Communication wait (rank 0)", "step", "ms per step", {}, true, {}};
  BarChart o{"Gradient communication hidden behind compute (all ranks, traced)", "run", "ms", {}, {}, true};
  o.parts = {{"hidden", "#54a24b", {}}, {"exposed", "#e45756", {}}};
  std::string rows;
  for (size_t i = 0; i < runs.size(); ++i) {
    const RunData& r = runs[i];
    Series s = step_series(r, i, &StepRow::comm_wait_ms);
    w.series.push_back(s);
    if (r.summary.is_object() && r.summary.contains("overlap")) {
      const json& ov = r.summary["overlap"];
      const double total = number(ov, "gradient_comm_ms"), hidden = number(ov, "hidden_ms");
      o.categories.push_back(r.label);
      o.parts[0].values.push_back(hidden);
      o.parts[1].values.push_back(total - hidden);
      rows += "<tr><td>" + escape(r.label) + "</td><td>" + fixed(total, 1) + "</td><td>" +
              fixed(hidden, 1) + "</td><td>" + fixed(100 * number(ov, "hidden_share"), 1) + "</td></tr>";
    }
  }
  std::string body = render(w);
  if (o.categories.empty())
    body += note("No overlap figures: runs with --trace on 2 or more ranks record them in summary.json.");
  else
    body += render(o) + "<table><tr><th>run</th><th>gradient comm ms</th><th>hidden ms</th><th>hidden "
                        "%</th></tr>" + rows + "</table>";
  return section("comm", "Communication overlap", body);
}

std::string memory_section(const std::vector<RunData>& runs) {
  static const char* cats[] = {"parameters", "gradients", "optimizer", "activations", "comm", "other"};
  std::string body;
  for (size_t i = 0; i < runs.size(); ++i) {
    const RunData& r = runs[i];
    if (!r.summary.is_object() || !r.summary.contains("memory")) continue;
    const json& mem = r.summary["memory"];
    BarChart c{"Memory per rank: " + r.label, "category", "MiB (peak)", {}, {}, false};
    c.parts = {{"measured (rank 0)", color(i), {}}, {"planner formula", "#999999", {}}};
    const json pred = r.summary.value("model_states_formula", json());
    std::string rows;
    for (const char* k : cats) {
      const double got = mem.contains(k) ? number(mem[k], "peak") / 1048576.0 : kNaN;
      const double want = number(pred, k) / 1048576.0;
      c.categories.push_back(k);
      c.parts[0].values.push_back(got);
      c.parts[1].values.push_back(want);
      rows += std::string("<tr><td>") + k + "</td><td>" + fixed(got, 3) + "</td><td>" +
              (std::isfinite(want) ? fixed(want, 3) : "–") + "</td></tr>";
    }
    body += render(c) + "<table><tr><th>" + escape(r.label) +
            "</th><th>measured MiB</th><th>planner MiB</th></tr>" + rows + "</table>";
  }
  if (body.empty()) return section("memory", "Memory", note("No summary.json with memory figures."));
  body += note("The planner predicts model states (parameters, gradients, optimizer; "
               "cost/memory.h) for data-parallel runs; activations and buffers of this CPU "
               "engine are measured only.");
  return section("memory", "Memory per rank", body);
}

// What a failure costs each run (cost/reliability.h's lost work per failure, from its median
// step and checkpoint intervals), beside the restarts it measured.
std::string recovery_table(const std::vector<RunData>& runs) {
  std::string rows;
  for (const RunData& r : runs) {
    const double step_s = number(r.summary, "median_ms") / 1e3;
    const int64_t disk_every = r.summary.contains("ckpt") ? r.summary["ckpt"].value("every", int64_t(0)) : 0;
    const int64_t mem_every =
        r.summary.contains("mem_ckpt") ? r.summary["mem_ckpt"].value("every", int64_t(0)) : 0;
    int restarts = 0, from_memory = 0;
    std::string lost;
    for (const Event& e : r.events) {
      if (e.kind != "restart") continue;
      ++restarts;
      from_memory += e.text.find("in-memory copy") != std::string::npos;
      if (!std::isnan(e.value)) lost += cat(lost.empty() ? "" : ", ", int64_t(e.value));
    }
    if (!(step_s > 0) || (disk_every == 0 && mem_every == 0 && restarts == 0)) continue;
    auto cell = [&](cost::Recovery m, int64_t every) {
      if (every == 0) return std::string("–");
      const double s = cost::lost_work_per_failure_s(m, double(every) * step_s, cost::measured_restart_s(m));
      return cat(fixed(s, 2), " s (every ", every, ")");
    };
    const size_t live = r.summary.contains("live_recovery") ? r.summary["live_recovery"].size() : 0;
    rows += "<tr><td>" + escape(r.label) + "</td><td>" + cell(cost::Recovery::disk, disk_every) +
            "</td><td>" + cell(cost::Recovery::memory, mem_every) + "</td><td>" +
            cell(cost::Recovery::live, mem_every) + "</td><td>" + std::to_string(restarts) +
            (restarts ? cat(" (", from_memory, " from memory; steps redone: ", lost.empty() ? "?" : lost, ")")
                      : "") +
            (live ? cat("; ", live, " live re-formation(s)") : "") + "</td></tr>";
  }
  if (rows.empty()) return "";
  return "<table><tr><th>run</th><th>lost per failure, from disk</th><th>from memory</th>"
         "<th>live recovery</th><th>restarts measured</th></tr>" +
         rows + "</table>" +
         note(cat("Lost work per failure (cost/reliability.h): from disk every N steps of t, N·t/2 + R; "
                  "from in-memory copies every K steps, at most K·t + R; R = ",
                  cost::kMeasuredRestartDiskS, " s from disk, ", cost::kMeasuredRestartMemoryS,
                  " s from memory, ", cost::kMeasuredRestartLiveS,
                  " s re-forming in process (--recovery live, the same copies), measured on one host "
                  "(docs/checkpoints.md). A lost host falls back to disk."));
}

std::string events_section(const std::vector<RunData>& runs) {
  LineChart c{"Checkpoint stalls", "step", "stall ms", {}, true, event_marks(runs)};
  std::string rows;
  size_t shown = 0, total = 0;
  std::map<std::string, int> counts;
  for (size_t i = 0; i < runs.size(); ++i) {
    Series s{runs[i].label, color(i), {}, {}, false, true};
    for (const Event& e : runs[i].events) {
      ++counts[e.kind];
      if (e.kind == "checkpoint") s.x.push_back(double(e.step)), s.y.push_back(e.value);
      ++total;
      if (shown < kMaxEventRows) {
        ++shown;
        rows += "<tr class=\"ev-" + escape(e.kind.substr(0, e.kind.find(' '))) + "\"><td>" +
                escape(runs[i].label) + "</td><td>" + std::to_string(e.step) + "</td><td>" +
                escape(e.kind) + "</td><td>" + escape(e.text) + "</td></tr>";
      }
    }
    if (!s.x.empty()) c.series.push_back(s);
  }
  if (total == 0) return section("events", "Checkpoints, restarts, stragglers and faults",
                                 note("No checkpoint saves, restarts, stragglers or faults recorded.") +
                                     recovery_table(runs));
  std::string summary;
  for (const auto& [k, n] : counts) summary += (summary.empty() ? "" : ", ") + std::to_string(n) + " " + k;
  std::string body = note("Events: " + summary + ".");
  if (!c.series.empty() || !c.vlines.empty()) body += render(c);
  body += "<table><tr><th>run</th><th>step</th><th>event</th><th>what</th></tr>" + rows + "</table>";
  if (total > shown) body += note(std::to_string(total - shown) + " more events not listed.");
  body += recovery_table(runs);
  return section("events", "Checkpoints, restarts, stragglers and faults", body);
}

std::string scaling_section(const RunData& r) {
  const json& s = r.scaling;
  if (!s.contains("points") || !s["points"].is_array() || s["points"].empty())
    return section("scaling", "Scaling: " + r.label, note("scaling.json holds no points."));
  LineChart sp{"Speedup (" + s.value("kind", std::string("?")) + " scaling)", "ranks", "speedup", {}, true, {}};
  Series meas{"measured", "#1f77b4", {}, {}, false, true}, lin{"linear", "#555555", {}, {}, true, false};
  BarChart dec{"Step time decomposition", "ranks", "ms per step", {}, {}, true};
  for (const Part& p : kParts) dec.parts.push_back({p.name, p.color, {}});
  dec.parts.push_back({"beyond ideal compute (contention)", "#f58518", {}});
  std::string rows;
  for (const json& p : s["points"]) {
    const double n = number(p, "nproc");
    meas.x.push_back(n), meas.y.push_back(number(p, "speedup"));
    lin.x.push_back(n), lin.y.push_back(n);
    dec.categories.push_back(cat("N=", int(n), p.value("oversubscribed", false) ? "*" : ""));
    const json parts = p.value("parts_ms", json::object());
    const double excess = std::max(0.0, number(p, "compute_excess_ms"));
    for (size_t k = 0; k < dec.parts.size(); ++k) {
      double v = k + 1 == dec.parts.size() ? excess : number(parts, dec.parts[k].name.c_str());
      if (dec.parts[k].name == "compute") v -= excess;  // the contention part is stacked apart
      dec.parts[k].values.push_back(v);
    }
    rows += "<tr><td>" + fixed(n, 0) + (p.value("oversubscribed", false) ? " (oversubscribed)" : "") +
            "</td><td>" + fixed(number(p, "tokens_per_s"), 0) + "</td><td>" + fixed(number(p, "speedup"), 2) +
            "</td><td>" + fixed(100 * number(p, "efficiency"), 1) + "</td><td>" + fixed(number(p, "step_ms"), 2) +
            "</td><td>" + fixed(number(p, "predicted_ms"), 2) + "</td><td>" +
            fixed(100 * number(p, "prediction_error"), 1) + "</td></tr>";
  }
  sp.series = {meas, lin};
  std::string body = render(sp) + render(dec) +
                     "<table><tr><th>ranks</th><th>tokens/s</th><th>speedup</th><th>efficiency %</th><th>step "
                     "ms</th><th>planner ms</th><th>planner error %</th></tr>" + rows + "</table>";
  body += note(cat("cpu: ", s.value("cpu", std::string("?")), "; ", s.value("cores", 0),
                   " cores; ranks marked * share cores (oversubscribed): their extra compute "
                   "time is the 'beyond ideal compute' part."));
  return section("scaling", "Scaling study: " + r.label, body);
}

// Every directory; the swatch is the colour of the run's curves (a study directory has none).
std::string runs_table(const std::vector<RunData>& all, const std::vector<RunData>& drawn) {
  std::string rows;
  for (const RunData& r : all) {
    const json& s = r.summary;
    std::string par;
    if (s.is_object() && s.contains("parallel")) par = s["parallel"].value("describe", std::string());
    std::string swatch;
    for (size_t i = 0; i < drawn.size(); ++i)
      if (drawn[i].dir == r.dir)
        swatch = "<span class=\"sw\" style=\"background:" + std::string(color(i)) + "\"></span>";
    rows += "<tr><td>" + swatch + escape(r.label) + "</td><td>" + escape(r.dir) + "</td><td>" + escape(r.model_text()) +
            "</td><td>" + fixed(number(s, "world"), 0) + "</td><td>" + escape(par) + "</td><td>" +
            std::to_string(r.steps.size()) + "</td><td>" + fixed(number(s, "wall_s"), 1) + "</td></tr>";
  }
  return "<table><tr><th>run</th><th>directory</th><th>model</th><th>ranks</th><th>parallel</th><th>steps "
         "read</th><th>wall s</th></tr>" + rows + "</table>";
}

const char* kStyle =
    "body{font-family:sans-serif;margin:24px;color:#222;max-width:1600px}"
    "h1{font-size:20px}h2{font-size:16px;border-bottom:1px solid #ddd;padding-bottom:4px}"
    "section{margin-bottom:28px}svg.chart{display:inline-block;margin:6px 12px 6px 0;vertical-align:top}"
    "table{border-collapse:collapse;font-size:12px;margin:6px 0}td,th{border:1px solid #ddd;"
    "padding:3px 8px;text-align:right}td:first-child,th:first-child{text-align:left}"
    ".note{font-size:12px;color:#555}.warn{background:#fff4e5;border:1px solid #f0b45a;padding:8px 12px;"
    "font-size:13px}.sw{display:inline-block;width:10px;height:10px;margin-right:6px}";

}  // namespace

std::vector<RunData> load_runs(const std::vector<std::string>& dirs, std::vector<std::string>& warnings) {
  std::vector<RunData> runs;
  for (const std::string& d : dirs) {
    try {
      RunData r = load_run(d);
      std::vector<RunData> points;
      if (r.scaling.is_object() && r.scaling.contains("points") && r.scaling["points"].is_array())
        for (const json& p : r.scaling["points"]) {
          const std::string sub = (fs::path(d) / p.value("run_dir", std::string())).string();
          try {
            RunData pr = load_run(sub);
            pr.label = r.label + " N=" + std::to_string(p.value("nproc", 0));
            points.push_back(std::move(pr));
          } catch (const Error& e) {
            warnings.push_back(e.what());
          }
        }
      runs.push_back(std::move(r));
      for (RunData& p : points) runs.push_back(std::move(p));
    } catch (const Error& e) {
      warnings.push_back(e.what());
    }
  }
  STRATA_CHECK(!runs.empty(), "no readable run directory among the ", dirs.size(), " given",
               warnings.empty() ? "" : ": " + warnings.front());
  return runs;
}

Report build_report(const std::vector<RunData>& all) {
  Report rep;
  std::vector<RunData> runs;  // runs with curves; a study directory alone has none
  std::string studies;
  for (const RunData& r : all) {
    for (const std::string& p : r.problems) rep.warnings.push_back(r.dir + ": " + p);
    if (r.scaling.is_object()) studies += scaling_section(r);
    if (!r.steps.empty() || r.summary.is_object()) runs.push_back(r);
  }
  // Runs of different models: compared, but said loudly.
  std::map<std::string, std::vector<std::string>> models;
  for (const RunData& r : runs)
    if (!r.model_text().empty()) models[r.model_text()].push_back(r.label);
  if (models.size() > 1) {
    std::string text = "the runs are of different models (";
    bool first = true;
    for (const auto& [m, labels] : models) {
      text += std::string(first ? "" : "; ") + labels.front() + (labels.size() > 1 ? cat(" and ", labels.size() - 1, " more") : "") + ": " + m;
      first = false;
    }
    rep.warnings.push_back(text + "): their losses are not directly comparable");
  }
  std::string warn;
  for (const std::string& w : rep.warnings) warn += "<li>" + escape(w) + "</li>";
  std::string& h = rep.html;
  h = "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>strata report</title>"
      "<style>" + std::string(kStyle) + "</style></head><body>\n<h1>strata report: " +
      std::to_string(all.size()) + " run director" + (all.size() == 1 ? "y" : "ies") + "</h1>\n";
  if (!warn.empty()) h += "<div class=\"warn\"><b>Not everything could be read or compared:</b><ul>" + warn + "</ul></div>\n";
  h += runs_table(all, runs);
  h += studies;
  if (!runs.empty()) {
    h += loss_section(runs);
    h += throughput_section(runs);
    h += split_section(runs);
    h += rlhf_section(runs);
    h += moe_section(runs);
    h += comm_section(runs);
    h += memory_section(runs);
    h += events_section(runs);
  }
  h += "</body></html>\n";
  return rep;
}

}  // namespace strata::report
