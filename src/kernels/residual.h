// Residual connection: out = a + b. Backward: da += dout, db += dout.
// The model fuses most residual adds into the projection GEMM (matmul_forward with
// accumulate), whose backward is then the identity; these stand-alone kernels are the
// reference form and serve engines and tests. Cost: n flops.
#pragma once
#include <cstdint>

namespace strata::kernels {

// out, a, b (n); out may alias a or b
void residual_forward(float* out, const float* a, const float* b, int64_t n);
// da, db (n) +=; dout (n)
void residual_backward(float* da, float* db, const float* dout, int64_t n);

}  // namespace strata::kernels
