// LayerNorm over the last dimension (eps 1e-5, as GPT-2 and torch.nn.LayerNorm).
//   xhat = (x - mean) * rstd,  rstd = 1/sqrt(var + eps),  out = xhat * w + b
// Forward saves mean and rstd per row for the backward. Cost: ~8 N*C flops forward,
// ~12 N*C backward. Row statistics use fixed partial sums (fastmath.h sum16); the weight
// and bias gradients are reduced over rows per channel range, rows in order, so results do
// not depend on the thread count.
#pragma once
#include <cstdint>

namespace strata::kernels {

// out (N,C); mean, rstd (N); inp (N,C); weight, bias (C)
void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                       const float* bias, int64_t N, int C);
// The same with out stored in bf16 (statistics and arithmetic in fp32; out rounded once).
void layernorm_forward(uint16_t* out, float* mean, float* rstd, const float* inp,
                       const float* weight, const float* bias, int64_t N, int C);
// dinp (N,C) +=; dweight, dbias (C) +=; dout, inp (N,C); weight (C); mean, rstd (N)
void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                        const float* inp, const float* weight, const float* mean, const float* rstd,
                        int64_t N, int C);

}  // namespace strata::kernels
