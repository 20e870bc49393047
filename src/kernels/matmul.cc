#include "kernels/matmul.h"

#include <algorithm>

#include "core/memory.h"
#include "kernels/convert.h"
#include "kernels/gemm.h"
#include "kernels/isa_target.h"  // last: what follows is compiled for the level

namespace strata::kernels::STRATA_ISA {

void matmul_forward(float* out, const float* inp, const float* weight, const float* bias, int64_t N,
                    int C, int OC, bool accumulate) {
  if (N == 0) return;
  // The bias is added in the GEMM's output pass (no separate sweep over out).
  gemm(Op::N, Op::T, int(N), OC, C, 1.0f, inp, C, weight, C, accumulate ? 1.0f : 0.0f, out, OC,
       bias);
}

void bias_backward(float* dbias, const float* dout, int64_t N, int OC) {
  constexpr int kChunk = 64;
  const int chunks = (OC + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static)
  for (int ch = 0; ch < chunks; ++ch) {
    const int c0 = ch * kChunk, c1 = std::min(OC, c0 + kChunk);
    float acc[kChunk] = {};
    for (int64_t n = 0; n < N; ++n) {
      const float* d = dout + n * OC;
      for (int c = c0; c < c1; ++c) acc[c - c0] += d[c];
    }
    for (int c = c0; c < c1; ++c) dbias[c] += acc[c - c0];
  }
}

void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                     const float* weight, int64_t N, int C, int OC, bool accumulate_dinp) {
  if (N == 0) return;
  // dinp (N,C) += dout (N,OC) @ weight (OC,C)
  if (dinp)
    gemm(Op::N, Op::N, int(N), C, OC, 1.0f, dout, OC, weight, C, accumulate_dinp ? 1.0f : 0.0f,
         dinp, C);
  // dweight (OC,C) += dout^T (OC,N) @ inp (N,C)
  gemm(Op::T, Op::N, OC, C, int(N), 1.0f, dout, OC, inp, C, 1.0f, dweight, C);
  if (dbias) bias_backward(dbias, dout, N, OC);
}

void matmul_forward_bf16(float* out, Mat inp, const float* weight, const float* bias, int64_t N,
                         int C, int OC, bool accumulate) {
  if (N == 0) return;
  gemm_bf16(Op::N, Op::T, int(N), OC, C, 1.0f, inp, Mat(weight, C), accumulate ? 1.0f : 0.0f, out,
            OC, bias);
}

namespace {

// dout rounded to bf16 once for both backward products, which would each round it on their
// own otherwise (same rounding, so the same bits); a per-thread buffer reused from call to
// call, counted under MemCategory::other.
thread_local Buffer tl_dout;

Mat rounded_dout(const float* dout, int64_t N, int OC, bool both) {
  const bool round = both && bf16_gemm_path() != GemmPath::fp32 &&
                     bf16_kernel_path() != GemmPath::fp32;  // not the emulated path
  if (!round) return Mat(dout, OC);
  const size_t bytes = size_t(N) * OC * sizeof(uint16_t);
  if (tl_dout.bytes() < bytes) tl_dout = Buffer(MemCategory::other, bytes);
  uint16_t* h = tl_dout.as<uint16_t>();
  f32_to_bf16(h, dout, N * OC);
  return Mat(static_cast<const uint16_t*>(h), OC);
}

}  // namespace

void matmul_backward_bf16(float* dinp, float* dweight, float* dbias, const float* dout, Mat inp,
                          const float* weight, int64_t N, int C, int OC, bool accumulate_dinp) {
  if (N == 0) return;
  const Mat d = rounded_dout(dout, N, OC, dinp != nullptr);
  // dinp (N,C) (+)= dout (N,OC) @ weight (OC,C); dweight (OC,C) += dout^T (OC,N) @ inp (N,C)
  if (dinp)
    gemm_bf16(Op::N, Op::N, int(N), C, OC, 1.0f, d, Mat(weight, C), accumulate_dinp ? 1.0f : 0.0f,
              dinp, C);
  gemm_bf16(Op::T, Op::N, OC, C, int(N), 1.0f, d, inp, 1.0f, dweight, C);
  if (dbias) bias_backward(dbias, dout, N, OC);
}

}  // namespace strata::kernels::STRATA_ISA
