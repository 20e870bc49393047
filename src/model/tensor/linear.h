// Column- and row-parallel linear layers (Megatron-LM), forward/backward pairs over
// kernels::matmul with the f/g collectives of model/tensor/collectives.h.
//
// Terms: N rows of the whole micro-batch (B·seq), n = tc.local_rows(N) rows this rank holds
// in the sequence-parallel region, T ranks. A column-parallel layer holds OCl = OC/T output
// rows of W (OC, C); a row-parallel layer holds the Cl = C/T input columns of W (OC, C).
//
//   column:  x (n, C) --f--> x_full (N, C) --GEMM--> y (N, OCl)           [f fwd]
//            dy (N, OCl) --GEMM--> dx partial (N, C) --f*--> dx (n, C)      [f bwd]
//   row:     x (N, Cl) --GEMM--> partial (N, OC) --g--> y (n, OC)         [g fwd]
//            dy (n, OC) --g*--> dy_full (N, OC) --GEMM--> dx (N, Cl)        [g bwd]
//
// A row-parallel bias is replicated: the caller adds it after g (once, not T times) and its
// gradient over this rank's rows is partial under SP (reduced with the other replicated
// gradients, model/block.cc). Cost per call: the GEMMs of kernels::matmul on 1/T of the
// weights, plus one collective of N·C (column) or N·OC (row) floats.
//
// Precision: `bf16` selects the bf16 GEMMs (kernels::matmul_*_bf16: bf16-rounded inputs,
// fp32 accumulation and outputs), as the one-process model does (linear_forward/backward
// below serve both). Inputs x are fp32 or bf16 memory (kernels::Mat, row stride = width).
// The collectives stay fp32 whatever the compute precision: under SP a bf16 x is widened
// (exactly) into the `stage` scratch before its all-gather, so the payload (and
// cost/comm.h's prediction) is the same as under fp32.
#pragma once
#include <cstdint>

#include "kernels/gemm_bf16.h"
#include "model/tensor/collectives.h"

namespace strata::model::tensor {

using kernels::Mat;

// A matmul input stored in fp32 (f) or, when h is not null, bf16 (h); row stride ld.
inline Mat act(const float* f, const uint16_t* h, int64_t ld) {
  return h ? Mat(h, int(ld)) : Mat(f, int(ld));
}

// One rank's linear layer in the model's compute precision: out (N, OC) (+)= inp @ w^T + b;
// inp (N, C) (fp32 memory when bf16 is false); w (OC, C); b (OC) or nullptr. few_rows: the
// fp32 product of a decoding step's few rows (N up to ~32) by kernels::matmul_forward_rows,
// one pass over w (its own summation order: the KV-cache decoder's, rlhf/kv_cache.h).
void linear_forward(bool bf16, float* out, Mat inp, const float* w, const float* b, int64_t N,
                    int C, int OC, bool accumulate = false, bool few_rows = false);
// dinp (N, C) written; dw (OC, C) +=; db (OC) += (or nullptr); dout (N, OC).
void linear_backward(bool bf16, float* dinp, float* dw, float* db, const float* dout, Mat inp,
                     const float* w, int64_t N, int C, int OC);

// The two halves of linear_backward (zero-bubble's split backward, model/stage.h): the same
// products, so the same numbers. dinp (N, C) written from dout (N, OC) and w (OC, C);
// dw (OC, C) += dout^T @ inp; db (OC) += column sums of dout (or nullptr).
void linear_backward_input(bool bf16, float* dinp, const float* dout, const float* w, int64_t N,
                           int C, int OC);
void linear_backward_weight(bool bf16, float* dw, float* db, const float* dout, Mat inp, int64_t N,
                            int C, int OC);
// x (n, C) -> (N, C) by f's forward over fp32 collectives (the input of a column-parallel
// layer): under SP a bf16 x is widened into `stage` (n, C), then all-gathered into `full`;
// without SP x itself (any precision).
Mat gather_input(TensorComm& tc, Mat x, float* full, float* stage, int64_t N, int C);

// out (N, OCl) = f(x) @ w^T + b; x (n, C); w (OCl, C); b (OCl) or nullptr; full (N, C)
// scratch for the gathered input; stage (n, C) scratch (used only for a bf16 x under SP).
void column_forward(TensorComm& tc, bool bf16, float* out, Mat x, const float* w, const float* b,
                    float* full, float* stage, int64_t N, int C, int OCl, bool few_rows = false);
// dx (n, C) written; dw (OCl, C) +=; db (OCl) += (or nullptr); dout (N, OCl); x (n, C) is
// re-gathered into `full` (N, C); `partial` (N, C) scratch (also the stage of the gather).
void column_backward(TensorComm& tc, bool bf16, float* dx, float* dw, float* db,
                     const float* dout, Mat x, const float* w, float* full, float* partial,
                     int64_t N, int C, int OCl);

// column_backward in two halves. Input: dx (n, C) from dout (N, OCl) through f's backward;
// partial (N, C) scratch. Weight: dw (OCl, C) +=, db (OCl) += (or nullptr), with x (n, C)
// re-gathered into `full` (N, C) (`stage` (n, C) widens a bf16 x under SP): the same
// collectives as column_backward, split between the two calls.
void column_backward_input(TensorComm& tc, bool bf16, float* dx, const float* dout,
                           const float* w, float* partial, int64_t N, int C, int OCl);
void column_backward_weight(TensorComm& tc, bool bf16, float* dw, float* db, const float* dout,
                            Mat x, float* full, float* stage, int64_t N, int C, int OCl);

// out (n, OC) = g(x @ w^T) (no bias); x (N, Cl); w (OC, Cl); partial (N, OC) scratch.
void row_forward(TensorComm& tc, bool bf16, float* out, Mat x, const float* w, float* partial,
                 int64_t N, int Cl, int OC);
// out (n, OC) = g(x @ w^T) + residual (n, OC) + bias (OC): the output projection with its
// residual connection. At T = 1 one fused matmul (out = residual + x @ w^T + bias; out may be
// residual itself); partial (N, OC) scratch at T > 1.
void row_forward_residual(TensorComm& tc, bool bf16, float* out, Mat x, const float* w,
                          const float* bias, const float* residual, float* partial, int64_t N,
                          int Cl, int OC, bool few_rows = false);
// dx (N, Cl) written; dw (OC, Cl) +=; dbias (OC) += sum of this rank's rows of dout (or
// nullptr); dout (n, OC); x (N, Cl); full (N, OC) scratch for the gathered dout.
void row_backward(TensorComm& tc, bool bf16, float* dx, float* dw, float* dbias,
                  const float* dout, Mat x, const float* w, float* full, int64_t N, int Cl,
                  int OC);

// row_backward's input half: dbias (OC) += this rank's rows of dout (n, OC) (or nullptr);
// dout gathered by g's backward into `kept` (N, OC) (copied there without SP), which the
// weight half reads; dx (N, Cl) written. The weight half is linear_backward_weight(bf16, dw,
// nullptr, kept, x, N, Cl, OC).
void row_backward_input(TensorComm& tc, bool bf16, float* dx, float* dbias, const float* dout,
                        const float* w, float* kept, int64_t N, int Cl, int OC);

// out (n, C) += residual (n, C) + bias (C): the residual connection after a row-parallel
// layer.
void add_residual_bias(float* out, const float* residual, const float* bias, int64_t n, int C);

}  // namespace strata::model::tensor
