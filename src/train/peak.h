// The machine's peak for MFU: a short sgemm probe (square fp32 matrix products with the
// thread count that training uses), measured once per machine and cached.
//
// Terms: peak = best GFLOP/s of one call of C = A·B with n = 1024 (2n³ FLOPs per call), over
// about `seconds` of repeated calls after one warm-up call, taking the faster of the BLAS
// library's sgemm and strata's own GEMM (kernels/gemm.h, what training runs): a peak below
// what the model's own matmuls reach would put MFU above 100%. Cost: about `seconds` of
// compute and 12 MiB. The cache is a JSON object keyed by peak_cache_key(), in
// $STRATA_PEAK_CACHE, else $XDG_CACHE_HOME/strata/peak.json, else ~/.cache/strata/peak.json.
//
// A probe taken while other jobs share the cores reads low, and a low peak would put MFU
// above 100%. Two defences: measure_sgemm_gflops() repeats short rounds until the best stops
// improving and keeps the best, and a run whose own model FLOP/s beat the peak raises it to
// that rate (Peak::raise) and writes it back to the cache (record_peak), so MFU never
// exceeds 100% and the next run starts from the better figure.
#pragma once
#include <cstdint>
#include <string>

namespace strata::train {

// Measures sgemm GFLOP/s with the current OpenMP/BLAS thread setting, robustly: rounds of
// about seconds / 5 until two rounds in a row improve the best by less than 2% (at least 3
// rounds, at most 3 x `seconds`); returns the best single call.
double measure_sgemm_gflops(double seconds = 1.0, int n = 1024);
// Measures kernels::gemm_bf16 GFLOP/s on its chosen path (bf16 inputs, fp32 accumulation;
// the same n^3 shape, alternating with the fp32 GEMM), and returns the best of both: a bf16
// run's matmuls can never beat it, so its MFU stays <= 100%.
double measure_bf16_gflops(double seconds = 1.0, int n = 1024);

struct Peak {
  double gflops = 0;
  std::string source;       // "flag", "cache <path>", "measured"; ", raised by step N" added
  std::string origin;       // for progress lines: "flag", "cached" or "measured now"
  std::string kind = "sgemm";  // "sgemm", or "bf16 <path>" (e.g. "bf16 avx512bf16")
  std::string bf16_path;       // "" for sgemm; the bf16 GEMM path otherwise (cache key)
  int64_t raised_at = 0;    // the step whose own rate last raised the peak; 0 = never
  double initial = 0;       // the peak before any raise

  // A run measured `achieved` model GFLOP/s per process at `step`: above the peak, the peak
  // becomes that rate (the probe read low) and this returns true.
  bool raise(double achieved, int64_t step);
  // "110.2 GFLOP/s (cached)", "(measured now)", "(flag)" or "(raised at step 12)"
  std::string label() const;
};

// override_gflops > 0 wins; otherwise a cached value for (cpu model, threads), else a fresh
// measure_sgemm_gflops() that is then cached (an unwritable cache only costs a re-measurement).
// probe_seconds: length of a fresh measurement.
// bf16 = true (a --precision bf16 run): on a CPU with a bf16 GEMM path the peak is the bf16
// probe's (cached under its own key); with the emulated path it is the sgemm peak. A bf16
// peak is never below the cached sgemm peak of the same thread count (the bf16 probe takes
// the best of both GEMMs): a cached bf16 entry below it is re-measured, and a measurement
// below it (the cores were busy) is raised to it.
Peak machine_peak(int threads, double override_gflops = 0, double probe_seconds = 1.0,
                  bool bf16 = false);
// Raises the cached peak for `threads` to `gflops` if that is higher (a run beat it); other
// entries are kept. An unwritable cache is ignored.
void record_peak(int threads, double gflops, const std::string& bf16_path = "");

std::string cpu_model();           // "model name" of /proc/cpuinfo, or "unknown cpu"
std::string peak_cache_path();     // where machine_peak reads and writes
// "<cpu model>|threads=<n>|probe=3" (the probe's version: older entries are re-measured).
// plus "|bf16=<path>" for a bf16 peak.
std::string peak_cache_key(int threads, const std::string& bf16_path = "");

}  // namespace strata::train
