#include "parallel/precision.h"

#include <cstring>

#include "core/error.h"
#include "kernels/convert.h"

namespace strata::parallel {

static void check_dtype(DType t) {
  STRATA_CHECK(t == DType::f32 || t == DType::bf16, "working dtype ", dtype_name(t),
               " is neither float nor bfloat16");
}

void widen(float* out, const void* in, int64_t n, DType dtype) {
  check_dtype(dtype);
  if (dtype == DType::f32)
    std::memcpy(out, in, sizeof(float) * n);
  else
    kernels::bf16_to_f32(out, static_cast<const uint16_t*>(in), n);
}

void narrow(void* out, const float* in, int64_t n, DType dtype) {
  check_dtype(dtype);
  if (dtype == DType::f32)
    std::memcpy(out, in, sizeof(float) * n);
  else
    kernels::f32_to_bf16(static_cast<uint16_t*>(out), in, n);
}

void convert(void* out, DType to, const void* in, DType from, int64_t n) {
  check_dtype(to);
  if (from == DType::f32)
    narrow(out, static_cast<const float*>(in), n, to);
  else if (to == DType::f32)
    widen(static_cast<float*>(out), in, n, from);
  else if (out != in)
    std::memcpy(out, in, size_t(n) * dtype_size(to));
}

void add_f32_into(void* dst, const float* src, int64_t n, DType dtype) {
  check_dtype(dtype);
  if (dtype == DType::f32) {
    float* d = static_cast<float*>(dst);
#pragma omp parallel for schedule(static) if (n > (1 << 16))
    for (int64_t i = 0; i < n; ++i) d[i] += src[i];
  } else {
    uint16_t* d = static_cast<uint16_t*>(dst);
#pragma omp parallel for schedule(static) if (n > (1 << 16))
    for (int64_t i = 0; i < n; ++i) d[i] = f32_to_bf16(bf16_to_f32(d[i]) + src[i]);
  }
}

void add_into(void* dst, const void* src, int64_t n, DType dtype) {
  check_dtype(dtype);
  if (dtype == DType::f32) {
    add_f32_into(dst, static_cast<const float*>(src), n, dtype);
  } else {
    uint16_t* d = static_cast<uint16_t*>(dst);
    const uint16_t* s = static_cast<const uint16_t*>(src);
#pragma omp parallel for schedule(static) if (n > (1 << 16))
    for (int64_t i = 0; i < n; ++i) d[i] = f32_to_bf16(bf16_to_f32(d[i]) + bf16_to_f32(s[i]));
  }
}

}  // namespace strata::parallel
