// The expert MLPs of one MoE block on this rank, on batches of rows grouped by expert:
// for local expert e with rows X_e (m_e, C)
//   H_e = X_e W1_e^T + b1_e (m_e, 4C),  A_e = gelu(H_e),  O_e = A_e W2_e^T + b2_e (m_e, C)
// (the dense block's MLP, once per expert). Matmuls run in the model's compute precision
// (bf16 GEMMs with fp32 accumulation, or fp32); H and A stay fp32.
// Under tensor parallelism over T ranks a rank holds F = 4C/T hidden units of every expert
// (c_fc's rows, c_proj's columns: model/shard.h), so H and A are (m_e, F) and O_e is this
// rank's partial sum over its F units; c_proj's bias is added by one rank only (proj_bias),
// so the sum of the T partials is the expert's output. One rank: F = 4C, proj_bias true.
// Cost: 4·C·F·m flops forward and 8·C·F·m backward for m rows in all.
// Gated experts (Mixtral's, for Llama blocks): fcw is the (gate | up) matrix (2F, C), H is
// (m_e, 2F) and A = silu(gate)·up (m_e, F); no biases (fcb, projb null). 6·C·F·m flops forward.
#pragma once
#include <cstdint>
#include <vector>

namespace strata::model::expert {

// Pointers to one expert's four views (parameters or gradients).
struct ExpertViews {
  float *fcw, *fcb, *projw, *projb;  // (F, C), (F), (C, F), (C); F = 4C/T (gated: 2F rows)
};

// rows[e] .. rows[e+1]: expert e's rows (e over the local experts, views[e] its weights).
// X (M, C); H (M, F or 2F gated), A (M, F) written; O (M, C) written.
void experts_forward(const std::vector<ExpertViews>& views, const std::vector<int64_t>& rows,
                     const float* X, float* H, float* A, float* O, int C, int F, bool proj_bias,
                     bool bf16, bool gated = false);
// dO (M, C) in (the whole output's gradient); dX (M, C) written (this rank's partial sum);
// dA (M, F) scratch, dH (M, 2F) scratch when gated (else unused); gradients += into grads
// (c_proj's bias: the whole, on every rank).
void experts_backward(const std::vector<ExpertViews>& views,
                      const std::vector<ExpertViews>& grads, const std::vector<int64_t>& rows,
                      const float* X, const float* H, const float* A, const float* dO, float* dA,
                      float* dX, int C, int F, bool bf16, bool gated = false, float* dH = nullptr);

}  // namespace strata::model::expert
