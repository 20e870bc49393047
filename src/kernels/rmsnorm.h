// RMSNorm over the last dimension (Zhang & Sennrich 2019; Llama):
//   rstd = 1/sqrt(mean(x^2) + eps),  out = x * rstd * w
// No mean is subtracted and there is no bias. Forward saves rstd per row for the backward.
// Cost: ~4 N*C flops forward, ~8 N*C backward. The row sum uses fixed partial sums
// (fastmath.h sum16) and the weight gradient is reduced over rows in order per channel
// range, so results do not depend on the thread count.
#pragma once
#include <cstdint>

namespace strata::kernels {

// out (N,C); rstd (N); inp (N,C); weight (C)
void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, int64_t N,
                     int C, float eps);
// The same with out stored in bf16 (statistics and arithmetic in fp32; out rounded once).
void rmsnorm_forward(uint16_t* out, float* rstd, const float* inp, const float* weight, int64_t N,
                     int C, float eps);
// dinp (N,C) +=; dweight (C) +=; dout, inp (N,C); weight (C); rstd (N)
void rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp,
                      const float* weight, const float* rstd, int64_t N, int C);

}  // namespace strata::kernels
