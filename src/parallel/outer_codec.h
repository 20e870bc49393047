// What replica groups send each other at an outer sync when it is not fp32 (parallel/outer.h):
// the outer gradient Δ = θ - x of each group, encoded per block, then summed in fp32 by every
// receiver in group order (so every rank computes the same mean).
//   bf16  2 bytes per value (round to nearest even)
//   int8  blocks of kOuterBlock values: an fp32 scale (absmax / 127), then one signed byte each
//   int4  the same with absmax / 7 and two values per byte (low nibble first)
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace strata::parallel {

enum class OuterDType { fp32, bf16, int8, int4 };
OuterDType parse_outer_dtype(const std::string& s);  // fp32 | bf16 | int8 | int4; throws naming it
const char* outer_dtype_name(OuterDType t);

constexpr int64_t kOuterBlock = 64;

// Bytes that n values take encoded.
int64_t encoded_bytes(int64_t n, OuterDType t);
// Encodes n values into out (encoded_bytes(n, t) bytes).
void encode(const float* x, int64_t n, OuterDType t, uint8_t* out);
// acc[i] += weight * decoded value i, for the n values encoded in `in`.
void decode_add(const uint8_t* in, int64_t n, OuterDType t, float weight, float* acc);

}  // namespace strata::parallel
