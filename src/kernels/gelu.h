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
// The same, also storing inp rounded to bf16 into inp_h (n) in the same pass (the
// pre-GELU activation kept for backward under bf16 compute).
void gelu_forward(uint16_t* out, uint16_t* inp_h, const float* inp, int64_t n);
// dinp (n) = dout * gelu'(inp): written, not accumulated, so dinp may alias dout.
void gelu_backward(float* dinp, const float* inp, const float* dout, int64_t n);
// The same from a bf16-stored inp (n), widened exactly; the arithmetic is fp32.
void gelu_backward(float* dinp, const uint16_t* inp, const float* dout, int64_t n);

}  // namespace strata::kernels
