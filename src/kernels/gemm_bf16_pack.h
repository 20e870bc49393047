// Internal to kernels: packing of gemm_bf16 operands into bf16 *pairs*, shared by the
// AVX-512 BF16 and AMX translation units, included after their target pragma (AVX-512 BF16
// and more): the functions below have internal linkage, so each unit keeps its own copy, and
// the headers included here come first in those units, so theirs stay baseline.
//
// Terms: K is taken in pairs (kp = k / 2; an odd K gets a zero partner); a pair is two bf16
// values of consecutive k in one 32-bit word, the unit both vdpbf16ps and tdpbf16ps read.
//   B: panels of NR = 64 columns, Bp[kp][64] pairs (pack_b);
//   A, "rows" layout: Ap[i][kp], row stride lda_p pairs (op(A) = A; AMX always);
//   A, "pairs" layout: Ap[kp][i], kp stride = rows of the chunk (op(A) = A^T, AVX-512).
// fp32 is rounded to bf16 to nearest even (vcvtneps2bf16), bf16 is copied; pairs of two
// rows are interleaved by vpermt2w, op(B) = B^T by 32-bit gathers. Rows, pairs and columns
// beyond the matrix are packed as zeros.
#pragma once
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/memory.h"
#include "kernels/gemm_bf16_impl.h"

namespace strata::kernels::detail::bf16_isa {
namespace {

constexpr int kNR = 64;  // columns per B panel

inline __mmask16 mask16(int n) {
  return n >= 16 ? __mmask16(0xffff) : n <= 0 ? __mmask16(0) : __mmask16((1u << n) - 1);
}

// 16 elements of row `row` of X from column c (n valid, zero beyond) as bf16 in a __m256i.
inline __m256i load16(const Mat& X, int64_t row, int64_t c, int n) {
  if (n <= 0) return _mm256_setzero_si256();
  if (X.t == DType::bf16)
    return _mm256_maskz_loadu_epi16(mask16(n), static_cast<const uint16_t*>(X.p) + row * X.ld + c);
  const __m512 v = _mm512_maskz_loadu_ps(mask16(n), static_cast<const float*>(X.p) + row * X.ld + c);
  return __m256i(_mm512_cvtneps_pbh(v));
}

// 16 pairs (X[r][c + j], X[r + 1][c + j]), j < 16: the interleave of two rows; rows at or
// beyond `rows` and columns beyond n read as zero.
inline __m512i pair16(const Mat& X, int64_t r, int rows, int64_t c, int n) {
  // Word 2j of the result is word j of lo, word 2j + 1 word j of hi (index 32 + j).
  alignas(64) static const uint16_t kInterleave[32] = {0,  32, 1,  33, 2,  34, 3,  35, 4,  36, 5,
                                                       37, 6,  38, 7,  39, 8,  40, 9,  41, 10, 42,
                                                       11, 43, 12, 44, 13, 45, 14, 46, 15, 47};
  const __m256i lo = r < rows ? load16(X, r, c, n) : _mm256_setzero_si256();
  const __m256i hi = r + 1 < rows ? load16(X, r + 1, c, n) : _mm256_setzero_si256();
  return _mm512_permutex2var_epi16(_mm512_zextsi256_si512(lo), _mm512_load_si512(kInterleave),
                                   _mm512_zextsi256_si512(hi));
}

// X[r][c] as bf16 bits.
inline uint32_t bf16_at(const Mat& X, int64_t r, int64_t c) {
  if (X.t == DType::bf16) return static_cast<const uint16_t*>(X.p)[r * X.ld + c];
  return f32_to_bf16(static_cast<const float*>(X.p)[r * X.ld + c]);
}

// Row `row` of X (K elements from column 0) as bf16 into dst (kpad uint16, zero beyond K).
inline void row_bf16(uint16_t* dst, const Mat& X, int64_t row, int K, int kpad) {
  for (int c = 0; c < kpad; c += 16)
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + c), load16(X, row, c, K - c));
}

// op(A) rows [i0 + q0, i0 + q1) in the rows layout (lda_p pairs per row, zero rows >= M).
inline void pack_a_rows(const Bf16Args& g, int lda_p, int i0, uint32_t* ap, int q0, int q1) {
  for (int i = q0; i < q1; ++i) {
    uint32_t* dst = ap + int64_t(i) * lda_p;
    if (i0 + i >= g.M) {
      std::memset(dst, 0, sizeof(uint32_t) * lda_p);
    } else if (g.opa == Op::N) {
      row_bf16(reinterpret_cast<uint16_t*>(dst), g.A, i0 + i, g.K, 2 * lda_p);
    } else {  // A stored (K, M): column i0 + i, element by element
      for (int kp = 0; kp < lda_p; ++kp) {
        const int k = 2 * kp;
        const uint32_t lo = k < g.K ? bf16_at(g.A, k, i0 + i) : 0;
        const uint32_t hi = k + 1 < g.K ? bf16_at(g.A, k + 1, i0 + i) : 0;
        dst[kp] = lo | (hi << 16);
      }
    }
  }
}

// op(A) pairs [q0, q1) in the pairs layout: Ap[kp][i], i < mc (zero columns >= M).
inline void pack_a_pairs(const Bf16Args& g, int mc, int i0, uint32_t* ap, int q0, int q1) {
  for (int kp = q0; kp < q1; ++kp)
    for (int i = 0; i < mc; i += 16)
      _mm512_storeu_si512(ap + int64_t(kp) * mc + i,
                          pair16(g.A, 2 * int64_t(kp), g.K, i0 + i, g.M - i0 - i));
}

// Panel of op(B) columns [j0, j0 + 64): Bp[kp][64] for kp < kp_n (pairs beyond K are zero).
// lda_p (>= kp_n, multiple of 16) sizes the row buffer of the B^T case.
inline void pack_b(const Bf16Args& g, int kp_n, int lda_p, int j0, uint32_t* bp,
                   std::vector<uint16_t>& tmp) {
  if (g.opb == Op::N) {
    for (int kp = 0; kp < kp_n; ++kp)
      for (int v = 0; v < kNR / 16; ++v)
        _mm512_store_si512(bp + int64_t(kp) * kNR + v * 16,
                           pair16(g.B, 2 * int64_t(kp), g.K, j0 + v * 16, g.N - j0 - v * 16));
    return;
  }
  // op(B) = B^T, B stored (N, K): the pairs lie along B's rows. Convert the panel's rows to
  // bf16 first (lda_p pairs each), then gather 16 columns per vector.
  tmp.resize(size_t(kNR) * lda_p * 2);
  uint32_t* t = reinterpret_cast<uint32_t*>(tmp.data());
  for (int j = 0; j < kNR; ++j) {
    if (j0 + j < g.N)
      row_bf16(tmp.data() + size_t(j) * lda_p * 2, g.B, j0 + j, g.K, 2 * lda_p);
    else
      std::memset(t + size_t(j) * lda_p, 0, sizeof(uint32_t) * lda_p);
  }
  const __m512i base =
      _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                         _mm512_set1_epi32(lda_p));
  for (int kp = 0; kp < kp_n; ++kp)
    for (int v = 0; v < kNR / 16; ++v) {
      const __m512i idx = _mm512_add_epi32(base, _mm512_set1_epi32(v * 16 * lda_p + kp));
      _mm512_store_si512(bp + int64_t(kp) * kNR + v * 16, _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), __mmask16(0xffff), idx, t, 4));
    }
}

// Packing buffers of the calling thread, grown on demand and kept (no allocation per call),
// counted under MemCategory::other; at most ~8 MB (A) + ~2 MB (B) unless K alone exceeds it.
struct PackScratch {
  Buffer a, b;
  static uint32_t* get(Buffer& buf, size_t n) {
    if (buf.bytes() < n * sizeof(uint32_t)) buf = Buffer(MemCategory::other, n * sizeof(uint32_t));
    return buf.as<uint32_t>();
  }
};

// The loop both paths share. op(A) in chunks of mc rows, each packed once by aitems work
// items (pack_a(ib, q)); op(B) in blocks of ncb columns, packed by panels of kNR
// (pack_b(jb, q)); then tasks(ib, jb, je) tasks (task(ib, jb, je, t)). In parallel every
// loop is an OpenMP for-loop of one region (tasks dynamic: they write disjoint parts of C);
// enter / leave run once per thread around the work (AMX tile configuration).
template <typename PackA, typename PackB, typename Tasks, typename Task, typename Enter,
          typename Leave>
void drive(const Bf16Args& g, int mc, int ncb, int aitems, bool parallel, PackA pack_a,
           PackB pack_b, Tasks tasks, Task task, Enter enter, Leave leave) {
  auto body = [&](bool par) {
    enter();
    for (int ib = 0; ib < g.M; ib += mc)
      for (int jb = 0; jb < g.N; jb += ncb) {
        const int je = std::min(g.N, jb + ncb);
        const int panels = (je - jb + kNR - 1) / kNR, nt = tasks(ib, jb, je);
        if (par) {
          if (jb == 0) {
#pragma omp for schedule(static) nowait
            for (int q = 0; q < aitems; ++q) pack_a(ib, q);
          }
#pragma omp for schedule(static)
          for (int q = 0; q < panels; ++q) pack_b(jb, q);
#pragma omp for schedule(dynamic, 1)
          for (int t = 0; t < nt; ++t) task(ib, jb, je, t);
        } else {
          if (jb == 0)
            for (int q = 0; q < aitems; ++q) pack_a(ib, q);
          for (int q = 0; q < panels; ++q) pack_b(jb, q);
          for (int t = 0; t < nt; ++t) task(ib, jb, je, t);
        }
      }
    leave();
  };
  if (parallel) {
#pragma omp parallel
    body(true);
  } else {
    body(false);
  }
}

}  // namespace
}  // namespace strata::kernels::detail::bf16_isa
