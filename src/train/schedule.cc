#include "train/schedule.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace strata::train {

double Schedule::lr_at(int64_t step) const {
  if (step < warmup) return lr * double(step + 1) / double(warmup);
  int64_t decay_steps = steps - warmup;
  if (decay_steps <= 1) return lr;
  double progress = std::clamp(double(step - warmup) / double(decay_steps - 1), 0.0, 1.0);
  return min_lr + (lr - min_lr) * 0.5 * (1.0 + std::cos(M_PI * progress));
}

void Schedule::validate() const {
  STRATA_CHECK(steps > 0, "--steps must be positive (got ", steps, ")");
  STRATA_CHECK(lr > 0 && std::isfinite(lr), "--lr must be positive (got ", lr, ")");
  STRATA_CHECK(min_lr >= 0 && min_lr <= lr, "--min-lr must be in [0, --lr ", lr, "] (got ", min_lr,
               ")");
  STRATA_CHECK(warmup >= 0 && warmup <= steps, "--warmup must be in [0, --steps ", steps, "] (got ",
               warmup, ")");
}

}  // namespace strata::train
