// Fused softmax + cross-entropy with per-token weights over logits whose rows are padded
// (Vp columns, only the first V are real tokens; padded columns get no probability and no
// gradient).
//   loss[n] = lse(logits[n, :V]) - logits[n, target[n]]
//   sum     = sum_n w[n] * loss[n]                          (returned, in double)
//   dlogits[n, v] = scale * w[n] * (softmax(logits[n, :V])[v] - [v == target[n]])
// A row with weight 0 contributes nothing: no loss, a zero gradient row, and its logits are
// never read by the backward. The backward overwrites the logits with their gradient (the
// logits tensor is the largest activation of a GPT with a real vocabulary).
// Cost: ~3 N*V exp-and-add forward and the same backward. The sum runs over rows in order.
#pragma once
#include <cstdint>

namespace strata::kernels {

// losses (N) written (0 where w = 0); lse (N) written (saved for the backward);
// logits (N,Vp); targets (N) in [0, V); weights (N) or nullptr for all ones.
// Returns sum of w[n] * loss[n].
double crossentropy_forward(float* losses, float* lse, const float* logits, const int32_t* targets,
                            const float* weights, int64_t N, int V, int Vp);
// logits (N,Vp) in, dlogits out (in place); lse (N) from the forward. A slice of the
// vocabulary (vocab-parallel logits, model/tensor/vocab.h): the rows hold columns
// [v0, v0 + Vp) of it, the first V of them real, and lse is the whole row's; a target outside
// the slice gets no -1 here.
void crossentropy_backward(float* logits, const float* lse, const int32_t* targets,
                           const float* weights, float scale, int64_t N, int64_t V, int64_t Vp,
                           int64_t v0 = 0);

}  // namespace strata::kernels
