#include "parallel/outer_codec.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/dtype.h"
#include "core/error.h"

namespace strata::parallel {

OuterDType parse_outer_dtype(const std::string& s) {
  if (s == "fp32") return OuterDType::fp32;
  if (s == "bf16") return OuterDType::bf16;
  if (s == "int8") return OuterDType::int8;
  if (s == "int4") return OuterDType::int4;
  throw Error(cat("outer dtype '", s, "' must be fp32, bf16, int8 or int4"));
}

const char* outer_dtype_name(OuterDType t) {
  switch (t) {
    case OuterDType::fp32: return "fp32";
    case OuterDType::bf16: return "bf16";
    case OuterDType::int8: return "int8";
    case OuterDType::int4: return "int4";
  }
  return "?";
}

namespace {

int levels(OuterDType t) { return t == OuterDType::int8 ? 127 : 7; }

// Bytes of one block of m values (m <= kOuterBlock): the scale, then the codes.
int64_t block_bytes(int64_t m, OuterDType t) {
  return int64_t(sizeof(float)) + (t == OuterDType::int8 ? m : (m + 1) / 2);
}

}  // namespace

int64_t encoded_bytes(int64_t n, OuterDType t) {
  switch (t) {
    case OuterDType::fp32: return 4 * n;
    case OuterDType::bf16: return 2 * n;
    case OuterDType::int8:
    case OuterDType::int4: {
      const int64_t full = n / kOuterBlock, rest = n % kOuterBlock;
      return full * block_bytes(kOuterBlock, t) + (rest ? block_bytes(rest, t) : 0);
    }
  }
  return 0;
}

void encode(const float* x, int64_t n, OuterDType t, uint8_t* out) {
  if (t == OuterDType::fp32) {
    std::memcpy(out, x, size_t(n) * sizeof(float));
    return;
  }
  if (t == OuterDType::bf16) {
    for (int64_t i = 0; i < n; ++i) {
      const uint16_t h = f32_to_bf16(x[i]);
      std::memcpy(out + 2 * i, &h, 2);
    }
    return;
  }
  const int q = levels(t);
  for (int64_t b = 0; b < n; b += kOuterBlock) {
    const int64_t m = std::min(kOuterBlock, n - b);
    float absmax = 0;
    for (int64_t i = 0; i < m; ++i) absmax = std::max(absmax, std::fabs(x[b + i]));
    const float scale = absmax / float(q);
    std::memcpy(out, &scale, sizeof(float));
    uint8_t* codes = out + sizeof(float);
    const float inv = scale > 0 ? 1.0f / scale : 0.0f;
    for (int64_t i = 0; i < m; ++i) {
      const int v = int(std::clamp(std::nearbyint(x[b + i] * inv), float(-q), float(q)));
      if (t == OuterDType::int8) {
        codes[i] = uint8_t(int8_t(v));
      } else {
        const uint8_t nib = uint8_t(v & 0xF);
        codes[i / 2] = i % 2 == 0 ? nib : uint8_t(codes[i / 2] | (nib << 4));
      }
    }
    out += block_bytes(m, t);
  }
}

void decode_add(const uint8_t* in, int64_t n, OuterDType t, float weight, float* acc) {
  if (t == OuterDType::fp32) {
    for (int64_t i = 0; i < n; ++i) {
      float v;
      std::memcpy(&v, in + 4 * i, 4);
      acc[i] += weight * v;
    }
    return;
  }
  if (t == OuterDType::bf16) {
    for (int64_t i = 0; i < n; ++i) {
      uint16_t h;
      std::memcpy(&h, in + 2 * i, 2);
      acc[i] += weight * bf16_to_f32(h);
    }
    return;
  }
  for (int64_t b = 0; b < n; b += kOuterBlock) {
    const int64_t m = std::min(kOuterBlock, n - b);
    float scale;
    std::memcpy(&scale, in, sizeof(float));
    const uint8_t* codes = in + sizeof(float);
    for (int64_t i = 0; i < m; ++i) {
      int v;
      if (t == OuterDType::int8) {
        v = int8_t(codes[i]);
      } else {
        const int nib = (codes[i / 2] >> (4 * (i % 2))) & 0xF;
        v = nib >= 8 ? nib - 16 : nib;
      }
      acc[b + i] += weight * (float(v) * scale);
    }
    in += block_bytes(m, t);
  }
}

}  // namespace strata::parallel
