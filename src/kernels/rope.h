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
//
// Frequency scaling: Llama 3.1's "llama3" rope_scaling (factor > 0) stretches the long
// wavelengths for a context `factor` times the one the model was first trained on
// (`original` positions): with the wavelength w = 2π / f of each frequency f,
//   w < original / high_freq_factor   f                     (short wavelengths kept)
//   w > original / low_freq_factor    f / factor            (long ones stretched)
//   otherwise                         (1 - a) f / factor + a f,
//                                     a = (original / w - low) / (high - low)
// as Hugging Face's rope_type "llama3" computes its inverse frequencies.
#pragma once
#include <cstdint>
#include <vector>

#include "kernels/attention.h"

namespace strata::kernels {

struct Rope {
  float theta = 10000.0f;
  float factor = 0.0f;  // llama3 scaling; 0: none
  float low_freq_factor = 1.0f, high_freq_factor = 4.0f;
  float original = 8192.0f;  // original_max_position_embeddings
  Rope() = default;
  Rope(float t) : theta(t) {}  // NOLINT: plain RoPE from its base
  bool scaled() const { return factor > 0; }
};

// The hs/2 frequencies f_i = theta^(-2i/hs), scaled as above; in double.
std::vector<double> rope_inv_freq(const Rope& r, int hs);

// qkv (B,T,(NH+2NKV)hs) rotated in place (q and k heads; v untouched); pos (B,T); hs even.
void rope_forward(float* qkv, const int32_t* pos, AttentionShape s, const Rope& r);
// The same on bf16 storage: each rotated element is widened, turned in fp32, rounded once.
void rope_forward(uint16_t* qkv, const int32_t* pos, AttentionShape s, const Rope& r);
// dqkv (B,T,(NH+2NKV)hs): its dq and dk heads rotated back in place by -angle.
void rope_backward(float* dqkv, const int32_t* pos, AttentionShape s, const Rope& r);

}  // namespace strata::kernels
