// Element-wise helpers for working buffers that are either fp32 or bf16 (the engine's
// working dtype). bf16 is rounded to nearest even (core/dtype.h); sums are formed in fp32.
#pragma once
#include <cstdint>

#include "core/dtype.h"

namespace strata::parallel {

// out (n, fp32) <- in (n, dtype)
void widen(float* out, const void* in, int64_t n, DType dtype);
// out (n, dtype) <- in (n, fp32)
void narrow(void* out, const float* in, int64_t n, DType dtype);
// out (n, to) <- in (n, from): a copy, a widening or a rounding (out must not alias in
// unless the dtypes are equal).
void convert(void* out, DType to, const void* in, DType from, int64_t n);
// dst (n, dtype) += src (n, fp32)
void add_f32_into(void* dst, const float* src, int64_t n, DType dtype);
// dst (n, dtype) += src (n, dtype)
void add_into(void* dst, const void* src, int64_t n, DType dtype);

inline char* elem_ptr(void* base, int64_t i, DType t) {
  return static_cast<char*>(base) + i * int64_t(dtype_size(t));
}

}  // namespace strata::parallel
