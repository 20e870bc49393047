#include "kernels/matmul.h"

#include <algorithm>

#include "core/memory.h"
#include "kernels/convert.h"
#include "kernels/gemm.h"

namespace strata::kernels {

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

// The output gradient in bf16 for the two backward products, which would each round it on
// their own otherwise (same rounding, so the same bits): one per-thread buffer reused from
// call to call, counted under MemCategory::other, holding first dout (N, OC) for
// dinp = dout W, then dout^T (OC, N) for dW = dout^T inp when oneDNN computes that product:
// oneDNN's matmul runs a transposed source 10-25% slower than a plain one on this CPU's
// weight-gradient shapes (docs/kernels.md), and the transposition costs one pass over dout.
thread_local Buffer tl_dout;

uint16_t* dout_buffer(int64_t n) {
  const size_t bytes = size_t(n) * sizeof(uint16_t);
  if (tl_dout.bytes() < bytes) tl_dout = Buffer(MemCategory::other, bytes);
  return tl_dout.as<uint16_t>();
}

bool emulated() {
  return bf16_gemm_path() == GemmPath::fp32 || bf16_kernel_path() == GemmPath::fp32;
}

}  // namespace

void matmul_backward_bf16(float* dinp, float* dweight, float* dbias, const float* dout, Mat inp,
                          const float* weight, int64_t N, int C, int OC, bool accumulate_dinp) {
  if (N == 0) return;
  // dinp (N,C) (+)= dout (N,OC) @ weight (OC,C)
  Mat d(dout, OC);
  if (dinp) {
    if (!emulated()) {
      uint16_t* h = dout_buffer(N * OC);
      f32_to_bf16(h, dout, N * OC);
      d = Mat(static_cast<const uint16_t*>(h), OC);
    }
    gemm_bf16(Op::N, Op::N, int(N), C, OC, 1.0f, d, Mat(weight, C), accumulate_dinp ? 1.0f : 0.0f,
              dinp, C);
  }
  // dweight (OC,C) += dout^T (OC,N) @ inp (N,C)
  if (bf16_path_for(OC, C, int(N)) == GemmPath::onednn) {
    uint16_t* t = dout_buffer(N * OC);
    f32_to_bf16_transposed(t, dout, N, OC);
    gemm_bf16(Op::N, Op::N, OC, C, int(N), 1.0f, Mat(static_cast<const uint16_t*>(t), int(N)), inp,
              1.0f, dweight, C);
  } else {
    gemm_bf16(Op::T, Op::N, OC, C, int(N), 1.0f, d, inp, 1.0f, dweight, C);  // d as rounded above
  }
  if (dbias) bias_backward(dbias, dout, N, OC);
}

}  // namespace strata::kernels
