// The scaling study: one `strata train` per rank count, each step decomposed (terms in
// scaling.h).
#include "report/scaling.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <numeric>
#include <optional>
#include <sstream>
#include <thread>

#include "core/error.h"
#include "core/files.h"
#include "plan/estimate.h"
#include "plan/hardware.h"
#include "report/run_data.h"
#include "report/subprocess.h"
#include "train/peak.h"

namespace strata::report {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// The step-time parts in table and chart order (report.cc stacks the same names).
const char* const kPartNames[] = {"compute",         "optimizer",      "data wait",
                                  "exposed comm (dp)", "pipeline bubble", "straggler wait",
                                  "checkpoint stall", "other"};

// Flags the study sets itself: a user value would break the comparison.
const char* const kStudyFlags[] = {"--nproc", "--run-dir", "--threads", "--straggler-every", "--json"};

// The value of `flag` in args ("--flag V" or "--flag=V"), last one winning; removes them all.
std::string take_flag(std::vector<std::string>& args, const std::string& flag) {
  std::string value;
  std::vector<std::string> kept;
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == flag && i + 1 < args.size()) {
      value = args[++i];
    } else if (args[i].rfind(flag + "=", 0) == 0) {
      value = args[i].substr(flag.size() + 1);
    } else {
      kept.push_back(args[i]);
    }
  }
  args = kept;
  return value;
}

int positive_int(const std::string& flag, const std::string& s) {
  size_t used = 0;
  int v = 0;
  try {
    v = std::stoi(s, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  STRATA_CHECK(used == s.size() && v > 0, flag, " '", s, "' is not a positive integer");
  return v;
}

// The planner's step time for this point's layout on `gpu`, or NaN (with a note) when the
// layout is outside what the planner models.
double predict_ms(const json& summary, int n, int threads, unsigned cores, const plan::GpuSpec& gpu,
                  std::string& why) {
  const json cfg = summary.value("config", json::object());
  plan::ModelSpec m;
  plan::apply_arch(m, "gpt");
  m.name = "strata GPT";
  m.layers = cfg.value("layers", int64_t(0));
  m.hidden = cfg.value("dim", int64_t(0));
  m.heads = m.kv_heads = cfg.value("heads", int64_t(0));
  m.ffn = cost::default_ffn(false, m.hidden);
  m.seq = cfg.value("seq", int64_t(0));
  m.vocab = cfg.value("padded_vocab", int64_t(0));
  m.dropout = false;  // strata's GPT has none
  plan::TrainSetup s;
  s.model = m;
  s.gpu = gpu;
  s.gpus = n;
  s.global_batch = cfg.value("batch", int64_t(0));
  const json par = summary.value("parallel", json::object());
  s.precision = par.value("precision", std::string("fp32")) == "bf16" ? plan::Precision::bf16
                                                                     : plan::Precision::fp32;
  s.fp32_grads = false;
  s.bucket_mib = par.value("bucket_mb", 4.0);
  // shm collectives copy and reduce on the CPU: with every core computing there is no idle
  // one to hide them behind, so nothing overlaps unless cores are left over.
  s.overlap = double(n) * threads < double(cores) ? 1.0 : 0.0;
  plan::Layout l;
  l.dp = n;
  l.zero = par.value("zero", 0);
  const int64_t accum = std::max<int64_t>(1, summary.value("accum", int64_t(1)));
  l.micro_batch = int(s.global_batch / (accum * n));
  try {
    m.validate();
    const std::string problem = plan::layout_problem(s, l);
    if (!problem.empty()) {
      why = problem;
      return NAN;
    }
    const plan::Estimate e = plan::evaluate(s, l);
    // Everything a rank does here is CPU work, its shm collectives included: ranks beyond
    // cores / threads share cores and the whole step stretches by that ratio.
    const double stretch = std::max(1.0, double(n) * threads / double(cores));
    return 1e3 * e.time.step_s * stretch;
  } catch (const Error& err) {
    why = err.what();
    return NAN;
  }
}

std::string row(const std::vector<std::string>& cells, const std::vector<int>& widths) {
  std::string s;
  for (size_t i = 0; i < cells.size(); ++i) {
    const int w = widths[i];
    std::string c = cells[i];
    if (int(c.size()) < w) c = std::string(size_t(w) - c.size(), ' ') + c;
    s += (i ? " " : "") + c;
  }
  return s + "\n";
}

std::string f(double v, int d) {
  if (!std::isfinite(v)) return "-";
  char b[48];
  std::snprintf(b, sizeof b, "%.*f", d, v);
  return b;
}

}  // namespace

std::vector<int> parse_nproc_list(const std::string& s) {
  std::vector<int> out;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, ',');) out.push_back(positive_int("--nproc", item));
  STRATA_CHECK(!out.empty(), "--nproc needs a list of rank counts, e.g. 1,2,3,4");
  // A repeated count would train the same point twice and draw it twice on the curve.
  for (size_t i = 1; i < out.size(); ++i)
    STRATA_CHECK(std::find(out.begin(), out.begin() + long(i), out[i]) == out.begin() + long(i),
                 "--nproc ", s, " lists ", out[i], " twice");
  return out;
}

json decompose_point(const std::string& run_dir) {
  const RunData r = load_run(run_dir);
  std::map<int64_t, double> stall;
  for (const Event& e : r.events)
    if (e.kind == "checkpoint" && std::isfinite(e.value)) stall[e.step] += e.value;
  std::vector<const StepRow*> used;
  for (const StepRow& s : r.steps)
    if (s.step >= 2 || r.steps.size() == 1) used.push_back(&s);
  STRATA_CHECK(!used.empty(), run_dir, "/metrics.jsonl: no step records to decompose");
  std::map<std::string, double> sum;
  double step_sum = 0, tokens = 0, all_s = 0;
  for (const StepRow& s : r.steps) all_s += (s.ms + (stall.count(s.step) ? stall[s.step] : 0)) / 1e3;
  for (const StepRow* s : used) {
    STRATA_CHECK(std::isfinite(s->compute_ms) && std::isfinite(s->comm_wait_ms), run_dir,
                 "/metrics.jsonl: step ", s->step, " has no compute_ms / comm_wait_ms split");
    const double strag = std::isfinite(s->straggler_wait_ms) ? s->straggler_wait_ms : 0;
    const double ck = stall.count(s->step) ? stall[s->step] : 0;
    const double step = s->ms + ck;
    sum["compute"] += s->compute_ms;
    sum["optimizer"] += s->optimizer_ms;
    sum["data wait"] += s->data_ms;
    sum["exposed comm (dp)"] += std::max(0.0, s->comm_wait_ms - strag);
    sum["pipeline bubble"] += 0;
    sum["straggler wait"] += strag;
    sum["checkpoint stall"] += ck;
    step_sum += step;
    tokens += s->tokens;
  }
  const double n = double(used.size());
  json parts = json::object();
  double known = 0;
  for (const char* name : kPartNames) {
    if (std::string(name) == "other") continue;
    parts[name] = sum[name] / n;
    known += sum[name] / n;
  }
  parts["other"] = step_sum / n - known;
  return {{"step_ms", step_sum / n},
          {"tokens_per_s", tokens / (step_sum / 1e3)},
          {"parts_ms", parts},
          {"compute_ms", parts["compute"]},
          {"steps", used.size()},
          {"train_s", all_s}};
}

namespace {

// The flags every point passes to `strata train` (the study's own added per point), and the
// global batch of the first point. Throws for flags the study owns and a strong-scaling batch
// that does not divide.
std::vector<std::string> study_train_args(const ScalingOptions& o, int& batch) {
  std::vector<std::string> args = o.train_args;
  for (const char* flag : kStudyFlags)
    for (const std::string& a : args)
      STRATA_CHECK(a != flag && a.rfind(std::string(flag) + "=", 0) != 0, flag,
                   " is set by the study (use bench scaling's --nproc list and --threads)");
  const std::string batch_s = take_flag(args, "--batch");
  batch = batch_s.empty() ? 8 : positive_int("--batch", batch_s);
  if (!o.weak) {
    int lcm = 1;
    for (int n : o.nproc) lcm = std::lcm(lcm, n);
    for (int n : o.nproc)
      STRATA_CHECK(batch % n == 0, "--batch ", batch, " does not divide over ", n,
                   " ranks: strong scaling keeps the global batch; pick a multiple of ", lcm,
                   " or use --weak");
  }
  // The synthetic corpus is generated at start: only as many tokens as the points read
  // (twice over), so generating it does not dominate a short point's wall time.
  bool has_data = false;
  std::string steps_s, seq_s;
  for (size_t i = 0; i < args.size(); ++i) {
    has_data = has_data || args[i] == "--data" || args[i].rfind("--data=", 0) == 0;
    if (args[i] == "--steps" && i + 1 < args.size()) steps_s = args[i + 1];
    if (args[i] == "--seq" && i + 1 < args.size()) seq_s = args[i + 1];
  }
  if (!has_data) {
    const int max_n = *std::max_element(o.nproc.begin(), o.nproc.end());
    const int64_t steps = steps_s.empty() ? 200 : positive_int("--steps", steps_s);
    const int64_t seq = seq_s.empty() ? 1024 : positive_int("--seq", seq_s);
    const int64_t tokens = std::max<int64_t>(
        int64_t(1) << 16, 2 * steps * (o.weak ? batch * max_n : batch) * (seq + 1));
    args.insert(args.begin(), {"--data", "synthetic:" + std::to_string(tokens)});
  }
  return args;
}

// Trains one point (N ranks, round r) into <out>/<name> and decomposes it.
json run_point(const ScalingOptions& o, const std::vector<std::string>& args, int n, int global,
               int round) {
  const std::string name = "n" + std::to_string(n) + (o.repeat > 1 ? "-r" + std::to_string(round + 1) : "");
  const std::string dir = (fs::path(o.out) / name).string();
  std::error_code ec;
  fs::remove_all(dir, ec);
  std::vector<std::string> a = {"train", "--eval-every", "0", "--eval-batches", "1",
                                "--sample-tokens", "0", "--log-every", "1000000000"};
  a.insert(a.end(), args.begin(), args.end());
  for (const std::string& x : {std::string("--nproc"), std::to_string(n), std::string("--batch"),
                               std::to_string(global), std::string("--threads"),
                               std::to_string(o.threads), std::string("--straggler-every"),
                               std::string("1"), std::string("--run-dir"), dir})
    a.push_back(x);
  fs::create_directories(dir, ec);
  const auto t0 = std::chrono::steady_clock::now();
  const ChildResult cr = run_strata(a, {{"OMP_NUM_THREADS", std::to_string(o.threads)}},
                                    dir + "/stdout.log", dir + "/stderr.log");
  STRATA_CHECK(cr.status == 0, "point N=", n, ": strata train failed (exit ", cr.status, "): ",
               last_line(dir + "/stderr.log"), " (see ", dir, "/stderr.log)");
  json p = decompose_point(dir);
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  // The study's own cost: starting and stopping the point's processes and reading its
  // files, i.e. the point's wall time outside the trainer; the trainer's own time outside
  // steps (initialisation, the final eval, the per-step straggler check) is kept apart.
  const double trainer_s = number(load_run(dir).summary, "wall_s");
  p["nproc"] = n;
  p["run_dir"] = name;
  p["global_batch"] = global;
  p["wall_s"] = wall;
  p["overhead_pct"] = 100 * (wall - trainer_s) / wall;
  p["outside_steps_s"] = trainer_s - p["train_s"].get<double>();
  return p;
}

std::string table_text(const ScalingOptions& o, const json& study, const std::string& gpu_note) {
  const json& points = study["points"];
  const int cores = study["cores"].get<int>(), batch = study["batch"].get<int>();
  const std::vector<int> w = {5, 9, 7, 5, 8, 8, 7, 6, 6, 6, 6, 7, 6, 6, 8, 8, 9, 5};
  std::string t = cat("strata bench scaling: ", o.weak ? "weak" : "strong", " scaling, ",
                      study["cpu"].get<std::string>(), ", ", cores, " cores, ", o.threads,
                      " thread(s) per rank, ", o.repeat, " interleaved run(s) per point (median), ",
                      o.weak ? cat("batch ", batch, " per rank") : cat("global batch ", batch), "\n");
  t += row({"ranks", "tok/s", "speedup", "eff%", "step ms", "compute", "optim", "data", "comm", "bubble",
            "strag", "ckpt", "other", "cont.", "ideal ms", "plan ms", "plan err%", "ovh%"}, w);
  for (const json& p : points) {
    const json& pm = p["parts_ms"];
    auto part = [&](const char* k) { return f(pm[k].get<double>(), 2); };
    t += row({std::to_string(p["nproc"].get<int>()) + (p["oversubscribed"].get<bool>() ? "*" : ""),
              f(p["tokens_per_s"], 0), f(p["speedup"], 2), f(100 * p["efficiency"].get<double>(), 1),
              f(p["step_ms"], 2), part("compute"), part("optimizer"), part("data wait"),
              part("exposed comm (dp)"), part("pipeline bubble"), part("straggler wait"),
              part("checkpoint stall"), part("other"), f(p["compute_excess_ms"], 2), f(p["ideal_ms"], 2),
              p["predicted_ms"].is_number() ? f(p["predicted_ms"], 2) : "-",
              p["prediction_error"].is_number() ? f(100 * p["prediction_error"].get<double>(), 1) : "-",
              f(p["overhead_pct"], 1)},
             w);
  }
  t += "(ms per step, rank 0; comm = exposed dp communication; cont. = compute beyond the ideal "
       "compute, part of compute; ovh = the study's own share of the point's wall time: "
       "starting and stopping its processes, reading its files)\n";
  for (const json& p : points)
    if (p["oversubscribed"].get<bool>())
      t += cat("* N=", p["nproc"].get<int>(), ": ", p["nproc"].get<int>() * o.threads,
               " threads on ", cores, " cores: oversubscribed; ranks share cores, costing ",
               f(p["compute_excess_ms"], 2), " ms of compute per step (",
               f(100 * p["compute_excess_ms"].get<double>() / p["step_ms"].get<double>(), 1),
               "% of the step) beyond the ideal\n");
  if (!gpu_note.empty()) t += gpu_note + "\n";
  for (const json& p : points)
    if (p.contains("prediction_note"))
      t += cat("N=", p["nproc"].get<int>(), ": no prediction: ", p["prediction_note"].get<std::string>(), "\n");
  t += "wrote " + (fs::path(o.out) / "scaling.json").string() + " (strata report " + o.out + ")\n";
  return t;
}

}  // namespace

ScalingResult run_scaling(const ScalingOptions& o) {
  STRATA_CHECK(o.threads >= 1, "--threads must be at least 1 (got ", o.threads, ")");
  STRATA_CHECK(o.repeat >= 1, "--repeat must be at least 1 (got ", o.repeat, ")");
  int batch = 0;
  const std::vector<std::string> args = study_train_args(o, batch);
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  std::optional<plan::GpuSpec> gpu;
  std::string gpu_note;
  if (!o.gpu.empty()) {
    try {
      gpu = plan::load_gpu(o.gpu);
    } catch (const Error& e) {
      if (o.gpu != "local") throw;
      gpu_note = cat("no prediction: ", e.what());
    }
  }
  std::error_code ec;
  fs::create_directories(o.out, ec);
  STRATA_CHECK(fs::is_directory(o.out), "--out ", o.out, ": cannot create the directory");

  // Rounds visit every rank count in turn (1,2,3,4,1,2,3,4,...), so load that comes and goes
  // on a shared host hits every point alike; each point keeps its run of median step time.
  std::vector<std::vector<json>> measured(o.nproc.size());
  for (int round = 0; round < o.repeat; ++round)
    for (size_t i = 0; i < o.nproc.size(); ++i)
      measured[i].push_back(run_point(o, args, o.nproc[i], o.weak ? batch * o.nproc[i] : batch, round));

  json points = json::array();
  double base_tps = 0, base_step = 0, base_compute = 0;
  int base_n = 0;
  for (std::vector<json>& runs : measured) {
    std::sort(runs.begin(), runs.end(), [](const json& a, const json& b) {
      return a["step_ms"].get<double>() < b["step_ms"].get<double>();
    });
    json p = runs[runs.size() / 2];
    p["repeats_step_ms"] = json::array();
    for (const json& r : runs) p["repeats_step_ms"].push_back(r["step_ms"]);
    const int n = p["nproc"].get<int>();
    const double step = p["step_ms"].get<double>(), compute = p["compute_ms"].get<double>();
    if (base_n == 0) {
      base_n = n;
      base_tps = p["tokens_per_s"].get<double>();
      base_step = step;
      base_compute = compute;
    }
    const double speedup = p["tokens_per_s"].get<double>() / base_tps * base_n;
    const double scale = o.weak ? 1.0 : double(base_n) / n;
    p["oversubscribed"] = n * o.threads > int(cores);
    p["speedup"] = speedup;
    p["efficiency"] = speedup / n;
    p["ideal_ms"] = base_step * scale;
    p["compute_excess_ms"] = compute - base_compute * scale;
    std::string why;
    const json summary = load_run((fs::path(o.out) / p["run_dir"].get<std::string>()).string()).summary;
    const double pred = gpu ? predict_ms(summary, n, o.threads, cores, *gpu, why) : NAN;
    p["predicted_ms"] = std::isfinite(pred) ? json(pred) : json();
    p["prediction_error"] = std::isfinite(pred) ? json(pred / step - 1) : json();
    if (!why.empty()) p["prediction_note"] = why;
    points.push_back(p);
  }

  ScalingResult res;
  res.study = {{"kind", o.weak ? "weak" : "strong"},
               {"cpu", train::cpu_model()},
               {"cores", cores},
               {"threads_per_rank", o.threads},
               {"repeat", o.repeat},
               {"batch", batch},
               {"train_args", o.train_args},
               {"gpu", gpu ? plan::gpu_to_json(*gpu) : json()},
               {"points", points}};
  atomic_write_file((fs::path(o.out) / "scaling.json").string(), res.study.dump(2) + "\n");
  res.table = table_text(o, res.study, gpu_note);
  return res;
}

}  // namespace strata::report
