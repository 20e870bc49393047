#include "kernels/gemm.h"

#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <cstring>

#include "core/memory.h"
#include "kernels/isa_target.h"  // last: what follows is compiled for the level

namespace strata::kernels::STRATA_ISA {

namespace {

// The level's vector width (isa_target.h; the pragma there sets no __AVX*__ macro in C++,
// so the level's own macro decides, or the build's -march).
#if defined(STRATA_ISA_V4) || defined(__AVX512F__)
constexpr int kW = 16;  // floats per vector register
constexpr int kNV = 4;  // vectors per micro-tile row: 6 x 64 tile, 24 accumulators
#elif defined(STRATA_ISA_V3) || defined(__AVX__)
constexpr int kW = 8;
constexpr int kNV = 2;  // 6 x 16 tile, 12 accumulators (16 ymm registers)
#else
constexpr int kW = 4;
constexpr int kNV = 2;
#endif
typedef float Vec __attribute__((vector_size(kW * sizeof(float))));
typedef float VecU __attribute__((vector_size(kW * sizeof(float)), aligned(4)));  // unaligned

constexpr int MR = 6;         // micro-tile rows
constexpr int NR = kW * kNV;  // micro-tile columns
constexpr int KC = 128;       // K slice: a KC x NR panel of op(B) stays in L1
constexpr int MT = 16 * MR;   // rows per task
constexpr int NT = 2 * NR;    // columns per task

struct Args {
  Op opa, opb;
  int M, N, K;
  float alpha;
  const float* A;
  int lda;
  const float* B;
  int ldb;
  float beta;
  float* C;
  int ldc;
  const float* bias;
};

// Per-thread packing buffer for op(B), grown on demand and kept (no allocation per call),
// counted under MemCategory::other. At most ~2 MB unless K alone exceeds it (one panel of
// 64 columns x K).
struct Scratch {
  Buffer buf;
  float* get(size_t n) {
    if (buf.bytes() < n * sizeof(float)) buf = Buffer(MemCategory::other, n * sizeof(float));
    return buf.as<float>();
  }
};
thread_local Scratch tl_b;

// Packs op(B)[0 : K, j0 : j0+NR] into bp (K x NR, k-major), zero beyond N.
void pack_b_panel(const Args& g, int j0, float* bp) {
  const int nc = std::min(NR, g.N - j0), K = g.K;
  if (g.opb == Op::N) {
    for (int k = 0; k < K; ++k) {
      const float* src = g.B + int64_t(k) * g.ldb + j0;
      float* dst = bp + int64_t(k) * NR;
      std::memcpy(dst, src, sizeof(float) * nc);
      for (int j = nc; j < NR; ++j) dst[j] = 0.0f;
    }
  } else {
    for (int j = 0; j < nc; ++j) {
      const float* src = g.B + int64_t(j0 + j) * g.ldb;
      for (int k = 0; k < K; ++k) bp[int64_t(k) * NR + j] = src[k];
    }
    for (int k = 0; k < K; ++k)
      for (int j = nc; j < NR; ++j) bp[int64_t(k) * NR + j] = 0.0f;
  }
}

// C tile (MR x NR at rows i0, cols j0, clipped to M x N) = beta_eff * C + alpha * (a x bp),
// plus the bias on the first K slice (first). a points at op(A)[i0, p0] and is read in place
// (no packing: each k step needs only MR scalars): element (r, k) is a[r * lda + k], or
// a[k * lda + r] when A is read transposed. bp is the packed op(B) panel at k = p0. The
// accumulators are locals so they stay in registers for the whole k loop.
template <bool kTransA>
inline void micro_tile(const Args& g, int kc, const float* __restrict a, int64_t lda,
                       const float* __restrict bp, int i0, int j0, float beta_eff, bool first) {
  Vec acc[MR][kNV];
  for (int r = 0; r < MR; ++r)
    for (int v = 0; v < kNV; ++v) acc[r][v] = Vec{};
  for (int k = 0; k < kc; ++k) {
    Vec b[kNV];
    for (int v = 0; v < kNV; ++v) b[v] = *reinterpret_cast<const Vec*>(bp + k * NR + v * kW);
    for (int r = 0; r < MR; ++r) {
      const float s = kTransA ? a[k * lda + r] : a[r * lda + k];
      for (int v = 0; v < kNV; ++v) acc[r][v] += s * b[v];
    }
  }
  const int mr = std::min(MR, g.M - i0), nr = std::min(NR, g.N - j0);
  const float* bias = first && g.bias ? g.bias + j0 : nullptr;
  for (int r = 0; r < mr; ++r) {
    float* c = g.C + int64_t(i0 + r) * g.ldc + j0;
    if (nr == NR) {
      for (int v = 0; v < kNV; ++v) {
        VecU* cv = reinterpret_cast<VecU*>(c + v * kW);
        Vec x = g.alpha * acc[r][v];
        if (beta_eff != 0.0f) x = beta_eff * Vec(*cv) + x;
        if (bias) x += *reinterpret_cast<const VecU*>(bias + v * kW);
        *cv = x;
      }
    } else {
      float tmp[NR];
      std::memcpy(tmp, acc[r], sizeof(tmp));
      for (int j = 0; j < nr; ++j) {
        float x = g.alpha * tmp[j];
        if (beta_eff != 0.0f) x = beta_eff * c[j] + x;
        if (bias) x += bias[j];
        c[j] = x;
      }
    }
  }
}

// One MR-row strip of a task for one K slice, over the packed panels of columns [j0, j1).
void strip(const Args& g, int i0, int p0, int kc, int jb, int j0, int j1, const float* bpack,
           float beta_eff) {
  const bool first = p0 == 0;
  const int64_t K = g.K;
  auto panel = [&](int j) { return bpack + int64_t((j - jb) / NR) * K * NR + int64_t(p0) * NR; };
  if (i0 + MR <= g.M) {
    if (g.opa == Op::N) {
      const float* a = g.A + int64_t(i0) * g.lda + p0;
      for (int j = j0; j < j1; j += NR)
        micro_tile<false>(g, kc, a, g.lda, panel(j), i0, j, beta_eff, first);
    } else {
      const float* a = g.A + int64_t(p0) * g.lda + i0;
      for (int j = j0; j < j1; j += NR)
        micro_tile<true>(g, kc, a, g.lda, panel(j), i0, j, beta_eff, first);
    }
    return;
  }
  // Last rows (fewer than MR): copy them into a zero-padded kc x MR panel first.
  float ap[KC * MR];
  const int mr = g.M - i0;
  for (int k = 0; k < kc; ++k)
    for (int r = 0; r < MR; ++r)
      ap[k * MR + r] = r >= mr          ? 0.0f
                       : g.opa == Op::N ? g.A[int64_t(i0 + r) * g.lda + p0 + k]
                                        : g.A[int64_t(p0 + k) * g.lda + i0 + r];
  for (int j = j0; j < j1; j += NR)
    micro_tile<true>(g, kc, ap, MR, panel(j), i0, j, beta_eff, first);
}

// One task: rows [i0, i1) x columns [j0, j1) of the current column block, all K slices in
// order (so every C element sees the same sequence of operations whatever the threads).
void run_task(const Args& g, int jb, const float* bpack, int i0, int i1, int j0, int j1) {
  for (int p0 = 0; p0 < g.K; p0 += KC) {
    const int kc = std::min(KC, g.K - p0);
    const float beta_eff = p0 == 0 ? g.beta : 1.0f;
    for (int i = i0; i < i1; i += MR) strip(g, i, p0, kc, jb, j0, j1, bpack, beta_eff);
  }
}

// op(B) is packed in column blocks of at most ~2 MB (all of K), shared by the threads; each
// block costs two barriers (pack, compute). Tasks are MT x NT pieces of C.
void run_all(const Args& g, bool parallel) {
  const int64_t cap = std::max<int64_t>(NR, (int64_t(1) << 19) / std::max(g.K, 1) / NR * NR);
  const int NCB = int(std::min<int64_t>(cap, (g.N + NR - 1) / NR * NR));
  float* bpack = tl_b.get(size_t(NCB) * size_t(g.K));
  for (int jb = 0; jb < g.N; jb += NCB) {
    const int je = std::min(g.N, jb + NCB);
    const int panels = (je - jb + NR - 1) / NR;
    const int rtasks = (g.M + MT - 1) / MT, ctasks = (je - jb + NT - 1) / NT;
    auto pack = [&](int q) { pack_b_panel(g, jb + q * NR, bpack + int64_t(q) * g.K * NR); };
    auto task = [&](int t) {
      const int i0 = (t / ctasks) * MT, j0 = jb + (t % ctasks) * NT;
      run_task(g, jb, bpack, i0, std::min(g.M, i0 + MT), j0, std::min(je, j0 + NT));
    };
    if (parallel) {
#pragma omp parallel
      {
#pragma omp for schedule(static)
        for (int q = 0; q < panels; ++q) pack(q);
#pragma omp for schedule(dynamic, 1)
        for (int t = 0; t < rtasks * ctasks; ++t) task(t);
      }
    } else {
      for (int q = 0; q < panels; ++q) pack(q);
      for (int t = 0; t < rtasks * ctasks; ++t) task(t);
    }
  }
}

// K = 0 or alpha = 0: C = beta * C (+ bias).
void scale_c(const Args& g) {
  for (int i = 0; i < g.M; ++i) {
    float* c = g.C + int64_t(i) * g.ldc;
    for (int j = 0; j < g.N; ++j)
      c[j] = (g.beta == 0.0f ? 0.0f : g.beta * c[j]) + (g.bias ? g.bias[j] : 0.0f);
  }
}

}  // namespace

void gemm(Op opa, Op opb, int M, int N, int K, float alpha, const float* A, int lda, const float* B,
          int ldb, float beta, float* C, int ldc, const float* bias) {
  if (M <= 0 || N <= 0) return;
  if (gemm_uses_openblas()) {
    if (bias) {  // C = beta C + bias first, then the product with beta 1
#pragma omp parallel for schedule(static) if (!omp_in_parallel())
      for (int i = 0; i < M; ++i) {
        float* c = C + int64_t(i) * ldc;
        for (int j = 0; j < N; ++j) c[j] = (beta == 0.0f ? 0.0f : beta * c[j]) + bias[j];
      }
      beta = 1.0f;
    }
    cblas_sgemm(CblasRowMajor, opa == Op::N ? CblasNoTrans : CblasTrans,
                opb == Op::N ? CblasNoTrans : CblasTrans, M, N, K, alpha, A, lda, B, ldb, beta, C,
                ldc);
    return;
  }
  const Args g{opa, opb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, bias};
  if (K <= 0 || alpha == 0.0f) {
    scale_c(g);
    return;
  }
  // Small products and calls from inside a parallel region run on this thread.
  const double flops = 2.0 * M * N * K;
  run_all(g, !(omp_in_parallel() || omp_get_max_threads() == 1 || flops < 4e6));
}

}  // namespace strata::kernels::STRATA_ISA
