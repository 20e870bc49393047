// GPU presets (datasheet figures; sources in docs/planner.md), JSON loading and link fitting.
#include "plan/hardware.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "core/env.h"
#include "core/error.h"
#include "core/files.h"
#include "nlohmann/json.hpp"

namespace strata::plan {

namespace {

// α defaults: NCCL's ring/Simple per-step latency for NVLink (src/graph/tuning.cc, 3.4 µs)
// and an assumed 14 µs per step across the network; measured links replace both.
constexpr double kIntraAlphaUs = 3.4;
constexpr double kInterAlphaUs = 14.0;

GpuSpec make(const char* name, double mem_gib, double tflops, double hbm, double nvlink, double net,
             const char* src) {
  GpuSpec g;
  g.name = name;
  g.memory_gib = mem_gib;
  g.peak_tflops = tflops;
  g.hbm_gbps = hbm;
  g.intra = {nvlink, kIntraAlphaUs};
  g.inter = {net, kInterAlphaUs};
  g.gpus_per_node = 8;
  g.source = src;
  return g;
}

std::vector<GpuSpec> presets() {
  return {
      make("a100-40g", 40.0, 312, 1555, 300, 25,
           "NVIDIA A100 datasheet (SXM4 40GB); DGX A100: NVLink3 600 GB/s bidirectional, "
           "8x HDR 200 Gb/s"),
      make("a100-80g", 80.0, 312, 2039, 300, 25,
           "NVIDIA A100 datasheet (SXM4 80GB); DGX A100: NVLink3 600 GB/s bidirectional, "
           "8x HDR 200 Gb/s"),
      make("h100-80g", 81559.0 / 1024, 989, 3350, 450, 50,
           "NVIDIA H100 datasheet (SXM5 80GB, 81559 MiB usable); DGX H100: NVLink4 900 GB/s "
           "bidirectional, 8x NDR 400 Gb/s"),
      make("h200", 143771.0 / 1024, 989, 4800, 450, 50,
           "NVIDIA H200 datasheet (SXM 141GB, 143771 MiB usable); HGX H200: NVLink4 900 GB/s "
           "bidirectional, 8x 400 Gb/s"),
  };
}

double positive(const nlohmann::json& j, const char* key, const std::string& where) {
  const nlohmann::json& v = j.at(key);
  STRATA_CHECK(v.is_number(), where, ": \"", key, "\" must be a number");
  double x = v.get<double>();
  STRATA_CHECK(x > 0 && std::isfinite(x), where, ": \"", key, "\" must be positive (got ", x, ")");
  return x;
}

}  // namespace

const std::vector<std::string>& gpu_preset_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> n;
    for (const GpuSpec& g : presets()) n.push_back(g.name);
    return n;
  }();
  return names;
}

GpuSpec gpu_preset(const std::string& name) {
  for (const GpuSpec& g : presets())
    if (g.name == name) return g;
  std::string known;
  for (const std::string& n : gpu_preset_names()) known += (known.empty() ? "" : ", ") + n;
  fail("unknown GPU preset '", name, "' (known: ", known, "; local after `strata plan calibrate`; or pass a JSON file)");
}

void GpuSpec::validate(const std::string& where) const {
  STRATA_CHECK(memory_gib > 0, where, ": memory_gib must be positive");
  STRATA_CHECK(peak_tflops > 0, where, ": peak_tflops must be positive");
  STRATA_CHECK(hbm_gbps > 0, where, ": hbm_gbps must be positive");
  STRATA_CHECK(intra.gbps > 0 && inter.gbps > 0, where, ": link bandwidths must be positive");
  STRATA_CHECK(intra.alpha_us >= 0 && inter.alpha_us >= 0, where,
               ": link latencies must not be negative");
  STRATA_CHECK(gpus_per_node >= 1, where, ": gpus_per_node must be at least 1");
  STRATA_CHECK(efficiency > 0 && efficiency <= 1, where,
               ": compute_efficiency must be in (0, 1] (got ", efficiency, ")");
}

GpuSpec gpu_from_json(const nlohmann::json& j, const std::string& where) {
  STRATA_CHECK(j.is_object(), where, ": expected a JSON object describing a GPU");
  static const char* known[] = {"name",
                                "base",
                                "memory_gib",
                                "peak_tflops",
                                "hbm_gbps",
                                "intra_node_gbps",
                                "intra_node_latency_us",
                                "inter_node_gbps",
                                "inter_node_latency_us",
                                "gpus_per_node",
                                "compute_efficiency",
                                "source"};
  for (auto it = j.begin(); it != j.end(); ++it)
    STRATA_CHECK(std::find_if(std::begin(known), std::end(known),
                              [&](const char* k) { return it.key() == k; }) != std::end(known),
                 where, ": unknown key \"", it.key(), "\"");
  const bool has_base = j.contains("base");
  GpuSpec g = has_base ? gpu_preset(j.at("base").get<std::string>()) : GpuSpec{};
  if (!has_base) {
    g.intra.alpha_us = kIntraAlphaUs;
    g.inter.alpha_us = kInterAlphaUs;
    for (const char* k : {"memory_gib", "peak_tflops", "hbm_gbps", "intra_node_gbps",
                          "inter_node_gbps", "gpus_per_node"})
      STRATA_CHECK(j.contains(k), where, ": missing \"", k, "\" (or name a preset in \"base\")");
  }
  g.name = j.value("name", has_base ? g.name + " (" + where + ")" : where);
  g.source = j.value("source", where);
  if (j.contains("memory_gib")) g.memory_gib = positive(j, "memory_gib", where);
  if (j.contains("peak_tflops")) g.peak_tflops = positive(j, "peak_tflops", where);
  if (j.contains("hbm_gbps")) g.hbm_gbps = positive(j, "hbm_gbps", where);
  if (j.contains("intra_node_gbps")) g.intra.gbps = positive(j, "intra_node_gbps", where);
  if (j.contains("inter_node_gbps")) g.inter.gbps = positive(j, "inter_node_gbps", where);
  if (j.contains("intra_node_latency_us"))
    g.intra.alpha_us = positive(j, "intra_node_latency_us", where);
  if (j.contains("inter_node_latency_us"))
    g.inter.alpha_us = positive(j, "inter_node_latency_us", where);
  if (j.contains("gpus_per_node")) {
    double n = positive(j, "gpus_per_node", where);
    STRATA_CHECK(n == std::floor(n), where, ": gpus_per_node must be an integer");
    g.gpus_per_node = int(n);
  }
  if (j.contains("compute_efficiency")) g.efficiency = positive(j, "compute_efficiency", where);
  g.validate(where);
  return g;
}

static const EnvVar kCalibration("STRATA_CALIBRATION", "",
                                 "file `strata plan calibrate` writes and `--gpu local` reads "
                                 "(default $XDG_CACHE_HOME/strata/local-gpu.json)");

std::string local_gpu_path() {
  if (kCalibration.is_set()) return kCalibration.get();
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg)
    return std::string(xdg) + "/strata/local-gpu.json";
  if (const char* home = std::getenv("HOME"); home && *home)
    return std::string(home) + "/.cache/strata/local-gpu.json";
  return "local-gpu.json";
}

GpuSpec load_gpu(const std::string& s) {
  if (s == "local") {
    const std::string path = local_gpu_path();
    STRATA_CHECK(std::ifstream(path).good(), "--gpu local: no calibration at ", path,
                 " (run `strata plan calibrate` first)");
    return load_gpu(path.find('/') == std::string::npos ? "./" + path : path);
  }
  const bool is_file = s.find('/') != std::string::npos ||
                       (s.size() > 5 && s.compare(s.size() - 5, 5, ".json") == 0);
  if (!is_file) return gpu_preset(s);
  require_regular_file(s, "--gpu");
  std::ifstream in(s);
  STRATA_CHECK(in.good(), "--gpu ", s, ": cannot open the file");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    fail("--gpu ", s, ": not valid JSON (", e.what(), ")");
  }
  return gpu_from_json(j, s);
}

nlohmann::json gpu_to_json(const GpuSpec& g) {
  return {{"name", g.name},
          {"memory_gib", g.memory_gib},
          {"peak_tflops", g.peak_tflops},
          {"hbm_gbps", g.hbm_gbps},
          {"intra_node_gbps", g.intra.gbps},
          {"intra_node_latency_us", g.intra.alpha_us},
          {"inter_node_gbps", g.inter.gbps},
          {"inter_node_latency_us", g.inter.alpha_us},
          {"gpus_per_node", g.gpus_per_node},
          {"compute_efficiency", g.efficiency},
          {"source", g.source}};
}

namespace {

std::vector<nlohmann::json> read_bench_rows(const std::string& path) {
  require_regular_file(path, "benchmark file");
  std::ifstream in(path);
  STRATA_CHECK(in.good(), path, ": cannot open the benchmark file");
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();
  std::vector<nlohmann::json> rows;
  try {
    nlohmann::json j = nlohmann::json::parse(text);
    if (j.is_object() && j.contains("rows")) j = j.at("rows");
    if (j.is_array())
      for (auto& r : j) rows.push_back(r);
    else
      rows.push_back(j);
  } catch (const nlohmann::json::exception&) {
    std::istringstream lines(text);
    int n = 0;
    for (std::string line; std::getline(lines, line);) {
      ++n;
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
      try {
        rows.push_back(nlohmann::json::parse(line));
      } catch (const nlohmann::json::exception& e) {
        fail(path, ":", n, ": not a JSON row (", e.what(), ")");
      }
    }
  }
  return rows;
}

}  // namespace

FittedLink fit_link_from_bench(const std::string& path) {
  const std::vector<nlohmann::json> rows = read_bench_rows(path);
  const std::pair<const char*, Collective> ops[] = {{"allreduce", Collective::allreduce},
                                                    {"reducescatter", Collective::reduce_scatter},
                                                    {"allgather", Collective::all_gather},
                                                    {"alltoall", Collective::all_to_all}};
  for (const auto& [name, coll] : ops) {
    double best_busbw = 0, least_time = -1, factor = 0;
    int count = 0;
    for (const nlohmann::json& r : rows) {
      if (!r.is_object() || r.value("op", "") != name) continue;
      for (const char* k : {"bytes", "time_us", "algbw", "busbw"})
        STRATA_CHECK(r.contains(k) && r.at(k).is_number(), path, ": a \"", name,
                     "\" row lacks the number \"", k, "\"");
      const double bytes = r.at("bytes").get<double>(), t = r.at("time_us").get<double>();
      const double algbw = r.at("algbw").get<double>(), busbw = r.at("busbw").get<double>();
      if (bytes <= 0 || t <= 0 || algbw <= 0) continue;
      ++count;
      factor = busbw / algbw;
      best_busbw = std::max(best_busbw, busbw);  // reached by the large messages
      if (least_time < 0 || t < least_time) least_time = t;  // a small message, noise aside
    }
    if (count == 0) continue;
    STRATA_CHECK(best_busbw > 0 && factor > 0, path, ": \"", name,
                 "\" rows show no bus bandwidth (a single rank?)");
    // Invert the bus factor: all-reduce 2(n-1)/n, the others (n-1)/n.
    const double per = coll == Collective::allreduce ? factor / 2 : factor;
    STRATA_CHECK(per < 1, path, ": busbw/algbw = ", factor, " is not a bus factor of ", name);
    FittedLink f;
    f.ranks = int(std::lround(1.0 / (1.0 - per)));
    f.op = name;
    f.rows = count;
    f.link.gbps = best_busbw;
    f.link.alpha_us = least_time / std::max(1.0, latency_steps(coll, f.ranks));
    return f;
  }
  fail(path,
       ": no allreduce, reducescatter, allgather or alltoall rows with op, bytes, "
       "time_us, algbw and busbw");
}

}  // namespace strata::plan
