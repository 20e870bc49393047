// Learning-rate schedule: linear warmup from 0 to `lr` over `warmup` steps, then cosine
// decay from `lr` to `min_lr` over the remaining steps (GPT-2/3, llm.c). Steps count from 0;
// step s uses lr_at(s). Cost: O(1) per call.
#pragma once
#include <cstdint>

namespace strata::train {

struct Schedule {
  double lr = 1e-3;       // peak learning rate
  double min_lr = 1e-4;   // reached at the last step
  int64_t warmup = 0;     // steps of linear warmup
  int64_t steps = 1;      // total optimizer steps

  // Step s in [0, steps): warmup gives lr * (s + 1) / warmup, so the first step already moves;
  // afterwards min_lr + (lr - min_lr) * (1 + cos(pi * progress)) / 2 with progress in [0, 1]
  // reaching 1 at the last step.
  double lr_at(int64_t step) const;
  // Throws naming the flag for negative rates, min_lr > lr, warmup > steps.
  void validate() const;
};

}  // namespace strata::train
