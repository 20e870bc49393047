#include "kernels/convert.h"

#include <bit>
#include "kernels/isa_target.h"  // last: what follows is compiled for the level

namespace strata::kernels::STRATA_ISA {

void f32_to_bf16(uint16_t* out, const float* in, int64_t n) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    uint32_t u = std::bit_cast<uint32_t>(in[i]);
    const bool nan = (u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu);
    const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    out[i] = uint16_t(nan ? ((u >> 16) | 0x40u) : rounded);
  }
}

void bf16_to_f32(float* out, const uint16_t* in, int64_t n) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) out[i] = std::bit_cast<float>(uint32_t(in[i]) << 16);
}

}  // namespace strata::kernels::STRATA_ISA
