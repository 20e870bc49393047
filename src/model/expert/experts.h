// The expert MLPs of one MoE block on this rank, on batches of rows grouped by expert:
// for local expert e with rows X_e (m_e, C)
//   H_e = X_e W1_e^T + b1_e (m_e, 4C),  A_e = gelu(H_e),  O_e = A_e W2_e^T + b2_e (m_e, C)
// (the dense block's MLP, once per expert). Matmuls run in the model's compute precision
// (bf16 GEMMs with fp32 accumulation, or fp32); H and A stay fp32.
// Cost: 16·C²·m flops forward and 32·C²·m backward for m rows in all.
#pragma once
#include <cstdint>
#include <vector>

namespace strata::model::expert {

// Pointers to one expert's four views (parameters or gradients).
struct ExpertViews {
  float *fcw, *fcb, *projw, *projb;  // (4C, C), (4C), (C, 4C), (C)
};

// rows[e] .. rows[e+1]: expert e's rows (e over the local experts, views[e] its weights).
void experts_forward(const std::vector<ExpertViews>& views, const std::vector<int64_t>& rows,
                     const float* X, float* H, float* A, float* O, int C, bool bf16);
// dO (M, C) in; dX (M, C) written; dA (M, 4C) scratch; gradients += into grads.
void experts_backward(const std::vector<ExpertViews>& views,
                      const std::vector<ExpertViews>& grads, const std::vector<int64_t>& rows,
                      const float* X, const float* H, const float* A, const float* dO, float* dA,
                      float* dX, int C, bool bf16);

}  // namespace strata::model::expert
