// Fully connected layer (the nn.Linear convention: weight is (OC, C)).
//   out = inp @ weight^T + bias
// The three products go to kernels::gemm with the batch and time dimensions folded into
// one (N = B*T rows), so every call is one large GEMM; the bias rides in the forward GEMM's
// output pass. Cost: 2*N*C*OC flops forward and 4*N*C*OC backward. Results do not depend
// on the thread count: the GEMM fixes its reduction order and the bias gradient is reduced
// here per channel range, rows in order.
#pragma once
#include <cstdint>

#include "kernels/gemm_bf16.h"

namespace strata::kernels {

// out (N,OC); inp (N,C); weight (OC,C); bias (OC) or nullptr.
// accumulate = true adds to out instead of overwriting it (fuses a residual connection:
// out = residual + inp @ weight^T + bias with out holding the residual on entry).
void matmul_forward(float* out, const float* inp, const float* weight, const float* bias, int64_t N,
                    int C, int OC, bool accumulate = false);
// dinp (N,C) += (skipped if nullptr; overwritten instead when accumulate_dinp is false, for
// scratch activation gradients); dweight (OC,C) +=; dbias (OC) += (skipped if nullptr);
// dout (N,OC); inp (N,C); weight (OC,C)
void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                     const float* weight, int64_t N, int C, int OC, bool accumulate_dinp = true);

// bf16 compute: the same three products by gemm_bf16 (bf16-rounded inputs, fp32
// accumulation, fp32 outputs and gradients); inp is fp32 or bf16 memory (row stride C).
void matmul_forward_bf16(float* out, Mat inp, const float* weight, const float* bias, int64_t N,
                         int C, int OC, bool accumulate = false);
void matmul_backward_bf16(float* dinp, float* dweight, float* dbias, const float* dout, Mat inp,
                          const float* weight, int64_t N, int C, int OC,
                          bool accumulate_dinp = true);

// The forward product for a few rows (a decoding step's batch, N up to ~32): one pass over
// the weight, each row of it read once for all N rows, where matmul_forward's GEMM would pack
// the weight first on every call (as much memory traffic as the product at small N). Each
// output is one row's dot product in a fixed order: independent of the thread count, not
// bit-equal to matmul_forward (another summation order).
void matmul_forward_rows(float* out, const float* inp, const float* weight, const float* bias,
                         int N, int C, int OC, bool accumulate = false);
// dbias (OC) += sum over rows of dout (N,OC), deterministic.
void bias_backward(float* dbias, const float* dout, int64_t N, int OC);

}  // namespace strata::kernels
