// Vocab-parallel embedding and cross-entropy (Megatron-LM): rank r holds rows
// [v0, v0 + Vr) of wte (model/shard.h), so its logits are the columns [v0, v0 + Vr) and
// the full (N, Vp) logits never exist anywhere.
//
// Embedding forward: each rank looks up the tokens it owns (zero rows for the others), g
// sums the partial rows (exact: one rank contributes each row), then the replicated wpe is
// added to the rows this rank holds. Backward: g* gathers d(out), each rank scatters into
// its own wte rows; wpe's gradient over this rank's rows is partial under SP.
//
// Cross-entropy over the real vocabulary V (columns >= V of the last ranks are padding and
// get no probability): per row, the max of the local real logits is all-reduced (max), then
// sum(exp(x - max)) and the target's logit (from the rank that owns it, 0 elsewhere) are
// all-reduced together (sum): lse = max + log(sum), loss = lse - x[target]. Backward needs
// no communication: dx = scale·w·(exp(x - lse) - [v == target]) on the local columns.
// Cost: 3N floats all-reduced forward; ~3 N·Vr exp-and-add on each rank.
#pragma once
#include <cstdint>

#include "model/tensor/collectives.h"

namespace strata::model::tensor {

// out (n, C) written; tokens (B, T) all rows; wte (Vr, C) rows [v0, v0 + Vr); wpe (>= T, C);
// partial (N, C) scratch. pos (B, T): the wpe row of each row (documents), or nullptr: row t
// of each sequence takes wpe row t.
void embedding_forward(TensorComm& tc, float* out, const int32_t* tokens, const float* wte,
                       int64_t v0, int64_t Vr, const float* wpe, float* partial, int B, int T,
                       int C, const int32_t* pos = nullptr);
// dwte (Vr, C) +=; dwpe (>= T, C) += this rank's rows; dout (n, C); full (N, C) scratch.
void embedding_backward(TensorComm& tc, float* dwte, float* dwpe, const float* dout,
                        const int32_t* tokens, int64_t v0, int64_t Vr, float* full, int B, int T,
                        int C, const int32_t* pos = nullptr);

// losses (N) and lse (N) written (0 where w = 0); logits (N, Vr); targets (N) in [0, V);
// weights (N) or nullptr; stats (2N) scratch. Returns sum of w·loss over all N rows (the
// same on every rank).
double crossentropy_forward(TensorComm& tc, float* losses, float* lse, const float* logits,
                            const int32_t* targets, const float* weights, float* stats, int64_t N,
                            int64_t v0, int64_t Vr, int V);
// logits (N, Vr) in, their gradient out (in place).
void crossentropy_backward(float* logits, const float* lse, const int32_t* targets,
                           const float* weights, float scale, int64_t N, int64_t v0, int64_t Vr,
                           int V);

}  // namespace strata::model::tensor
