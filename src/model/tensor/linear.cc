#include "model/tensor/linear.h"

#include "kernels/matmul.h"

namespace strata::model::tensor {

namespace k = strata::kernels;

void column_forward(TensorComm& tc, float* out, const float* x, const float* w, const float* b,
                    float* full, int64_t N, int C, int OCl) {
  const float* xf = tc.gather_rows(x, full, N, C);  // f forward
  k::matmul_forward(out, xf, w, b, N, C, OCl);
}

void column_backward(TensorComm& tc, float* dx, float* dw, float* db, const float* dout,
                     const float* x, const float* w, float* full, float* partial, int64_t N, int C,
                     int OCl) {
  const float* xf = tc.gather_rows(x, full, N, C);  // the forward's input again
  k::matmul_backward(partial, dw, db, dout, xf, w, N, C, OCl, /*accumulate_dinp=*/false);
  tc.reduce_rows(partial, dx, N, C);  // f backward
}

void row_forward(TensorComm& tc, float* out, const float* x, const float* w, float* partial,
                 int64_t N, int Cl, int OC) {
  k::matmul_forward(partial, x, w, nullptr, N, Cl, OC);
  tc.reduce_rows(partial, out, N, OC);  // g forward
}

void row_backward(TensorComm& tc, float* dx, float* dw, float* dbias, const float* dout,
                  const float* x, const float* w, float* full, int64_t N, int Cl, int OC) {
  if (dbias) k::bias_backward(dbias, dout, tc.local_rows(N), OC);
  const float* df = tc.gather_rows(dout, full, N, OC);  // g backward
  k::matmul_backward(dx, dw, nullptr, df, x, w, N, Cl, OC, /*accumulate_dinp=*/false);
}

void add_residual_bias(float* out, const float* residual, const float* bias, int64_t n, int C) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    float* o = out + i * C;
    const float* r = residual + i * C;
    for (int c = 0; c < C; ++c) o[c] += r[c] + bias[c];
  }
}

}  // namespace strata::model::tensor
