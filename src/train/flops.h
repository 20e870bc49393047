// The engine's compute accounting: model FLOPs per trained token and MFU. The planner
// (plan/flops.h, plan/model_spec.cc) uses the same count.
// Model FLOPs (what MFU counts) do not include recomputation; hardware FLOPs do.
#pragma once
#include <cstdint>

namespace strata::train {

// Training FLOPs per token, PaLM (Chowdhery et al. 2022) appendix B: 6N for the matmuls of
// forward and backward plus 12·L·d·T for attention scores and values (T = sequence length).
inline double train_flops_per_token(double n_params, int64_t layers, int64_t dim, int64_t seq) {
  return 6.0 * n_params + 12.0 * double(layers) * double(dim) * double(seq);
}

// Model FLOPs utilisation: achieved model FLOP/s over the peak.
inline double mfu(double tokens_per_s, double flops_per_token, double peak_flops) {
  return peak_flops > 0 ? tokens_per_s * flops_per_token / peak_flops : 0.0;
}

}  // namespace strata::train
