// Rotary position embedding (RoPE, Su et al. 2021), applied in place to the q and k heads of
// a qkv buffer laid out as kernels/attention.h's AttentionShape: q (NH*hs) | k (NKV*hs) | v.
//
// Layout: Hugging Face's Llama ("rotate_half"): within a head of hs columns, column i pairs
// with column i + hs/2 (i < hs/2) and the pair turns by angle pos * theta^(-2i/hs):
//   y[i]        = x[i] cos - x[i + hs/2] sin
//   y[i + hs/2] = x[i + hs/2] cos + x[i] sin
// Meta's original Llama code pairs adjacent columns (2i, 2i + 1) instead ("interleaved").
// The two are the same rotation up to a fixed permutation of each head's columns, which
// Hugging Face's conversion script folds into the rows of the q and k projection weights;
// so checkpoints in Hugging Face's format need this layout, and a Meta checkpoint works
// once its q/k weight rows are permuted the same way.
//
// Positions are given per row, pos (B, T) int32: context parallelism's zigzag chunks,
// documents whose positions restart, and a KV cache's offset all just pass their positions.
// The angle and its cos/sin are computed in double and rounded once to fp32, so every call
// gives the same bits (and long positions lose no accuracy to an fp32 product).
// Backward is the rotation by -angle (the transpose of an orthogonal map), applied in place to
// dq and dk. Cost: ~6 flops per q/k element plus hs/2 cos/sin per row; rows run in parallel
// and each element has one producer, so results do not depend on the thread count.
#pragma once
#include <cstdint>

#include "kernels/attention.h"

namespace strata::kernels {

// qkv (B,T,(NH+2NKV)hs) rotated in place (q and k heads; v untouched); pos (B,T); hs even.
void rope_forward(float* qkv, const int32_t* pos, AttentionShape s, float theta);
// The same on bf16 storage: each rotated element is widened, turned in fp32, rounded once.
void rope_forward(uint16_t* qkv, const int32_t* pos, AttentionShape s, float theta);
// dqkv (B,T,(NH+2NKV)hs): its dq and dk heads rotated back in place by -angle.
void rope_backward(float* dqkv, const int32_t* pos, AttentionShape s, float theta);

}  // namespace strata::kernels
