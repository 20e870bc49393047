// Element types shared by tensors, collectives and checkpoints.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "core/error.h"

namespace strata {

enum class DType : uint8_t { f32, bf16, f64, i32, i64, u8 };

inline size_t dtype_size(DType t) {
  switch (t) {
    case DType::f32: return 4;
    case DType::bf16: return 2;
    case DType::f64: return 8;
    case DType::i32: return 4;
    case DType::i64: return 8;
    case DType::u8: return 1;
  }
  return 0;
}

inline const char* dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "float";
    case DType::bf16: return "bfloat16";
    case DType::f64: return "double";
    case DType::i32: return "int32";
    case DType::i64: return "int64";
    case DType::u8: return "uint8";
  }
  return "?";
}

// Accepts the long names above and the short ones (f32, bf16, f64, i32, i64, u8).
inline DType parse_dtype(std::string_view s) {
  if (s == "f32" || s == "float" || s == "float32") return DType::f32;
  if (s == "bf16" || s == "bfloat16") return DType::bf16;
  if (s == "f64" || s == "double" || s == "float64") return DType::f64;
  if (s == "i32" || s == "int32") return DType::i32;
  if (s == "i64" || s == "int64") return DType::i64;
  if (s == "u8" || s == "uint8") return DType::u8;
  fail("unknown dtype '", std::string(s), "' (expected f32, bf16, f64, i32, i64 or u8)");
}

// bf16 <-> fp32. Conversion to bf16 rounds to nearest even; NaN stays NaN.
inline float bf16_to_f32(uint16_t h) {
  uint32_t u = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline uint16_t f32_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu)) return uint16_t((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}

}  // namespace strata
