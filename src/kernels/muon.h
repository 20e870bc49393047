// Muon (Jordan et al. 2024; "Muon is scalable", Liu et al. 2025): momentum SGD whose update
// for a 2-D weight is orthogonalised by a Newton-Schulz iteration, for the matrices of the
// blocks (AdamW keeps embeddings, the head, norms, biases and routers: parallel/muon.h).
//
// One step of one (rows x cols) matrix, g = grad_scale * grad (the clipping factor):
//   m <- mu m + g                               (momentum, fp32)
//   u <- g + mu m   (Nesterov, the default)      or u <- m
//   O <- NS5(u)                                 (orthogonalise_ns5 below)
//   p <- p (1 - lr wd) - lr * scale * sqrt(max(rows, cols)) * O
// scale = lr_scale (Moonshot's 0.2): an orthogonal rows x cols matrix has an RMS of
// 1/sqrt(max(rows, cols)), so the update's RMS is 0.2 whatever the shape, about AdamW's,
// and Muon shares --lr, the schedule and the weight decay with AdamW.
//
// Newton-Schulz, quintic, steps iterations with the published coefficients
// (a, b, c) = (3.4445, -4.7750, 2.0315), on the wide orientation (rows <= cols, the
// transpose otherwise):
//   X <- u / (||u||_F + 1e-7);  repeat: A = X Xᵀ; B = b A + c A A; X <- a X + B X
// In fp32 with the engine's deterministic GEMM (kernels/gemm.h), so the result has the same
// bits on every rank and thread count. Momentum and the final update are elementwise: any
// partition of a matrix's elements between ranks gives the same bits.
#pragma once
#include <cstdint>

namespace strata::kernels {

struct MuonStep {
  float lr = 0.0f;
  float momentum = 0.95f;
  float weight_decay = 0.0f;
  float grad_scale = 1.0f;  // multiplies every gradient (clipping factor)
  float lr_scale = 0.2f;    // the update's RMS, relative to lr
  int ns_steps = 5;
  bool nesterov = true;
};

inline constexpr double kNs5A = 3.4445, kNs5B = -4.7750, kNs5C = 2.0315;

// m, u: n elements of one matrix (any contiguous piece of it): the momentum update, and u
// the matrix to orthogonalise.
void muon_momentum(const float* grad, float* m, float* u, int64_t n, const MuonStep& s);

// x (rows x cols, row-major) orthogonalised in place, with ns5_scratch_elems(rows, cols)
// floats of scratch.
void orthogonalise_ns5(float* x, int rows, int cols, int steps, float* scratch);
int64_t ns5_scratch_elems(int rows, int cols);

// p <- p (1 - lr wd) - lr * lr_scale * sqrt(max(rows, cols)) * o over n elements of a
// (rows x cols) matrix.
void muon_apply(float* p, const float* o, int64_t n, int rows, int cols, bool decay, const MuonStep& s);

// Its FLOPs: cost::newton_schulz_flops (cost/flops.h).

}  // namespace strata::kernels
