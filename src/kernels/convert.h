// bf16 <-> fp32 vector conversion (for mixed-precision engines). fp32 -> bf16 rounds to
// nearest even and keeps NaN a NaN (core/dtype.h); bf16 -> fp32 is exact. Elementwise.
#pragma once
#include <cstdint>

namespace strata::kernels {

// out (n) bf16 bits; in (n)
void f32_to_bf16(uint16_t* out, const float* in, int64_t n);
// out (n); in (n) bf16 bits
void bf16_to_f32(float* out, const uint16_t* in, int64_t n);

}  // namespace strata::kernels
