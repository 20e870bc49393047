// Causal multi-head self-attention, flash-attention style (Dao et al. 2022, FlashAttention-2
// loop order).
//
// Terms: B batch, T sequence, C channels, NH heads, hs = C/NH head size. qkv holds, per
// token, q (C) | k (C) | v (C), each split into NH heads of hs. Query block Bq and key block
// Bk are tiles of kTile rows.
//
// Forward, per (b, h, query block): walk the key blocks up to the diagonal with an online
// softmax (running row max m and row sum l, rescaling the partial output whenever m grows),
// so only a kTile x kTile score tile exists at a time: memory O(T) per head, not O(T^2).
// It saves the row log-sum-exp lse = m + log(l) (B, NH, T) for the backward.
// Backward, per (b, h): for each key block, for each query block at or below the diagonal,
// recompute the score tile and P = exp(S - lse) from the saved lse (no T x T matrix kept),
// then dV += P^T dO, dP = dO V^T, dS = P * (dP - D) with D = rowsum(dO * O), dQ += dS K,
// dK += dS^T Q (the 1/sqrt(hs) scale folded into the products).
// Recomputing S costs one extra T^2*hs GEMM in the backward, and buys O(T) memory.
//
// Cost (causal, ~half of the T x T tiles): forward ~2*B*NH*T^2*hs flops, backward ~2.5x that.
// Tile products are small kernels::gemm calls on the calling thread; work is spread over
// (b, h[, query block]) with OpenMP and every output element is produced by exactly one
// task in a fixed order, so results do not depend on the thread count or the schedule.
//
// Documents packed into one sequence (--doc-mask, docs/data.md): doc_start (B, T) gives, for
// every position t, the position where its document begins (non-decreasing in t, at most t);
// query t then attends to keys [doc_start[t], t] only, so no attention crosses a document
// boundary. Key tiles wholly before every row's document are skipped (the work falls with
// the documents' lengths); the others hide the earlier keys row by row. doc_start = nullptr:
// one document per sequence, plain causal attention, the same arithmetic as a doc_start of
// zeros.
//
// Grouped-query attention (Ainslie et al. 2023): NKV key/value heads, NKV dividing NH; query
// head h reads KV head h / (NH / NKV). NKV = NH is multi-head attention, NKV = 1 multi-query.
// The qkv row is then q (NH*hs) | k (NKV*hs) | v (NKV*hs) and out rows are NH*hs. The backward
// runs one task per (b, KV head) and walks the group's query heads in order, the first
// writing dk/dv and the rest adding to them: a fixed summation order for any thread count
// (and, with NKV = NH, the same arithmetic as the (C, NH) entry points).
#pragma once
#include <cstdint>

namespace strata::kernels {

inline constexpr int kAttentionTile = 64;

struct AttentionShape {
  int B = 0, T = 0, NH = 0, NKV = 0, hs = 0;
  int64_t row() const { return int64_t(NH + 2 * NKV) * hs; }   // qkv row stride
  int64_t k_col(int g) const { return int64_t(NH + g) * hs; }  // KV head g's k in a qkv row
};

// bf16 = true: every tile product by gemm_bf16 (bf16-rounded inputs, fp32 accumulation);
// softmax statistics, lse and outputs stay fp32.
// out (B,T,C); lse (B,NH,T); qkv (B,T,3C)
void attention_forward(float* out, float* lse, const float* qkv, int B, int T, int C, int NH,
                       bool bf16 = false, const int32_t* doc_start = nullptr);
// dqkv (B,T,3C) is written (every element has one producer; no need to clear it);
// dout, out (B,T,C); qkv (B,T,3C); lse (B,NH,T)
void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* out,
                        const float* lse, int B, int T, int C, int NH, bool bf16 = false,
                        const int32_t* doc_start = nullptr);

// bf16 storage (raw bits): qkv and out are bf16 memory, the tile products run in bf16 as
// above and out is rounded once from its fp32 value. Since the tile products round their
// inputs to bf16 anyway, S, P and O are the same as with fp32-stored qkv; only the backward's
// D = rowsum(dO * O) reads the rounded O. dqkv and dout stay fp32.
void attention_forward(uint16_t* out, float* lse, const uint16_t* qkv, int B, int T, int C,
                       int NH, const int32_t* doc_start = nullptr);
void attention_backward(float* dqkv, const float* dout, const uint16_t* qkv, const uint16_t* out,
                        const float* lse, int B, int T, int C, int NH,
                        const int32_t* doc_start = nullptr);

// Grouped-query forms: qkv (B,T,(NH+2NKV)hs); out, dout (B,T,NH*hs); lse (B,NH,T).
void attention_forward(float* out, float* lse, const float* qkv, AttentionShape s,
                       bool bf16 = false, const int32_t* doc_start = nullptr);
void attention_forward(uint16_t* out, float* lse, const uint16_t* qkv, AttentionShape s,
                       const int32_t* doc_start = nullptr);
void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* out,
                        const float* lse, AttentionShape s, bool bf16 = false,
                        const int32_t* doc_start = nullptr);
void attention_backward(float* dqkv, const float* dout, const uint16_t* qkv, const uint16_t* out,
                        const float* lse, AttentionShape s, const int32_t* doc_start = nullptr);

// One decoding step over a KV cache: for sequence b < s.B and query head h < s.NH, the one
// query at q + b·q_stride + h·hs attends over the s.T positions cached for its key/value head
// g = h / (NH / NKV): keys at K + (b·S + t)·NKV·hs + g·hs for t < s.T (S positions of cache per
// sequence), values likewise in V. out (B, NH·hs) = softmax(q·k / sqrt(hs)) · v. Each
// (sequence, head) is one task with a fixed order: independent of the thread count.
void attention_decode(float* out, const float* q, int64_t q_stride, const float* K, const float* V,
                      AttentionShape s, int S);

}  // namespace strata::kernels
