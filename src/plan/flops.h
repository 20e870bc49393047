// The planner's compute cost models. FLOPs per token and MFU are the engine's own
// (train/flops.h); what follows is Megatron-LM's per-iteration count.
//
// Megatron-LM (Narayanan et al. 2021, eq. 3), for a GPT of l layers, hidden h, sequence s,
// vocabulary V and batch B, with full activation recomputation (4 passes of the layers:
// forward, recomputed forward and a backward costing two):
//   F = 96·B·s·l·h²·(1 + s/(6h) + V/(16·l·h))
// and without recomputation (3 passes): 72·B·s·l·h²·(1 + s/(6h) + V/(12·l·h)).
#pragma once
#include <cstdint>

namespace strata::plan {

// Megatron-LM's FLOPs per iteration; full_recompute selects the 96 (4-pass) or 72 (3-pass)
// form above.
inline double megatron_flops_per_iteration(double B, double s, double l, double h, double V,
                                           bool full_recompute = true) {
  if (full_recompute) return 96.0 * B * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h));
  return 72.0 * B * s * l * h * h * (1 + s / (6 * h) + V / (12 * l * h));
}

// Narayanan et al. 2021 eq. 4: end-to-end training time ≈ 8·T·P / (n·X) seconds for T tokens,
// P parameters, n GPUs each achieving X FLOP/s (full recomputation: 8 = 2 · 4 passes).
inline double megatron_training_time_s(double tokens, double params, double n_gpus,
                                       double flops_per_gpu) {
  return 8.0 * tokens * params / (n_gpus * flops_per_gpu);
}

}  // namespace strata::plan
