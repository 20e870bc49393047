#include "kernels/matmul.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include <algorithm>

#include "core/memory.h"
#include "kernels/convert.h"
#include "kernels/gemm.h"
#include "kernels/isa_target.h"  // last: what follows is compiled for the level

namespace strata::kernels::STRATA_ISA {

namespace {

// matmul_forward_rows (matmul.h): one pass over W, each weight row read once for all rows.
// Tiles of kRows rows x NO outputs keep kRows·NO accumulators of 16 independent lanes in
// registers (the products vectorise without reassociating a sum): per 16 columns, kRows + NO
// loads feed kRows·NO multiply-adds.
constexpr int kLanes = 16, kRows = 4;

#if defined(STRATA_ISA_V4) || defined(__AVX512F__)
// The sum of v's 16 lanes, halving: lane i += lane i + s for s = 8, 4, 2, 1 (the order of
// _mm512_reduce_add_ps, whose GCC 12 expansion warns of an uninitialised register).
inline float lane_sum(__m512 v) {
  alignas(64) float t[kLanes];
  _mm512_store_ps(t, v);
  for (int s = kLanes / 2; s >= 1; s /= 2)
    for (int i = 0; i < s; ++i) t[i] += t[i + s];
  return t[0];
}
#endif

template <int NR, int NO>
void rows_tile(float* out, const float* x, const float* W, const float* b, int n0, int o0, int C,
               int OC, bool accumulate) {
  float sums[NR][NO];
  int c = 0;
#if defined(STRATA_ISA_V4) || defined(__AVX512F__)
  // The same tile with the accumulators held in zmm registers (the generic loop below
  // keeps them on the stack).
  __m512 acc[NR][NO];
  for (int r = 0; r < NR; ++r)
    for (int j = 0; j < NO; ++j) acc[r][j] = _mm512_setzero_ps();
  for (; c + kLanes <= C; c += kLanes) {
    __m512 w[NO];
    for (int j = 0; j < NO; ++j) w[j] = _mm512_loadu_ps(W + int64_t(o0 + j) * C + c);
    for (int r = 0; r < NR; ++r) {
      const __m512 xv = _mm512_loadu_ps(x + int64_t(n0 + r) * C + c);
      for (int j = 0; j < NO; ++j) acc[r][j] = _mm512_fmadd_ps(xv, w[j], acc[r][j]);
    }
  }
  for (int r = 0; r < NR; ++r)
    for (int j = 0; j < NO; ++j) sums[r][j] = lane_sum(acc[r][j]);
#else
  float acc[NR][NO][kLanes] = {};
  for (; c + kLanes <= C; c += kLanes)
    for (int r = 0; r < NR; ++r) {
      const float* xr = x + int64_t(n0 + r) * C + c;
      for (int j = 0; j < NO; ++j) {
        const float* w = W + int64_t(o0 + j) * C + c;
        for (int l = 0; l < kLanes; ++l) acc[r][j][l] += xr[l] * w[l];
      }
    }
  for (int r = 0; r < NR; ++r)
    for (int j = 0; j < NO; ++j) {
      sums[r][j] = 0;
      for (int l = 0; l < kLanes; ++l) sums[r][j] += acc[r][j][l];
    }
#endif
  for (int r = 0; r < NR; ++r)
    for (int j = 0; j < NO; ++j) {
      float s = sums[r][j];
      const float* w = W + int64_t(o0 + j) * C;
      for (int cc = c; cc < C; ++cc) s += x[int64_t(n0 + r) * C + cc] * w[cc];
      float& y = out[int64_t(n0 + r) * OC + o0 + j];
      y = (accumulate ? y : 0.0f) + s + (b ? b[o0 + j] : 0.0f);
    }
}

}  // namespace

void matmul_forward_rows(float* out, const float* x, const float* W, const float* b, int N, int C,
                         int OC, bool accumulate) {
  constexpr int kOut = 4;
  const int tiles = (OC + kOut - 1) / kOut;
#pragma omp parallel for schedule(static)
  for (int t = 0; t < tiles; ++t) {
    const int o0 = t * kOut;
    const int no = std::min(kOut, OC - o0);
    int n0 = 0;
    for (; n0 + kRows <= N; n0 += kRows) {
      if (no == kOut)
        rows_tile<kRows, kOut>(out, x, W, b, n0, o0, C, OC, accumulate);
      else
        for (int o = o0; o < o0 + no; ++o) rows_tile<kRows, 1>(out, x, W, b, n0, o, C, OC, accumulate);
    }
    for (; n0 < N; ++n0)  // the last rows one at a time
      for (int o = o0; o < o0 + no; ++o) rows_tile<1, 1>(out, x, W, b, n0, o, C, OC, accumulate);
  }
}

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
