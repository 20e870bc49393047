// Reading a run directory for the report: every damaged piece is named, the rest is used.
#include "report/run_data.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>

#include "core/error.h"
#include "core/files.h"

namespace strata::report {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {


// A directory would read as an empty file ("holds no step records"), a FIFO would block.
std::string slurp(const fs::path& p) { return read_regular_file(p.string(), "run file"); }

// "lines 3, 9 and 2 more": which lines were skipped.
std::string line_list(const std::vector<int64_t>& lines) {
  std::string s;
  for (size_t i = 0; i < lines.size() && i < 5; ++i)
    s += (i ? ", " : "") + std::to_string(lines[i]);
  if (lines.size() > 5) s += cat(" and ", lines.size() - 5, " more");
  return s;
}

// An RLHF record: an iteration of rlhf ppo|grpo|rloo, or an evaluation of rlhf dpo.
void add_rl_record(RunData& run, const json& j, int64_t at) {
  RlRow r;
  r.iteration = at;
  r.gold = number(j, "gold");
  r.reward = number(j, "reward");
  r.kl = number(j, "kl");
  const json& t = j.contains("time") && j["time"].is_object() ? j["time"] : json::object();
  r.generate_s = number(t, "generate_s");
  r.score_s = number(t, "score_s");
  r.train_s = number(t, "train_s");
  run.rl.push_back(r);
}

void add_record(RunData& run, const json& j) {
  if (!j.contains("step")) {
    if (j.contains("iteration") && j["iteration"].is_number_integer()) add_rl_record(run, j, j["iteration"].get<int64_t>());
    return;
  }
  const int64_t step = j["step"].is_number_integer() ? j["step"].get<int64_t>() : -1;
  if (step < 0) return;
  if (j.contains("gold")) add_rl_record(run, j, step);
  if (j.contains("loss")) {
    StepRow r;
    r.step = step;
    r.loss = number(j, "loss");
    r.tokens_per_s = number(j, "tokens_per_s");
    r.mfu = number(j, "mfu");
    r.ms = number(j, "ms");
    r.tokens = number(j, "tokens");
    r.data_ms = number(j, "data_ms");
    r.compute_ms = number(j, "compute_ms");
    r.optimizer_ms = number(j, "optimizer_ms");
    r.comm_wait_ms = number(j, "comm_wait_ms");
    r.straggler_wait_ms = number(j, "straggler_wait_ms");
    r.outer_ms = j.contains("outer_ms") ? number(j, "outer_ms") : 0;  // absent: no sync that step
    r.outer_wait_ms = j.contains("outer_wait_ms") ? number(j, "outer_wait_ms") : 0;
    if (j.contains("moe") && j["moe"].is_array())
      for (const json& b : j["moe"]) {
        if (!b.is_object()) continue;
        r.moe_max_over_mean.push_back(number(b, "max_over_mean"));
        double spread = kNaN;
        if (b.contains("router_bias") && b["router_bias"].is_array() && !b["router_bias"].empty()) {
          double lo = INFINITY, hi = -INFINITY;
          for (const json& v : b["router_bias"])
            if (v.is_number()) lo = std::min(lo, v.get<double>()), hi = std::max(hi, v.get<double>());
          spread = hi - lo;
        }
        r.moe_bias_spread.push_back(spread);
      }
    run.steps.push_back(r);
    if (j.value("skipped", false))  // the step guard skipped its update (train/spike_guard.h)
      run.events.push_back({step, "skipped step",
                            "update skipped: " + j.value("skip_reason", std::string("?")), 0});
    if (j.contains("stragglers") && j["stragglers"].is_array())
      for (const json& s : j["stragglers"]) {
        if (!s.is_object()) continue;
        const double pct = number(s, "over_median_pct");
        run.events.push_back({step, "straggler",
                              cat("rank ", s.value("rank", -1), " computed ",
                                  std::lround(pct), "% over the median"),
                              pct});
      }
  } else if (j.contains("rolled_back_to")) {  // --spike-action rollback (train/trainer.cc)
    run.events.push_back({step, "rollback",
                          cat("rolled back to the in-memory copy of step ",
                              j.value("rolled_back_to", int64_t(-1)), ", batch skipped: ",
                              j.value("skip_reason", std::string("?"))),
                          0});
  } else if (j.contains("eval_loss")) {
    run.evals.push_back({step, number(j, "eval_loss"), number(j, "floor")});
  } else if (j.contains("ckpt") && j["ckpt"].is_object()) {
    const json& c = j["ckpt"];
    const bool ok = c.value("ok", true);
    const double stall = number(c, "stall_ms");
    run.events.push_back({step, ok ? "checkpoint" : "checkpoint failed",
                          ok ? cat("saved; training stalled ", std::round(stall * 100) / 100, " ms")
                             : "save failed: " + c.value("error", std::string("?")),
                          stall});
  } else if (j.contains("restart")) {
    const double lost = number(j, "steps_lost");
    const bool memory = j.value("resumed_from", std::string()).rfind("in-memory copy", 0) == 0;
    std::string text = cat("restart ", j.value("restart", 0), ": resumed at step ", step,
                           memory ? " from the in-memory copy" : "");
    if (!std::isnan(lost)) text += cat(", ", int64_t(lost), " step(s) redone");
    run.events.push_back({step, "restart", text, lost});
  }
}

void read_metrics(RunData& run, const fs::path& path) {
  const std::string text = slurp(path);
  std::vector<int64_t> bad;
  int64_t line_no = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t nl = text.find('\n', pos);
    const bool last = nl == std::string::npos;
    if (last) nl = text.size();
    ++line_no;
    const std::string line = text.substr(pos, nl - pos);
    pos = nl + 1;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    json j = json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.is_object() || !(j.contains("step") || j.contains("iteration"))) {
      if (last)
        run.problems.push_back(cat("metrics.jsonl: the last line (", line_no, ", ", line.size(),
                                   " bytes) is cut off or not JSON: not shown"));
      else
        bad.push_back(line_no);
      continue;
    }
    add_record(run, j);
  }
  run.unreadable_lines = int64_t(bad.size());
  if (!bad.empty())
    run.problems.push_back(cat("metrics.jsonl: ", bad.size(), " line(s) are not JSON records (",
                               line_list(bad), "): skipped"));
  // A resumed run re-records the steps after its checkpoint: keep the last of each.
  std::stable_sort(run.steps.begin(), run.steps.end(),
                   [](const StepRow& a, const StepRow& b) { return a.step < b.step; });
  std::vector<StepRow> unique;
  for (const StepRow& r : run.steps) {
    if (!unique.empty() && unique.back().step == r.step)
      unique.back() = r;
    else
      unique.push_back(r);
  }
  run.steps = std::move(unique);
  // The same for a resumed RLHF run's iterations.
  std::stable_sort(run.rl.begin(), run.rl.end(), [](const RlRow& a, const RlRow& b) { return a.iteration < b.iteration; });
  std::vector<RlRow> rl;
  for (const RlRow& r : run.rl) {
    if (!rl.empty() && rl.back().iteration == r.iteration) rl.back() = r;
    else rl.push_back(r);
  }
  run.rl = std::move(rl);
  if (run.steps.empty() && run.evals.empty() && run.rl.empty())
    run.problems.push_back("metrics.jsonl holds no step records");
}

// Flight-recorder dumps: why each rank dumped (a fault, a hang, a dead peer).
void read_dumps(RunData& run, const fs::path& dir) {
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("flight-rank", 0) != 0 || e.path().extension() != ".json") continue;
    json j = json::parse(slurp(e.path()), nullptr, false);
    if (j.is_discarded() || !j.is_object()) {
      run.problems.push_back(name + ": not valid JSON (cut off?); `strata doctor hang` salvages it");
      continue;
    }
    int64_t step = 0;
    if (j.contains("phase") && j["phase"].is_object()) step = j["phase"].value("step", int64_t(0));
    run.events.push_back({step, "fault",
                          cat("rank ", j.value("rank", -1), " dumped (", j.value("reason", "?"),
                              "): ", j.value("detail", std::string())),
                          0});
  }
}

json read_json_file(RunData& run, const fs::path& path) {
  json j = json::parse(slurp(path), nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    run.problems.push_back(path.filename().string() + ": not valid JSON (cut off?): not used");
    return json();
  }
  return j;
}

}  // namespace

double number(const json& j, const char* key) {
  if (!j.is_object()) return kNaN;
  auto it = j.find(key);
  if (it == j.end() || !it->is_number()) return kNaN;
  return it->get<double>();
}

std::string RunData::model_text() const {
  if (!summary.is_object() || !summary.contains("config") || !summary["config"].is_object())
    return "";
  const json& c = summary["config"];
  std::string s;
  for (const char* k : {"layers", "dim", "heads", "vocab", "seq"})
    if (c.contains(k)) s += cat(s.empty() ? "" : ", ", k, " ", c[k].dump());
  return s;
}

double RunData::entropy_floor() const {
  double f = number(summary, "entropy_floor");
  if (std::isnan(f))
    for (const EvalRow& e : evals)
      if (!std::isnan(e.floor)) f = e.floor;
  return f;
}

RunData load_run(const std::string& dir) {
  RunData run;
  run.dir = dir;
  fs::path p(dir);
  std::error_code ec;
  STRATA_CHECK(fs::is_directory(p, ec), "run directory ", dir, ": no such directory");
  run.label = fs::weakly_canonical(p, ec).filename().string();
  if (run.label.empty()) run.label = dir;
  const bool has_metrics = fs::exists(p / "metrics.jsonl"), has_summary = fs::exists(p / "summary.json"),
             has_scaling = fs::exists(p / "scaling.json");
  STRATA_CHECK(has_metrics || has_summary || has_scaling, "run directory ", dir,
               ": no metrics.jsonl, summary.json or scaling.json (not a strata run directory, or "
               "the run stopped before its first step)");
  if (has_scaling) run.scaling = read_json_file(run, p / "scaling.json");
  if (has_metrics)
    read_metrics(run, p / "metrics.jsonl");
  else if (!has_scaling)
    run.problems.push_back("no metrics.jsonl: no curves for this run");
  if (has_summary)
    run.summary = read_json_file(run, p / "summary.json");
  else if (has_metrics)
    run.problems.push_back("no summary.json: the run did not finish (stopped or still running); "
                           "memory and summary figures are missing");
  read_dumps(run, p);
  std::stable_sort(run.events.begin(), run.events.end(),
                   [](const Event& a, const Event& b) { return a.step < b.step; });
  return run;
}

}  // namespace strata::report
