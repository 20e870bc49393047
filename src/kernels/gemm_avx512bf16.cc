// gemm_bf16 on AVX-512 BF16 (vdpbf16ps). Compiled for AVX-512 F/BW/VL/DQ/BF16 by the pragma
// below (after the headers: their inline functions stay baseline, isa_target.h says why),
// called only when cpuid says so and the path's self-check passed (selfcheck.h).
//
// Terms: K is taken in pairs (kp = k / 2; an odd K gets a zero partner). vdpbf16ps adds,
// in each of 16 fp32 lanes, the two products of a pair: acc[j] += a[2j] b[2j] + a[2j+1]
// b[2j+1]. So both operands are packed as 32-bit *pairs* (two bf16 values of consecutive k):
//   B: panels of NR = 64 columns, Bp[kp][64] pairs (4 vectors of 16 columns per kp);
//   A: op(A) rows of pairs, read by broadcasting one pair per row and kp:
//      op(A) = A  (rows contiguous in k):   Ap[i][kp], row stride lda_p
//      op(A) = A^T (k is A's row index):    Ap[kp][i], kp stride = padded rows
// Packing rounds fp32 to bf16 (nearest even, vcvtneps2bf16) or copies bf16; it is
// vectorised (interleaves by vpermt2w, op(B) = B^T by 32-bit gathers). The micro-kernel is
// MR x NR = 6 x 64: 24 zmm accumulators, 4 B vectors, one broadcast per row and pair.
// A row chunk of op(A) (all of K, at most ~8 MB) is packed once and shared by the threads;
// op(B) in column blocks of at most ~2 MB. Tasks of MT x NT of C walk K in slices of KCP
// pairs, so every element of C has one producer and a fixed order (thread-count
// independent bits).
#if defined(__x86_64__)
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/memory.h"
#include "kernels/gemm_bf16_impl.h"

#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,fma")
#include "kernels/gemm_bf16_pack.h"

// GCC 12's AVX-512 headers trip -Wmaybe-uninitialized on their own placeholder operands.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace strata::kernels::detail {

// The internals of the path, named apart so that tools/isa/baseline_check.py can tell
// them from baseline code.
namespace bf16_isa {
namespace {

constexpr int MR = 6;
constexpr int NV = 4;
constexpr int NR = kNR;      // 64 columns per panel
constexpr int KCP = 256;     // pairs per K slice (64 KB of B panel; 64 and 128 measured slower)
constexpr int MT = 16 * MR;  // rows per task
constexpr int NT = 2 * NR;   // columns per task

struct Layout {
  int kp;     // pairs: ceil(K / 2)
  int lda_p;  // pairs per packed op(A) row (rows layout) and per B^T row buffer (mult. of 16)
  int mc;     // rows per A chunk (multiple of MT)
  int ncb;    // columns per B block (multiple of NR)
};

Layout layout(const Bf16Args& g) {
  Layout L;
  L.kp = (g.K + 1) / 2;
  L.lda_p = (L.kp + 15) / 16 * 16;
  const int64_t row_bytes = int64_t(L.lda_p) * 4;
  const int64_t mc = std::max<int64_t>(MT, (int64_t(8) << 20) / row_bytes / MT * MT);
  L.mc = int(std::min<int64_t>(mc, (g.M + MT - 1) / MT * MT));
  const int64_t nc = std::max<int64_t>(NR, (int64_t(2) << 20) / row_bytes / NR * NR);
  L.ncb = int(std::min<int64_t>(nc, (g.N + NR - 1) / NR * NR));
  return L;
}

// Work item q of packing the A chunk at row i0: 16 rows (op(A) = A) or 16 pairs (A^T).
void pack_a(const Bf16Args& g, const Layout& L, int i0, uint32_t* ap, int q0, int q1) {
  if (g.opa == Op::N)
    pack_a_rows(g, L.lda_p, i0, ap, q0, q1);
  else
    pack_a_pairs(g, L.mc, i0, ap, q0, q1);
}

// C tile (MR x NR at rows i0, cols j0, clipped) = beta_eff C + alpha (a x bp) (+ bias on the
// first slice). a: pair (r, kp) at a[r * ars + kp * aks]; bp: the panel at the slice start.
inline void micro_tile(const Bf16Args& g, int kc, const uint32_t* __restrict a, int64_t ars,
                       int64_t aks, const uint32_t* __restrict bp, int i0, int j0, float beta_eff,
                       bool first) {
  __m512 acc[MR][NV];
  for (int r = 0; r < MR; ++r)
    for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_setzero_ps();
  for (int kp = 0; kp < kc; ++kp) {
    __m512i b[NV];
    for (int v = 0; v < NV; ++v) b[v] = _mm512_load_si512(bp + kp * NR + v * 16);
    for (int r = 0; r < MR; ++r) {
      const __m512i s = _mm512_set1_epi32(int(a[r * ars + kp * aks]));
      for (int v = 0; v < NV; ++v)
        acc[r][v] = _mm512_dpbf16_ps(acc[r][v], __m512bh(s), __m512bh(b[v]));
    }
  }
  const int mr = std::min(MR, g.M - i0), nr = std::min(NR, g.N - j0);
  const float* bias = first && g.bias ? g.bias + j0 : nullptr;
  const __m512 alpha = _mm512_set1_ps(g.alpha), beta = _mm512_set1_ps(beta_eff);
  for (int r = 0; r < mr; ++r) {
    float* c = g.C + int64_t(i0 + r) * g.ldc + j0;
    for (int v = 0; v < NV; ++v) {
      const int n = nr - v * 16;
      if (n <= 0) break;
      const __mmask16 m = mask16(n);
      __m512 x = _mm512_mul_ps(alpha, acc[r][v]);
      if (beta_eff != 0.0f) x = _mm512_fmadd_ps(beta, _mm512_maskz_loadu_ps(m, c + v * 16), x);
      if (bias) x = _mm512_add_ps(x, _mm512_maskz_loadu_ps(m, bias + v * 16));
      _mm512_mask_storeu_ps(c + v * 16, m, x);
    }
  }
}

// Rows [i0, i1) x columns [j0, j1) of C (i relative to the A chunk at ib, j to the B block
// at jb), all K slices in order.
void run_task(const Bf16Args& g, const Layout& L, const uint32_t* ap, const uint32_t* bpack, int ib,
              int jb, int i0, int i1, int j0, int j1) {
  const int64_t ars = g.opa == Op::N ? L.lda_p : 1, aks = g.opa == Op::N ? 1 : L.mc;
  for (int p0 = 0; p0 < L.kp; p0 += KCP) {
    const int kc = std::min(KCP, L.kp - p0);
    const float beta_eff = p0 == 0 ? g.beta : 1.0f;
    for (int i = i0; i < i1; i += MR) {
      const uint32_t* a = ap + int64_t(i) * ars + int64_t(p0) * aks;
      for (int j = j0; j < j1; j += NR) {
        const uint32_t* bp = bpack + int64_t(j / NR) * L.kp * NR + int64_t(p0) * NR;
        micro_tile(g, kc, a, ars, aks, bp, ib + i, jb + j, beta_eff, p0 == 0);
      }
    }
  }
}

thread_local PackScratch tl_pack;
thread_local std::vector<uint16_t> tl_rows;  // op(B) = B^T: one panel's rows in bf16

}  // namespace
}  // namespace bf16_isa

void gemm_avx512bf16(const Bf16Args& g, bool parallel) {
  using namespace bf16_isa;
  const Layout L = layout(g);
  uint32_t* ap = PackScratch::get(tl_pack.a, size_t(L.mc) * L.lda_p);
  uint32_t* bpack = PackScratch::get(tl_pack.b, size_t(L.ncb) * L.kp);
  const int aq = g.opa == Op::N ? L.mc : L.kp;  // units of A packing work (rows or pairs)
  auto ctasks = [&](int je, int jb) { return (je - jb + NT - 1) / NT; };
  drive(
      g, L.mc, L.ncb, (aq + 15) / 16, parallel,
      [&](int ib, int q) { pack_a(g, L, ib, ap, q * 16, std::min(aq, q * 16 + 16)); },
      [&](int jb, int q) {
        pack_b(g, L.kp, L.lda_p, jb + q * NR, bpack + int64_t(q) * L.kp * NR, tl_rows);
      },
      [&](int ib, int jb, int je) {
        return (std::min(L.mc, g.M - ib) + MT - 1) / MT * ctasks(je, jb);
      },
      [&](int ib, int jb, int je, int t) {
        const int mrows = std::min(L.mc, g.M - ib), ct = ctasks(je, jb);
        const int i0 = (t / ct) * MT, j0 = (t % ct) * NT;
        run_task(g, L, ap, bpack, ib, jb, i0, std::min(mrows, i0 + MT), j0,
                 std::min(je - jb, j0 + NT));
      },
      [] {}, [] {});
}

}  // namespace strata::kernels::detail

#else  // not x86-64: never selected (cpu_has_avx512bf16() is false)
#include "kernels/gemm_bf16_impl.h"
namespace strata::kernels::detail {
void gemm_avx512bf16(const Bf16Args&, bool) {}
}  // namespace strata::kernels::detail
#endif
