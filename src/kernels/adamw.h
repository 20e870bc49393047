// AdamW (Loshchilov & Hutter, decoupled weight decay) and global-norm gradient clipping,
// on [begin, end) ranges of the flat parameter, gradient and moment buffers: engines that
// hold only a shard call them on their range, once per range of equal decay policy.
//
// Update, t = step number starting at 1, g = grad_scale * grad (grad_scale carries the
// clipping factor so no separate pass rescales the gradients):
//   p <- p * (1 - lr * wd)                  (only where decay is on)
//   m <- b1 m + (1 - b1) g;   v <- b2 v + (1 - b2) g^2
//   p <- p - lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)
// which is torch.optim.AdamW's arithmetic. Elementwise, so any partition of the range
// gives the same bits.
//
// Clipping: norm = sqrt(sum of squares of all gradients); scale = min(1, max / (norm + 1e-6))
// (torch.nn.utils.clip_grad_norm_). sum_squares accumulates in double over fixed blocks of
// kSumBlock elements summed in block order, so the result does not depend on the thread
// count; summing several ranges must also be done in a fixed order by the caller.
#pragma once
#include <cstdint>

namespace strata::kernels {

struct AdamWStep {
  float lr = 0.0f;
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  float eps = 1e-8f;
  float weight_decay = 0.0f;
  int64_t t = 1;            // 1-based step number (bias correction)
  float grad_scale = 1.0f;  // multiplies every gradient (clipping factor)
};

// param, grad, m, v point at the first element of the range; n elements.
void adamw_update(float* param, const float* grad, float* m, float* v, int64_t n, bool decay,
                  const AdamWStep& step);

inline constexpr int64_t kSumBlock = 8192;
// Sum of x[i]^2 over n elements, in double, deterministic.
double sum_squares(const float* x, int64_t n);
// Factor to multiply gradients by so their global norm is at most max_norm
// (1 when max_norm <= 0 or the norm is already small enough).
float clip_scale(double total_sum_squares, float max_norm);
// x (n) *= s
void scale_inplace(float* x, int64_t n, float s);

}  // namespace strata::kernels
