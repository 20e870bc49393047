// SwiGLU (Shazeer 2020; Llama's MLP): out = silu(gate) * up, silu(x) = x * sigmoid(x).
//   d gate = dout * up * sigmoid(gate) * (1 + gate * (1 - sigmoid(gate)))
//   d up   = dout * silu(gate)
// Elementwise on two inputs of n elements (the gate and up projections' outputs); ~10 flops
// per element each way (fastmath.h exp). Blocks of elements run in parallel: every output
// element has one producer, so results do not depend on the thread count.
#pragma once
#include <cstdint>

namespace strata::kernels {

// out (n); gate, up (n)
void swiglu_forward(float* out, const float* gate, const float* up, int64_t n);
// The same with out stored in bf16 (computed in fp32, rounded once).
void swiglu_forward(uint16_t* out, const float* gate, const float* up, int64_t n);
// The same, also storing gate and up rounded to bf16 into gate_h, up_h (n) in the same pass
// (the inputs kept for backward under bf16 compute).
void swiglu_forward(uint16_t* out, uint16_t* gate_h, uint16_t* up_h, const float* gate,
                    const float* up, int64_t n);
// dgate, dup (n) are written, not accumulated; either may alias dout.
void swiglu_backward(float* dgate, float* dup, const float* gate, const float* up,
                     const float* dout, int64_t n);
// The same from bf16-stored gate and up (n), widened exactly; the arithmetic is fp32.
void swiglu_backward(float* dgate, float* dup, const uint16_t* gate, const uint16_t* up,
                     const float* dout, int64_t n);

// The same on the rows of one fused matrix gu (N, 2F), each row gate (F) | up (F): the output
// of a single (gate | up) projection. out (N, F); gu_h (N, 2F), when not null, receives gu
// rounded to bf16 (the inputs kept for backward under bf16 compute). Rows run in parallel.
void swiglu_forward_rows(float* out, const float* gu, int64_t N, int F);
void swiglu_forward_rows(uint16_t* out, uint16_t* gu_h, const float* gu, int64_t N, int F);
// dgu (N, 2F) written (d gate | d up per row) from dout (N, F) and the fp32 or bf16 gu.
void swiglu_backward_rows(float* dgu, const float* gu, const float* dout, int64_t N, int F);
void swiglu_backward_rows(float* dgu, const uint16_t* gu, const float* dout, int64_t N, int F);

}  // namespace strata::kernels
