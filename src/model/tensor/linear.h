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
// gradients, model/gpt_tp.cc). Cost per call: the GEMMs of kernels::matmul on 1/T of the
// weights, plus one collective of N·C (column) or N·OC (row) floats.
#pragma once
#include <cstdint>

#include "model/tensor/collectives.h"

namespace strata::model::tensor {

// out (N, OCl) = f(x) @ w^T + b; x (n, C); w (OCl, C); b (OCl) or nullptr; full (N, C)
// scratch for the gathered input.
void column_forward(TensorComm& tc, float* out, const float* x, const float* w, const float* b,
                    float* full, int64_t N, int C, int OCl);
// dx (n, C) written; dw (OCl, C) +=; db (OCl) += (or nullptr); dout (N, OCl); x (n, C) is
// re-gathered into `full` (N, C); `partial` (N, C) scratch.
void column_backward(TensorComm& tc, float* dx, float* dw, float* db, const float* dout,
                     const float* x, const float* w, float* full, float* partial, int64_t N, int C,
                     int OCl);

// out (n, OC) = g(x @ w^T) (no bias); x (N, Cl); w (OC, Cl); partial (N, OC) scratch.
void row_forward(TensorComm& tc, float* out, const float* x, const float* w, float* partial,
                 int64_t N, int Cl, int OC);
// dx (N, Cl) written; dw (OC, Cl) +=; dbias (OC) += sum of this rank's rows of dout (or
// nullptr); dout (n, OC); x (N, Cl); full (N, OC) scratch for the gathered dout.
void row_backward(TensorComm& tc, float* dx, float* dw, float* dbias, const float* dout,
                  const float* x, const float* w, float* full, int64_t N, int Cl, int OC);

// out (n, C) += residual (n, C) + bias (C): the residual connection after a row-parallel
// layer.
void add_residual_bias(float* out, const float* residual, const float* bias, int64_t n, int C);

}  // namespace strata::model::tensor
