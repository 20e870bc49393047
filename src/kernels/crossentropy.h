// The log-softmax of logits rows, as the loss of language modelling (cross-entropy with
// per-token weights) and as a policy's log-probabilities (RLHF: rlhf/ppo_math.h). Rows are
// padded: Vp columns, only the first V real tokens; padded columns get no probability and no
// gradient. Both share one row statistic, lse = m + log Σ e^{z/τ - m} (m the row's max of z/τ,
// the exponentials summed in 16 lanes by fastmath.h), so a policy's log-probability at τ = 1
// is minus the cross-entropy loss bit for bit.
//
// Cross-entropy:
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

// Policy rows at temperature tau > 0: lse (N) of z / tau, logp (N) = z[a] / tau - lse of each
// row's action a = actions[n] in [0, V), and, when `entropy` is not null, the entropy (N)
// H = -Σ p log p = log Σ e^{z/τ - m} - Σ e^{z/τ - m} (z/τ - m) / Σ e^{z/τ - m}. logits (N,Vp).
void log_softmax_forward(float* lse, float* logp, float* entropy, const float* logits,
                         const int32_t* actions, int64_t N, int V, int64_t Vp, float tau);
// d loss / d z (N,Vp) written, for loss = Σ_n g[n] logp_n - c H_n over the rows of the last
// forward (its lse and entropy; entropy may be null when c = 0):
//   dz[v] = (g (δ(v, a) - p_v) + c p_v (log p_v + H)) / τ,   p_v = e^{z_v/τ - lse}
// and 0 in the padded columns.
void log_softmax_backward(float* dlogits, const float* logits, const float* lse,
                          const float* entropy, const int32_t* actions, const float* g, float c,
                          int64_t N, int V, int64_t Vp, float tau);

}  // namespace strata::kernels
