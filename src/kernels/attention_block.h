// Attention of one block of queries against one block of keys and values, the step of ring
// attention (Liu et al. 2023): a rank's query block meets every key/value block of the
// sequence in turn, and the partial results are merged with the log-sum-exp rule
//
//   lse = log(exp(lse_a) + exp(lse_b)),   out = exp(lse_a - lse) out_a + exp(lse_b - lse) out_b
//
// which gives exactly softmax attention over the union of the key blocks (in real arithmetic;
// in fp32 it differs from the one-pass kernel, kernels/attention.h, by rounding only).
//
// Terms: B batch, NH heads of hs columns, Sq query rows and Sk key rows per batch item. A
// block is addressed through Rows: element (b, t, h, d) at p[b*bstride + t*ld + h*hs + d], so
// a block may be a slice of a larger (B, T, 3C) activation. Statistics (lse, D) are addressed
// through Stats: (b, h, t) at p[b*bstride + h*hstride + t].
// Masks: full (every key visible: the key block lies wholly before the query block) or
// causal (the two blocks cover the same positions, Sq == Sk: key t' visible from t iff
// t' <= t).
// Forward: the block's own softmax by FlashAttention-2 tiles (online max and sum, kTile x
// kTile score tiles), then merged into (out, lse); lse = -inf marks rows that have seen no
// key yet (out is then overwritten). Backward, given the final lse and D = rowsum(dO * O)
// of the whole attention: P = exp(S - lse), dV += P^T dO, dS = P * (dO V^T - D),
// dQ += scale dS K, dK += scale dS^T Q, all accumulated (+=).
// Cost: 2·B·NH·Sq·Sk·hs multiply-adds forward (half for causal), 2.5x that backward.
// Work is spread over (b, h) (and query tiles forward) with OpenMP; each output element has
// one producer in a fixed order, so results do not depend on the thread count.
#pragma once
#include <cstdint>

namespace strata::kernels {

template <typename T>
struct RowsOf {
  T* p = nullptr;
  int64_t bstride = 0, ld = 0;
  T* at(int b, int64_t t) const { return p + b * bstride + t * ld; }
};
using Rows = RowsOf<const float>;
using RowsOut = RowsOf<float>;

struct Stats {
  float* p = nullptr;
  int64_t bstride = 0, hstride = 0;
  float* at(int b, int h) const { return p + b * bstride + h * hstride; }
};

enum class BlockMask { full, causal };

// Documents packed into the sequence (kernels/attention.h): key j of the block is hidden from
// query row t of batch item b when offset + j < p[b * bstride + t], the document start of the
// row (in the sequence's positions; offset: the key block's first position). p = nullptr: no
// documents. A row may then see no key of a block; the merge leaves its out and lse as they
// were.
struct DocBounds {
  const int32_t* p = nullptr;
  int64_t bstride = 0, offset = 0;
  const int32_t* rows(int b) const { return p ? p + b * bstride : nullptr; }
};

// NKV: key/value heads (grouped-query attention, kernels/attention.h); 0 means NH. Query head
// h reads KV head h / (NH / NKV) at column (h / (NH / NKV)) * hs of the k and v rows.
struct BlockShape {
  int B = 0, NH = 0, hs = 0, Sq = 0, Sk = 0, NKV = 0;
  int kv_heads() const { return NKV ? NKV : NH; }
};

// Merges softmax(q k^T / sqrt(hs)) v of this block into out (Sq rows) and lse.
void attention_block_forward(RowsOut out, Stats lse, Rows q, Rows k, Rows v, BlockShape s,
                             BlockMask mask, bool bf16 = false, DocBounds docs = {});

// D (b, h, t) = sum_d dout (b, t, h, d) * out (b, t, h, d), for Sq rows.
void attention_row_dot(Stats D, Rows dout, Rows out, BlockShape s);

// Accumulates (+=) this block's share of dq (Sq rows), dk and dv (Sk rows). One task per
// (b, KV head) adds its query heads' shares in head order: deterministic under GQA.
void attention_block_backward(RowsOut dq, RowsOut dk, RowsOut dv, Rows dout, Rows q, Rows k,
                              Rows v, Stats lse, Stats D, BlockShape s, BlockMask mask,
                              bool bf16 = false, DocBounds docs = {});

}  // namespace strata::kernels
