#include "model/tensor/linear.h"

#include <cstring>

#include "kernels/convert.h"
#include "kernels/gemm.h"
#include "kernels/matmul.h"

namespace strata::model::tensor {

namespace k = strata::kernels;

void linear_forward(bool bf16, float* out, Mat inp, const float* w, const float* b, int64_t N,
                    int C, int OC, bool accumulate, bool few_rows) {
  if (few_rows && !bf16)
    k::matmul_forward_rows(out, static_cast<const float*>(inp.p), w, b, int(N), C, OC, accumulate);
  else if (bf16)
    k::matmul_forward_bf16(out, inp, w, b, N, C, OC, accumulate);
  else
    k::matmul_forward(out, static_cast<const float*>(inp.p), w, b, N, C, OC, accumulate);
}

void linear_backward(bool bf16, float* dinp, float* dw, float* db, const float* dout, Mat inp,
                     const float* w, int64_t N, int C, int OC) {
  if (bf16)
    k::matmul_backward_bf16(dinp, dw, db, dout, inp, w, N, C, OC, /*accumulate_dinp=*/false);
  else
    k::matmul_backward(dinp, dw, db, dout, static_cast<const float*>(inp.p), w, N, C, OC,
                       /*accumulate_dinp=*/false);
}

void linear_backward_input(bool bf16, float* dinp, const float* dout, const float* w, int64_t N,
                           int C, int OC) {
  if (N == 0) return;
  if (bf16)
    k::gemm_bf16(k::Op::N, k::Op::N, int(N), C, OC, 1.0f, Mat(dout, OC), Mat(w, C), 0.0f, dinp, C);
  else
    k::gemm(k::Op::N, k::Op::N, int(N), C, OC, 1.0f, dout, OC, w, C, 0.0f, dinp, C);
}

void linear_backward_weight(bool bf16, float* dw, float* db, const float* dout, Mat inp, int64_t N,
                            int C, int OC) {
  linear_backward(bf16, nullptr, dw, db, dout, inp, nullptr, N, C, OC);  // no input product
}

Mat gather_input(TensorComm& tc, Mat x, float* full, float* stage, int64_t N, int C) {
  if (!tc.sequence_parallel() || tc.size() == 1) return x;
  const float* xf = static_cast<const float*>(x.p);
  if (x.t == DType::bf16) {
    k::bf16_to_f32(stage, static_cast<const uint16_t*>(x.p), tc.local_rows(N) * C);
    xf = stage;
  }
  return Mat(tc.gather_rows(xf, full, N, C), C);
}

void column_forward(TensorComm& tc, bool bf16, float* out, Mat x, const float* w, const float* b,
                    float* full, float* stage, int64_t N, int C, int OCl, bool few_rows) {
  linear_forward(bf16, out, gather_input(tc, x, full, stage, N, C), w, b, N, C, OCl,  // f fwd
                 /*accumulate=*/false, few_rows);
}

void column_backward(TensorComm& tc, bool bf16, float* dx, float* dw, float* db,
                     const float* dout, Mat x, const float* w, float* full, float* partial,
                     int64_t N, int C, int OCl) {
  if (tc.size() == 1) return linear_backward(bf16, dx, dw, db, dout, x, w, N, C, OCl);
  const Mat xf = gather_input(tc, x, full, partial, N, C);  // the forward's input again
  linear_backward(bf16, partial, dw, db, dout, xf, w, N, C, OCl);
  tc.reduce_rows(partial, dx, N, C);  // f backward
}

void column_backward_input(TensorComm& tc, bool bf16, float* dx, const float* dout,
                           const float* w, float* partial, int64_t N, int C, int OCl) {
  if (tc.size() == 1) return linear_backward_input(bf16, dx, dout, w, N, C, OCl);
  linear_backward_input(bf16, partial, dout, w, N, C, OCl);
  tc.reduce_rows(partial, dx, N, C);  // f backward
}

void column_backward_weight(TensorComm& tc, bool bf16, float* dw, float* db, const float* dout,
                            Mat x, float* full, float* stage, int64_t N, int C, int OCl) {
  linear_backward_weight(bf16, dw, db, dout, gather_input(tc, x, full, stage, N, C), N, C, OCl);
}

void row_forward(TensorComm& tc, bool bf16, float* out, Mat x, const float* w, float* partial,
                 int64_t N, int Cl, int OC) {
  linear_forward(bf16, partial, x, w, nullptr, N, Cl, OC);
  tc.reduce_rows(partial, out, N, OC);  // g forward
}

void row_forward_residual(TensorComm& tc, bool bf16, float* out, Mat x, const float* w,
                          const float* bias, const float* residual, float* partial, int64_t N,
                          int Cl, int OC, bool few_rows) {
  if (tc.size() == 1) {  // fused: out = residual + x @ w^T + bias
    if (out != residual) std::memcpy(out, residual, sizeof(float) * size_t(N * OC));
    return linear_forward(bf16, out, x, w, bias, N, Cl, OC, /*accumulate=*/true, few_rows);
  }
  row_forward(tc, bf16, out, x, w, partial, N, Cl, OC);
  add_residual_bias(out, residual, bias, tc.local_rows(N), OC);
}

void row_backward(TensorComm& tc, bool bf16, float* dx, float* dw, float* dbias,
                  const float* dout, Mat x, const float* w, float* full, int64_t N, int Cl,
                  int OC) {
  if (tc.size() == 1) return linear_backward(bf16, dx, dw, dbias, dout, x, w, N, Cl, OC);
  if (dbias) k::bias_backward(dbias, dout, tc.local_rows(N), OC);
  const float* df = tc.gather_rows(dout, full, N, OC);  // g backward
  linear_backward(bf16, dx, dw, nullptr, df, x, w, N, Cl, OC);
}

void row_backward_input(TensorComm& tc, bool bf16, float* dx, float* dbias, const float* dout,
                        const float* w, float* kept, int64_t N, int Cl, int OC) {
  if (dbias) k::bias_backward(dbias, dout, tc.local_rows(N), OC);
  const float* df = tc.gather_rows(dout, kept, N, OC);  // g backward
  if (df != kept) std::memcpy(kept, df, sizeof(float) * size_t(N * OC));
  linear_backward_input(bf16, dx, kept, w, N, Cl, OC);
}

void add_residual_bias(float* out, const float* residual, const float* bias, int64_t n, int C) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    float* o = out + i * C;
    const float* r = residual + i * C;
    if (bias)
      for (int c = 0; c < C; ++c) o[c] += r[c] + bias[c];
    else
      for (int c = 0; c < C; ++c) o[c] += r[c];
  }
}

}  // namespace strata::model::tensor
