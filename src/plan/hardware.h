// Accelerator and cluster descriptions: presets from vendor datasheets, a JSON file of the
// same fields (hand-written or written from measurements), and α-β links fitted to the rows
// `strata bench comm --json` prints.
//
// GPU JSON schema (every field optional when "base" names a preset, else all but the
// latencies and compute_efficiency are required; unknown keys are an error):
//   { "name": "my-h100", "base": "h100-80g",
//     "memory_gib": 79.6,            device memory the job can use, GiB
//     "peak_tflops": 989,            dense bf16 peak, TFLOP/s
//     "hbm_gbps": 3350,              memory bandwidth, GB/s (optimizer-step time)
//     "intra_node_gbps": 450,        per-GPU, per-direction bandwidth inside a node, GB/s
//     "intra_node_latency_us": 3.4,  α per message step inside a node
//     "inter_node_gbps": 50,         per-GPU, per-direction network bandwidth, GB/s
//     "inter_node_latency_us": 14,   α per message step across nodes
//     "gpus_per_node": 8,
//     "compute_efficiency": 0.75 }   sustained fraction of peak on the model's matmuls
#pragma once
#include <string>
#include <vector>

#include "cost/comm.h"
#include "nlohmann/json_fwd.hpp"

namespace strata::plan {

// Every formula the planner evaluates is the engine's own, from cost/ (links and collectives,
// activation and model-state bytes, FLOPs, the bubble, checkpoint intervals): the planner
// speaks in its terms.
using namespace cost;

struct GpuSpec {
  std::string name;
  std::string source;
  double memory_gib = 0;
  double peak_tflops = 0;
  double hbm_gbps = 0;
  Link intra;  // NVLink-class links inside a node
  Link inter;  // network between nodes
  int gpus_per_node = 8;
  double efficiency = 0.65;  // calibrated: see docs/planner.md

  double memory_bytes() const { return memory_gib * 1024.0 * 1024.0 * 1024.0; }
  double peak_flops() const { return peak_tflops * 1e12; }
  void validate(const std::string& where) const;
};

const std::vector<std::string>& gpu_preset_names();
GpuSpec gpu_preset(const std::string& name);  // throws listing the known presets
// A preset name, "local" (this host as `strata plan calibrate` measured it: the file at
// local_gpu_path()), or a path to a JSON file (anything ending in .json or containing '/').
GpuSpec load_gpu(const std::string& preset_or_file);
// Where `strata plan calibrate` writes this host's description: $STRATA_CALIBRATION, else
// $XDG_CACHE_HOME/strata/local-gpu.json, else ~/.cache/strata/local-gpu.json.
std::string local_gpu_path();
GpuSpec gpu_from_json(const nlohmann::json& j, const std::string& where);
nlohmann::json gpu_to_json(const GpuSpec& g);

// Fits a link from measured collective rows: objects with keys op, bytes, time_us, algbw,
// busbw (a JSON array, an object holding such an array under "rows", or one object per
// line). Prefers all-reduce rows, else reduce-scatter, all-gather or all-to-all. The rank
// count follows from busbw/algbw (the bus factor); β is the highest bus bandwidth (reached by
// large messages) and α the shortest time (a small message) over the algorithm's latency
// steps: the extremes rather than one row, so a noisy first row does not set them.
struct FittedLink {
  Link link;
  std::string op;
  int ranks = 0;
  int rows = 0;
};
FittedLink fit_link_from_bench(const std::string& path);

}  // namespace strata::plan
