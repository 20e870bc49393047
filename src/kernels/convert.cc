#include "kernels/convert.h"

#include <algorithm>
#include <bit>

#include "core/dtype.h"

namespace strata::kernels {

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

void f32_to_bf16_transposed(uint16_t* out, const float* in, int64_t rows, int cols) {
  constexpr int kTile = 32;
  const int64_t col_tiles = (cols + kTile - 1) / kTile;
#pragma omp parallel for schedule(static)
  for (int64_t ct = 0; ct < col_tiles; ++ct) {
    const int c0 = int(ct * kTile), c1 = std::min(cols, c0 + kTile);
    for (int64_t r0 = 0; r0 < rows; r0 += kTile) {
      const int64_t r1 = std::min(rows, r0 + kTile);
      for (int c = c0; c < c1; ++c)
        for (int64_t r = r0; r < r1; ++r) out[int64_t(c) * rows + r] = strata::f32_to_bf16(in[r * cols + c]);
    }
  }
}

}  // namespace strata::kernels
