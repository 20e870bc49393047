#include "kernels/attention_block.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "kernels/attention.h"
#include "kernels/fastmath.h"
#include "kernels/gemm.h"
#include "kernels/gemm_bf16.h"
#include "kernels/isa_target.h"  // last: what follows is compiled for the level

namespace strata::kernels::STRATA_ISA {

namespace {

void check(const BlockShape& s) {
  STRATA_CHECK(s.kv_heads() > 0 && s.NH % s.kv_heads() == 0, "attention block: kv heads ",
               s.kv_heads(), " do not divide heads ", s.NH);
}

constexpr int kQ = kAttentionTile;
constexpr int kK = kAttentionTile;

void tile_gemm(bool bf16, Op opa, Op opb, int M, int N, int K, float alpha, const float* A,
               int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  if (bf16)
    gemm_bf16(opa, opb, M, N, K, alpha, Mat(A, int(lda)), Mat(B, int(ldb)), beta, C, int(ldc));
  else
    gemm(opa, opb, M, N, K, alpha, A, int(lda), B, int(ldb), beta, C, int(ldc));
}

// Keys of tile [k0, k0 + nk) visible from query row t of the block.
int visible(BlockMask mask, int t, int k0, int nk) {
  if (mask == BlockMask::full) return nk;
  return std::max(0, std::min(nk, t - k0 + 1));
}

// Keys [0, lo) of the tile at k0 are before query row t's document (ds: the rows' document
// starts, offset: the block's first key position).
inline int doc_lo(const int32_t* ds, int64_t offset, int t, int k0, int nk) {
  return ds ? int(std::clamp<int64_t>(ds[t] - offset - k0, 0, nk)) : 0;
}

// The first key tile some row of [r0, r1) may see (documents: the lowest start, rounded down).
int first_key_tile(const int32_t* ds, int64_t offset, int r0, int r1) {
  if (!ds) return 0;
  int64_t lo = INT64_MAX;
  for (int t = r0; t < r1; ++t) lo = std::min<int64_t>(lo, ds[t] - offset);
  return int(std::max<int64_t>(0, lo) / kK * kK);
}

// Query rows [r0, r1) of one (b, h): the block's softmax, merged into out/lse.
// q, k, v, out point at the head's first column of row 0; S (kQ, kK), O (kQ, hs) scratch.
void forward_tile(float* out, int64_t ldo, float* lse, const float* q, int64_t ldq, const float* k,
                  const float* v, int64_t ldkv, int r0, int r1, int Sk, int hs, BlockMask mask,
                  float scale, float* S, float* O, bool bf16, const int32_t* ds, int64_t offset) {
  const int nr = r1 - r0;
  float m[kQ], l[kQ];
  std::fill(m, m + nr, -INFINITY);
  std::fill(l, l + nr, 0.0f);
  std::memset(O, 0, sizeof(float) * nr * hs);
  const int kend = mask == BlockMask::causal ? r1 : Sk;
  for (int k0 = first_key_tile(ds, offset, r0, r1); k0 < kend; k0 += kK) {
    const int nk = std::min(kK, kend - k0);
    // S (nr, nk) = scale * Q_i (nr, hs) @ K_j^T (hs, nk)
    tile_gemm(bf16, Op::N, Op::T, nr, nk, hs, scale, q + r0 * ldq, ldq, k + k0 * ldkv, ldkv, 0.0f,
              S, kK);
    for (int i = 0; i < nr; ++i) {
      float* s = S + i * kK;
      const int valid = visible(mask, r0 + i, k0, nk);
      const int lo = doc_lo(ds, offset, r0 + i, k0, nk);
      if (lo >= valid) {
        std::fill(s, s + nk, 0.0f);
        continue;
      }
      online_softmax_row(s, lo, valid, nk, m[i], l[i], O + i * hs, hs);
    }
    // O (nr, hs) += P (nr, nk) @ V_j (nk, hs)
    tile_gemm(bf16, Op::N, Op::N, nr, hs, nk, 1.0f, S, kK, v + k0 * ldkv, ldkv, 1.0f, O, hs);
  }
  for (int i = 0; i < nr; ++i) {
    if (l[i] == 0.0f) continue;  // no key of this block is in the row's document
    float* o = out + (r0 + i) * ldo;
    const float lb = m[i] + std::log(l[i]);  // this block's lse
    const float la = lse[r0 + i];            // what the earlier blocks gave
    if (la == -INFINITY) {
      const float inv = 1.0f / l[i];
      for (int d = 0; d < hs; ++d) o[d] = O[i * hs + d] * inv;
      lse[r0 + i] = lb;
      continue;
    }
    const float mx = std::max(la, lb);
    const float ea = std::exp(la - mx), eb = std::exp(lb - mx);
    const float lnew = mx + std::log(ea + eb);
    const float wa = std::exp(la - lnew), wb = std::exp(lb - lnew) / l[i];
    for (int d = 0; d < hs; ++d) o[d] = wa * o[d] + wb * O[i * hs + d];
    lse[r0 + i] = lnew;
  }
}

}  // namespace

void attention_block_forward(RowsOut out, Stats lse, Rows q, Rows k, Rows v, BlockShape s,
                             BlockMask mask, bool bf16, DocBounds docs) {
  check(s);
  const float scale = 1.0f / std::sqrt(float(s.hs));
  const int group = s.NH / s.kv_heads();
  const int tiles = (s.Sq + kQ - 1) / kQ;
  const int64_t tasks = int64_t(s.B) * s.NH * tiles;
#pragma omp parallel
  {
    std::vector<float> S(kQ * kK), O(kQ * s.hs);
#pragma omp for schedule(dynamic, 1)
    for (int64_t task = 0; task < tasks; ++task) {
      const int t = tiles - 1 - int(task % tiles);
      const int h = int((task / tiles) % s.NH);
      const int b = int(task / (int64_t(tiles) * s.NH));
      const int64_t col = int64_t(h) * s.hs, kv_col = int64_t(h / group) * s.hs;
      forward_tile(out.at(b, 0) + col, out.ld, lse.at(b, h), q.at(b, 0) + col, q.ld,
                   k.at(b, 0) + kv_col, v.at(b, 0) + kv_col, k.ld, t * kQ,
                   std::min(s.Sq, t * kQ + kQ), s.Sk, s.hs, mask, scale, S.data(), O.data(), bf16,
                   docs.rows(b), docs.offset);
    }
  }
}

void attention_row_dot(Stats D, Rows dout, Rows out, BlockShape s) {
#pragma omp parallel for collapse(2) schedule(static)
  for (int b = 0; b < s.B; ++b)
    for (int h = 0; h < s.NH; ++h) {
      float* d = D.at(b, h);
      const int64_t col = int64_t(h) * s.hs;
      for (int t = 0; t < s.Sq; ++t) d[t] = dot16(dout.at(b, t) + col, out.at(b, t) + col, s.hs);
    }
}

void attention_block_backward(RowsOut dq, RowsOut dk, RowsOut dv, Rows dout, Rows q, Rows k,
                              Rows v, Stats lse, Stats D, BlockShape s, BlockMask mask,
                              bool bf16, DocBounds docs) {
  check(s);
  const float scale = 1.0f / std::sqrt(float(s.hs));
  const int NKV = s.kv_heads(), group = s.NH / NKV;
  const int64_t tasks = int64_t(s.B) * NKV;
#pragma omp parallel
  {
    std::vector<float> S(kQ * kK), dP(kQ * kK);
    // Tasks are (b, KV head); the group's query heads add into dk/dv in head order.
#pragma omp for schedule(dynamic, 1)
    for (int64_t task = 0; task < tasks; ++task) {
      const int b = int(task / NKV), g = int(task % NKV);
      for (int h = g * group; h < (g + 1) * group; ++h) {
        const int64_t col = int64_t(h) * s.hs, kv_col = int64_t(h / group) * s.hs;
        const float *qp = q.at(b, 0) + col, *kp = k.at(b, 0) + kv_col, *vp = v.at(b, 0) + kv_col;
        const float* dop = dout.at(b, 0) + col;
        float *dqp = dq.at(b, 0) + col, *dkp = dk.at(b, 0) + kv_col, *dvp = dv.at(b, 0) + kv_col;
        const float *L = lse.at(b, h), *Dh = D.at(b, h);
        const int32_t* ds = docs.rows(b);
        for (int k0 = 0; k0 < s.Sk; k0 += kK) {
          const int nk = std::min(kK, s.Sk - k0);
          const int first = mask == BlockMask::causal ? k0 / kQ * kQ : 0;
          for (int r0 = first; r0 < s.Sq; r0 += kQ) {
            const int nr = std::min(kQ, s.Sq - r0);
            if (first_key_tile(ds, docs.offset, r0, r0 + nr) >= k0 + nk)
              continue;  // no row sees them
            // S (nr, nk) = scale * Q_i K_j^T, then P = exp(S - lse) in place
            tile_gemm(bf16, Op::N, Op::T, nr, nk, s.hs, scale, qp + r0 * q.ld, q.ld, kp + k0 * k.ld,
                      k.ld, 0.0f, S.data(), kK);
            for (int i = 0; i < nr; ++i) {
              float* p = S.data() + i * kK;
              const int valid = visible(mask, r0 + i, k0, nk);
              const int lo = std::min(doc_lo(ds, docs.offset, r0 + i, k0, nk), valid);
              for (int j = 0; j < lo; ++j) p[j] = 0.0f;
              for (int j = lo; j < valid; ++j) p[j] = fast_exp(p[j] - L[r0 + i]);
              for (int j = valid; j < nk; ++j) p[j] = 0.0f;
            }
            // dV_j (nk, hs) += P^T (nk, nr) @ dO_i (nr, hs)
            tile_gemm(bf16, Op::T, Op::N, nk, s.hs, nr, 1.0f, S.data(), kK, dop + r0 * dout.ld,
                      dout.ld, 1.0f, dvp + k0 * dv.ld, dv.ld);
            // dP (nr, nk) = dO_i (nr, hs) @ V_j^T (hs, nk); dS = P * (dP - D) in place
            tile_gemm(bf16, Op::N, Op::T, nr, nk, s.hs, 1.0f, dop + r0 * dout.ld, dout.ld,
                      vp + k0 * v.ld, v.ld, 0.0f, dP.data(), kK);
            for (int i = 0; i < nr; ++i) {
              const float* p = S.data() + i * kK;
              float* ds = dP.data() + i * kK;
              for (int j = 0; j < nk; ++j) ds[j] = p[j] * (ds[j] - Dh[r0 + i]);
            }
            // dQ_i (nr, hs) += scale * dS @ K_j;  dK_j (nk, hs) += scale * dS^T @ Q_i
            tile_gemm(bf16, Op::N, Op::N, nr, s.hs, nk, scale, dP.data(), kK, kp + k0 * k.ld, k.ld,
                      1.0f, dqp + r0 * dq.ld, dq.ld);
            tile_gemm(bf16, Op::T, Op::N, nk, s.hs, nr, scale, dP.data(), kK, qp + r0 * q.ld, q.ld,
                      1.0f, dkp + k0 * dk.ld, dk.ld);
          }
        }
      }
    }
  }
}

}  // namespace strata::kernels::STRATA_ISA
