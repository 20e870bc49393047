// GELU, tanh form (GPT-2; torch.nn.functional.gelu(approximate="tanh")):
//   gelu(x) = 0.5 x (1 + tanh(k (x + 0.044715 x^3))),  k = sqrt(2/pi)
// Elementwise; ~20 flops per element each way (fastmath.h exp).
#pragma once
#include <cstdint>

namespace strata::kernels {

// out (n); inp (n)
void gelu_forward(float* out, const float* inp, int64_t n);
// The same with out stored in bf16 (computed in fp32, rounded once).
void gelu_forward(uint16_t* out, const float* inp, int64_t n);
// dinp (n) = dout * gelu'(inp): written, not accumulated, so dinp may alias dout.
void gelu_backward(float* dinp, const float* inp, const float* dout, int64_t n);

}  // namespace strata::kernels
