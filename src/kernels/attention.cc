#include "kernels/attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "kernels/fastmath.h"
#include "kernels/gemm.h"
#include "kernels/gemm_bf16.h"
#include "kernels/isa_target.h"  // last: what follows is compiled for the level

namespace strata::kernels::STRATA_ISA {

namespace {

// Query and key rows per tile. 64 x 128, 128 x 128 and 64 x 256 tiles were measured and
// were slower (more masked work on the diagonal, no better GEMM rate).
constexpr int kQ = kAttentionTile;
constexpr int kK = kAttentionTile;

// One tile product, fp32 or with bf16 inputs (fp32 accumulation). Operands are fp32 memory,
// or bf16 memory (E = uint16_t, then bf16 is true).
template <typename A_, typename B_>
void tile_gemm(bool bf16, Op opa, Op opb, int M, int N, int K, float alpha, const A_* A, int lda,
               const B_* B, int ldb, float beta, float* C, int ldc) {
  if constexpr (std::is_same_v<A_, float> && std::is_same_v<B_, float>) {
    if (!bf16) return gemm(opa, opb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  }
  gemm_bf16(opa, opb, M, N, K, alpha, Mat(A, lda), Mat(B, ldb), beta, C, ldc);
}

inline void put(float* o, float v) { *o = v; }
inline void put(uint16_t* o, float v) { *o = f32_to_bf16(v); }

// The first key a row of a tile may see: 0, or (documents) the lowest document start of rows
// [r0, r1), rounded down to a key tile; tiles before it are hidden from every row.
int first_key_tile(const int32_t* ds, int r0, int r1) {
  if (!ds) return 0;
  int lo = r1;
  for (int t = r0; t < r1; ++t) lo = std::min(lo, int(ds[t]));
  return lo / kK * kK;
}

// Keys [0, lo) of the tile at k0 are before query row t's document (ds: its document starts).
inline int doc_lo(const int32_t* ds, int t, int k0, int nk) {
  return ds ? std::clamp(int(ds[t]) - k0, 0, nk) : 0;
}

// One query block of one (b, h): rows [r0, r1) of q against keys [0, r1) (from each row's
// document start when ds is set). E is the storage of q, k, v and out: float, or uint16_t
// (bf16 bits; the tile products then run in bf16).
template <typename E>
void forward_block(E* out, float* lse, const E* q, const E* k, const E* v, int r0, int r1, int ld,
                   int ldo, int hs, float scale, float* S, float* O, bool bf16, const int32_t* ds) {
  const int nr = r1 - r0;
  float m[kQ], l[kQ];
  for (int i = 0; i < nr; ++i) {
    m[i] = -INFINITY;
    l[i] = 0.0f;
  }
  std::memset(O, 0, sizeof(float) * nr * hs);
  for (int k0 = first_key_tile(ds, r0, r1); k0 < r1; k0 += kK) {
    const int nk = std::min(kK, r1 - k0);
    // S (nr, nk) = scale * Q_i (nr, hs) @ K_j^T (hs, nk)
    tile_gemm(bf16, Op::N, Op::T, nr, nk, hs, scale, q + int64_t(r0) * ld, ld, k + int64_t(k0) * ld, ld, 0.0f,
         S, kK);
    for (int i = 0; i < nr; ++i) {
      float* s = S + i * kK;
      const int valid = std::min(nk, r0 + i - k0 + 1);  // causal: key <= query
      const int lo = doc_lo(ds, r0 + i, k0, nk);
      if (lo >= valid) {  // the row's document starts after this tile
        std::fill(s, s + nk, 0.0f);
        continue;
      }
      online_softmax_row(s, lo, valid, nk, m[i], l[i], O + i * hs, hs);
    }
    // O (nr, hs) += P (nr, nk) @ V_j (nk, hs)
    tile_gemm(bf16, Op::N, Op::N, nr, hs, nk, 1.0f, S, kK, v + int64_t(k0) * ld, ld, 1.0f, O, hs);
  }
  for (int i = 0; i < nr; ++i) {
    const float inv = 1.0f / l[i];
    E* o = out + int64_t(r0 + i) * ldo;
    for (int d = 0; d < hs; ++d) put(o + d, O[i * hs + d] * inv);
    lse[r0 + i] = m[i] + std::log(l[i]);
  }
}

template <typename E>
void forward_impl(E* out, float* lse, const E* qkv, AttentionShape s, bool bf16,
                  const int32_t* doc_start) {
  const int B = s.B, T = s.T, NH = s.NH, hs = s.hs;
  const int group = NH / s.NKV;
  const int64_t ld = s.row(), ldo = int64_t(NH) * hs;
  const float scale = 1.0f / std::sqrt(float(hs));
  const int blocks = (T + kQ - 1) / kQ;
  const int64_t tasks = int64_t(B) * NH * blocks;
#pragma omp parallel
  {
    std::vector<float> S(kQ * kK), O(kQ * hs);
    // Largest blocks (most key tiles) first for load balance; any order gives the same bits.
#pragma omp for schedule(dynamic, 1)
    for (int64_t task = 0; task < tasks; ++task) {
      const int blk = blocks - 1 - int(task % blocks);
      const int h = int((task / blocks) % NH);
      const int b = int(task / (int64_t(blocks) * NH));
      const E* row = qkv + int64_t(b) * T * ld;
      const E* k = row + s.k_col(h / group);
      const int r0 = blk * kQ, r1 = std::min(T, r0 + kQ);
      forward_block(out + int64_t(b) * T * ldo + h * hs, lse + (int64_t(b) * NH + h) * T,
                    row + h * hs, k, k + int64_t(s.NKV) * hs, r0, r1, int(ld), int(ldo), hs, scale,
                    S.data(), O.data(), bf16, doc_start ? doc_start + int64_t(b) * T : nullptr);
    }
  }
}

AttentionShape heads_of(int B, int T, int C, int NH) {
  STRATA_CHECK(NH > 0 && C % NH == 0, "attention: C ", C, " is not a multiple of NH ", NH);
  return {B, T, NH, NH, C / NH};
}

void check(AttentionShape s) {
  STRATA_CHECK(s.NKV > 0 && s.NH % s.NKV == 0, "attention: kv heads ", s.NKV,
               " do not divide heads ", s.NH);
}

}  // namespace

void attention_forward(float* out, float* lse, const float* qkv, int B, int T, int C, int NH,
                       bool bf16, const int32_t* doc_start) {
  forward_impl(out, lse, qkv, heads_of(B, T, C, NH), bf16, doc_start);
}

void attention_forward(uint16_t* out, float* lse, const uint16_t* qkv, int B, int T, int C,
                       int NH, const int32_t* doc_start) {
  forward_impl(out, lse, qkv, heads_of(B, T, C, NH), true, doc_start);
}

void attention_forward(float* out, float* lse, const float* qkv, AttentionShape s, bool bf16,
                       const int32_t* doc_start) {
  check(s);
  forward_impl(out, lse, qkv, s, bf16, doc_start);
}

void attention_forward(uint16_t* out, float* lse, const uint16_t* qkv, AttentionShape s,
                       const int32_t* doc_start) {
  check(s);
  forward_impl(out, lse, qkv, s, true, doc_start);
}

namespace {

struct BackwardScratch {
  std::vector<float> S, dP, D, row;
};

inline float dot_row(const float* a, const float* b, int n, float*) { return dot16(a, b, n); }
inline float dot_row(const float* a, const uint16_t* b, int n, float* tmp) {
  for (int i = 0; i < n; ++i) tmp[i] = bf16_to_f32(b[i]);
  return dot16(a, tmp, n);
}

// All of one (b, h). Pointers are at the head's first column; ld is the row stride of
// q/k/v ((NH + 2 NKV) hs) and ldo that of out/dout (NH hs). accumulate: dk/dv already hold
// an earlier query head's share (GQA), so add to them instead of writing.
template <typename E>
void backward_head(float* dq, float* dk, float* dv, const float* dout, const E* q, const E* k,
                   const E* v, const E* out, const float* lse, int T, int ld, int ldo, int hs,
                   float scale, BackwardScratch& w, bool bf16, const int32_t* ds, bool accumulate) {
  float* S = w.S.data();
  float* dP = w.dP.data();
  float* D = w.D.data();
  for (int t = 0; t < T; ++t) {
    D[t] = dot_row(dout + int64_t(t) * ldo, out + int64_t(t) * ldo, hs, w.row.data());
    std::memset(dq + int64_t(t) * ld, 0, sizeof(float) * hs);
  }
  for (int k0 = 0; k0 < T; k0 += kK) {
    const int nk = std::min(kK, T - k0);
    // accumulate: an earlier query head of the KV group already wrote dk/dv of these keys.
    bool first = !accumulate;
    bool seen = false;
    for (int r0 = (k0 / kQ) * kQ; r0 < T; r0 += kQ) {
      const int nr = std::min(kQ, T - r0);
      if (first_key_tile(ds, r0, r0 + nr) >= k0 + nk) continue;  // every row's document starts later
      // S (nr, nk) = scale * Q_i K_j^T, then P = exp(S - lse) in place
      tile_gemm(bf16, Op::N, Op::T, nr, nk, hs, scale, q + int64_t(r0) * ld, ld, k + int64_t(k0) * ld, ld,
           0.0f, S, kK);
      for (int i = 0; i < nr; ++i) {
        float* s = S + i * kK;
        const int valid = std::max(0, std::min(nk, r0 + i - k0 + 1));
        const int lo = std::min(doc_lo(ds, r0 + i, k0, nk), valid);
        const float L = lse[r0 + i];
        for (int j = 0; j < lo; ++j) s[j] = 0.0f;
        for (int j = lo; j < valid; ++j) s[j] = fast_exp(s[j] - L);
        for (int j = valid; j < nk; ++j) s[j] = 0.0f;
      }
      // dV_j (nk, hs) (+)= P^T (nk, nr) @ dO_i (nr, hs)
      tile_gemm(bf16, Op::T, Op::N, nk, hs, nr, 1.0f, S, kK, dout + int64_t(r0) * ldo, ldo,
           first ? 0.0f : 1.0f, dv + int64_t(k0) * ld, ld);
      // dP (nr, nk) = dO_i (nr, hs) @ V_j^T (hs, nk)
      tile_gemm(bf16, Op::N, Op::T, nr, nk, hs, 1.0f, dout + int64_t(r0) * ldo, ldo, v + int64_t(k0) * ld, ld,
           0.0f, dP, kK);
      // dS = P * (dP - D), kept in dP
      for (int i = 0; i < nr; ++i) {
        const float* p = S + i * kK;
        float* ds = dP + i * kK;
        const float Di = D[r0 + i];
        for (int j = 0; j < nk; ++j) ds[j] = p[j] * (ds[j] - Di);
      }
      // dQ_i (nr, hs) += scale * dS (nr, nk) @ K_j (nk, hs)
      tile_gemm(bf16, Op::N, Op::N, nr, hs, nk, scale, dP, kK, k + int64_t(k0) * ld, ld, 1.0f,
           dq + int64_t(r0) * ld, ld);
      // dK_j (nk, hs) (+)= scale * dS^T (nk, nr) @ Q_i (nr, hs)
      tile_gemm(bf16, Op::T, Op::N, nk, hs, nr, scale, dP, kK, q + int64_t(r0) * ld, ld, first ? 0.0f : 1.0f,
           dk + int64_t(k0) * ld, ld);
      first = false;
      seen = true;
    }
    if (!seen && !accumulate) {  // no row sees these keys (documents): their gradients are zero
      for (int j = k0; j < k0 + nk; ++j) {
        std::memset(dk + int64_t(j) * ld, 0, sizeof(float) * hs);
        std::memset(dv + int64_t(j) * ld, 0, sizeof(float) * hs);
      }
    }
  }
}

template <typename E>
void backward_impl(float* dqkv, const float* dout, const E* qkv, const E* out, const float* lse,
                   AttentionShape s, bool bf16, const int32_t* doc_start) {
  const int T = s.T, NH = s.NH, hs = s.hs;
  const int group = NH / s.NKV;
  const int64_t ld = s.row(), ldo = int64_t(NH) * hs;
  const float scale = 1.0f / std::sqrt(float(hs));
  // One task per (b, KV head): its query heads run in order, the first writing dk/dv and the
  // others adding to them, so the group's sum has a fixed order for any thread count.
  const int64_t tasks = int64_t(s.B) * s.NKV;
#pragma omp parallel
  {
    BackwardScratch w{std::vector<float>(kQ * kK), std::vector<float>(kQ * kK),
                      std::vector<float>(T), std::vector<float>(hs)};
#pragma omp for schedule(dynamic, 1)
    for (int64_t task = 0; task < tasks; ++task) {
      const int b = int(task / s.NKV), g = int(task % s.NKV);
      const int64_t roff = int64_t(b) * T * ld, koff = roff + s.k_col(g);
      const int64_t voff = koff + int64_t(s.NKV) * hs;
      for (int h = g * group; h < (g + 1) * group; ++h) {
        const int64_t qoff = roff + int64_t(h) * hs;
        const int64_t ooff = int64_t(b) * T * ldo + int64_t(h) * hs;
        backward_head(dqkv + qoff, dqkv + koff, dqkv + voff, dout + ooff, qkv + qoff, qkv + koff,
                      qkv + voff, out + ooff, lse + (int64_t(b) * NH + h) * T, T, int(ld), int(ldo),
                      hs, scale, w, bf16, doc_start ? doc_start + int64_t(b) * T : nullptr,
                      h != g * group);
      }
    }
  }
}

}  // namespace

void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* out,
                        const float* lse, int B, int T, int C, int NH, bool bf16,
                        const int32_t* doc_start) {
  backward_impl(dqkv, dout, qkv, out, lse, heads_of(B, T, C, NH), bf16, doc_start);
}

void attention_backward(float* dqkv, const float* dout, const uint16_t* qkv, const uint16_t* out,
                        const float* lse, int B, int T, int C, int NH,
                        const int32_t* doc_start) {
  backward_impl(dqkv, dout, qkv, out, lse, heads_of(B, T, C, NH), true, doc_start);
}

void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* out,
                        const float* lse, AttentionShape s, bool bf16, const int32_t* doc_start) {
  check(s);
  backward_impl(dqkv, dout, qkv, out, lse, s, bf16, doc_start);
}

void attention_backward(float* dqkv, const float* dout, const uint16_t* qkv, const uint16_t* out,
                        const float* lse, AttentionShape s, const int32_t* doc_start) {
  check(s);
  backward_impl(dqkv, dout, qkv, out, lse, s, true, doc_start);
}

void attention_decode(float* out, const float* q, int64_t q_stride, const float* K, const float* V,
                      AttentionShape s, int S) {
  const int NH = s.NH, hs = s.hs, len = s.T, group = s.NH / s.NKV;
  const int64_t KW = int64_t(s.NKV) * hs;
  const float scale = 1.0f / std::sqrt(float(hs));
#pragma omp parallel for schedule(static)
  for (int bh = 0; bh < s.B * NH; ++bh) {
    const int b = bh / NH, h = bh % NH, g = h / group;
    const float* qh = q + int64_t(b) * q_stride + int64_t(h) * hs;
    const float* Kb = K + int64_t(b) * S * KW + int64_t(g) * hs;
    const float* Vb = V + int64_t(b) * S * KW + int64_t(g) * hs;
    float* o = out + (int64_t(b) * NH + h) * hs;
    thread_local std::vector<float> scores;
    scores.resize(size_t(len));
    float mx = -INFINITY;
    for (int t = 0; t < len; ++t) {
      scores[size_t(t)] = dot16(qh, Kb + int64_t(t) * KW, hs) * scale;
      mx = std::max(mx, scores[size_t(t)]);
    }
    float z = 0;
    for (int t = 0; t < len; ++t) z += (scores[size_t(t)] = std::exp(scores[size_t(t)] - mx));
    std::fill(o, o + hs, 0.0f);
    for (int t = 0; t < len; ++t) {
      const float w = scores[size_t(t)] / z;
      const float* vt = Vb + int64_t(t) * KW;
      for (int e = 0; e < hs; ++e) o[e] += w * vt[e];
    }
  }
}

}  // namespace strata::kernels::STRATA_ISA
