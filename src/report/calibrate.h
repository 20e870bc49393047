// `strata plan calibrate`: describes this host as a planner "GPU" (one rank with `threads`
// cores) in the GPU JSON schema of plan/hardware.h, from measurements:
//   peak_tflops        best sgemm GFLOP/s with `threads` threads (train/peak.h's probe)
//   hbm_gbps           memory bandwidth: bytes read + written by a 64 MiB copy, best of 8
//   intra/inter link   α and β fitted to `strata bench comm --nproc N --json` all-reduce
//                      rows from 1 KiB to 16 MiB on this host: β the median bus bandwidth
//                      of rows >= 1 MiB (gradient-bucket sizes), α the shortest time over
//                      the ring's latency steps
//   compute_efficiency median MFU of a short single-rank `strata train` (by default tiny,
//                      seq 64, batch 4, 16 steps; extra train flags replace these, e.g.
//                      the model of a study) against that peak; when the run beats the
//                      probe (the probe ran while other work shared the cores), the run's
//                      own rate becomes the peak and the efficiency 1
//   gpus_per_node      cores / threads: ranks that run side by side without sharing a core
//   memory_gib         physical memory / gpus_per_node
// `strata plan --gpu local` and `strata bench scaling` read the file it writes
// (plan::local_gpu_path()). Cost: about 5 s.
#pragma once
#include <string>
#include <vector>

#include "nlohmann/json.hpp"

namespace strata::report {

struct CalibrateOptions {
  std::string out;       // "" = plan::local_gpu_path()
  std::string work_dir;  // where the measurements' raw output goes ("" = next to out)
  int threads = 1;       // per rank
  int comm_ranks = 2;
  double probe_s = 1.0;
  std::vector<std::string> train_args;  // appended to the efficiency run's flags
};

struct Calibration {
  nlohmann::json gpu;  // the file's content
  std::string path;
  std::string text;    // what was measured, for people
};

Calibration calibrate(const CalibrateOptions& o);

}  // namespace strata::report
