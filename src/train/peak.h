// The machine's peak for MFU: a short sgemm probe (and, for bf16 runs on CPUs with bf16
// units, a bf16 GEMM probe) (square fp32 matrix products with the
// thread count that training uses), measured once per machine and cached.
//
// Terms: peak = best sustained GFLOP/s of C = A·B with n = 1024 (2n³ FLOPs per call), over
// roughly `seconds` of repeated calls after one warm-up call, taking the faster of the BLAS
// library's sgemm and strata's own GEMM (kernels/gemm.h, what training runs): a peak below
// what the model's own matmuls reach would put MFU above 100%. Cost: about `seconds` of
// compute and 12 MiB. The cache is a JSON object keyed by peak_cache_key(), in
// $STRATA_PEAK_CACHE, else $XDG_CACHE_HOME/strata/peak.json, else ~/.cache/strata/peak.json.
// A probe taken while other jobs share the cores reads low; the trainer drops a cached peak
// that its own run beats (MFU > 100%), so the next run measures again.
#pragma once
#include <string>

namespace strata::train {

// Measures sgemm GFLOP/s with the current OpenMP/BLAS thread setting.
double measure_sgemm_gflops(double seconds = 1.0, int n = 1024);
// Measures kernels::gemm_bf16 GFLOP/s on its chosen path (bf16 inputs, fp32 accumulation;
// the same n^3 shape, alternating with the fp32 GEMMs), and returns the best of all: a bf16
// run's matmuls can never beat it, so its MFU stays <= 100%.
double measure_bf16_gflops(double seconds = 1.0, int n = 1024);

struct Peak {
  double gflops = 0;
  std::string source;  // "flag", "cache <path>", "measured"
  std::string kind;    // "sgemm", or "bf16 <path>" (e.g. "bf16 avx512bf16")
};

// override_gflops > 0 wins; otherwise a cached value for (cpu model, threads), else a fresh
// measurement that is then cached (an unwritable cache only costs a re-measurement).
// probe_seconds: length of a fresh measurement.
// bf16 = true (a --precision bf16 run): on a CPU with a bf16 GEMM path the peak is the bf16
// probe's (cached under its own key); with the emulated path it is the sgemm peak.
Peak machine_peak(int threads, double override_gflops = 0, double probe_seconds = 1.0,
                  bool bf16 = false);

std::string cpu_model();           // "model name" of /proc/cpuinfo, or "unknown cpu"
std::string peak_cache_path();     // where machine_peak reads and writes
// "<cpu model>|threads=<n>|probe=2" (the probe's version: older entries are re-measured),
// plus "|bf16=<path>" for a bf16 peak.
std::string peak_cache_key(int threads, const std::string& bf16_path = "");
// Removes the cached peak for `threads` (it proved too low); other entries are kept.
void forget_cached_peak(int threads, const std::string& bf16_path = "");

}  // namespace strata::train
