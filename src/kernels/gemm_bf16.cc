// gemm_bf16: run-time choice of the path (cpuid, the path's self-check, STRATA_KERNELS) and
// the emulated path.
// This unit is compiled for the build's baseline; the bf16 paths live in gemm_avx512bf16.cc
// and gemm_amx.cc, compiled with their own target flags and entered only after cpuid, and in
// gemm_onednn.cc (libdnnl's matmul, which picks its own kernels from cpuid).
#include "kernels/gemm_bf16.h"

#include <omp.h>

#include <string>
#include <vector>

#include "core/env.h"
#include "core/error.h"
#include "kernels/cpu.h"
#include "kernels/gemm_bf16_impl.h"
#include "kernels/selfcheck.h"


namespace strata::kernels {

static const EnvVar kKernels("STRATA_KERNELS", "auto",
                             "bf16 GEMM path under --precision bf16: auto (the best of amx, "
                             "avx512bf16 the CPU has whose self-check passes, else fp32), onednn, "
                             "amx, avx512bf16, or fp32 (emulated: the fp32 GEMM on the stored values)");

const char* gemm_path_name(GemmPath p) {
  switch (p) {
    case GemmPath::amx: return "amx";
    case GemmPath::avx512bf16: return "avx512bf16";
    case GemmPath::fp32: return "fp32";
    case GemmPath::onednn: return "onednn";
  }
  return "?";
}

bool gemm_path_available(GemmPath p) {
  switch (p) {
    case GemmPath::fp32: return true;
    case GemmPath::avx512bf16: return cpu_has_avx512bf16();
    case GemmPath::amx: return cpu_has_amx_bf16() && detail::amx_permission();
    case GemmPath::onednn: return cpu_has_avx512bf16();  // measured (and tested) there only
  }
  return false;
}

namespace {

void run_path(GemmPath path, const detail::Bf16Args& g, bool par);

// The known-answer check of a bf16 path (selfcheck.h), run in the forked child on its one
// thread: products of small integers (exact in bf16, and every partial sum exact in fp32,
// so any order gives the same bits) in the three operand layouts the packing code has, at
// sizes that leave partial tiles and panels, against the exact answer.
bool bf16_known_answer(GemmPath path) {
  constexpr int M = 40, N = 70, K = 50;
  std::vector<uint16_t> a(M * K), at(K * M), b(K * N), bt(N * K);
  std::vector<float> want(M * N, 0.0f), c(M * N);
  auto ia = [](int i, int k) { return float((i * 7 + k * 3) % 9 - 4); };
  auto ib = [](int k, int j) { return float((k * 5 + j * 11) % 7 - 3); };
  for (int i = 0; i < M; ++i)
    for (int k = 0; k < K; ++k) a[i * K + k] = at[k * M + i] = f32_to_bf16(ia(i, k));
  for (int k = 0; k < K; ++k)
    for (int j = 0; j < N; ++j) b[k * N + j] = bt[j * K + k] = f32_to_bf16(ib(k, j));
  for (int i = 0; i < M; ++i)
    for (int j = 0; j < N; ++j)
      for (int k = 0; k < K; ++k) want[i * N + j] += ia(i, k) * ib(k, j);
  const struct {
    Op opa, opb;
    const uint16_t *A, *B;
    int lda, ldb;
  } cases[] = {{Op::N, Op::N, a.data(), b.data(), K, N},
               {Op::T, Op::N, at.data(), b.data(), M, N},
               {Op::N, Op::T, a.data(), bt.data(), K, K}};
  for (const auto& t : cases) {
    std::fill(c.begin(), c.end(), -1.0f);
    run_path(path,
             {t.opa, t.opb, M, N, K, 1.0f, Mat(t.A, t.lda), Mat(t.B, t.ldb), 0.0f, c.data(), N,
              nullptr},
             false);
    if (c != want) return false;
  }
  return true;
}

struct Choice {
  GemmPath large, small;  // products of >= kOnednnMinFlops; the rest
};

// The check of a path, run once per process in a child (selfcheck.h).
const PathCheck& proven(GemmPath p) {
  return prove_path(gemm_path_name(p), [p] { return bf16_known_answer(p); });
}

// auto takes strata's own kernels only: each element of C has one producer and a fixed
// order, so the bits are the same for any thread count. oneDNN sizes its work split (and
// with it the reduction order) by the thread count; it runs only when forced.
Choice choose() {
  const std::string s = kKernels.get();
  if (s == "auto") {
    GemmPath best = GemmPath::fp32;
    std::vector<GemmPath> failed;
    for (GemmPath p : {GemmPath::amx, GemmPath::avx512bf16}) {
      if (!gemm_path_available(p)) continue;
      if (proven(p).ok) {
        best = p;
        break;
      }
      failed.push_back(p);
    }
    for (GemmPath p : failed)
      add_path_note(std::string(gemm_path_name(p)) + " failed its self-check (" + proven(p).why +
                    "); using " + gemm_path_name(best));
    return Choice{best, best};
  }
  GemmPath p = GemmPath::fp32;
  if (s == "amx")
    p = GemmPath::amx;
  else if (s == "avx512bf16")
    p = GemmPath::avx512bf16;
  else if (s == "onednn")
    p = GemmPath::onednn;
  else
    STRATA_CHECK(s == "fp32", "STRATA_KERNELS must be auto, onednn, amx, avx512bf16 or fp32 (got '",
                 s, "')");
  STRATA_CHECK(gemm_path_available(p), "STRATA_KERNELS=", s, ": this CPU (or its kernel) offers no ",
               p == GemmPath::amx ? "AMX-BF16 tiles" : "AVX-512 BF16", " (it has: ",
               cpu_info().flags_line(), "); use auto or fp32");
  if (p != GemmPath::fp32) {
    const PathCheck& c = proven(p);
    STRATA_CHECK(c.ok, "STRATA_KERNELS=", s, ": ", s, " failed its self-check on this CPU (", c.why,
                 "); use auto or fp32");
  }
  return Choice{p, p};
}

const Choice& choice() {
  static const Choice c = choose();
  return c;
}

}  // namespace

GemmPath bf16_gemm_path() { return choice().large; }
GemmPath bf16_kernel_path() { return choice().small; }

GemmPath bf16_path_for(int M, int N, int K) {
  const Choice& c = choice();
  if (c.large == c.small || omp_in_parallel()) return c.small;
  return 2.0 * M * N * K >= kOnednnMinFlops ? c.large : c.small;
}

const char* matmul_gemm_name(bool bf16) {
  if (!bf16) return gemm_uses_openblas() ? "openblas fp32" : "strata fp32";
  const Choice& c = choice();
  if (c.large == GemmPath::onednn && c.small != GemmPath::onednn) return "onednn+avx512bf16";
  return c.large == GemmPath::fp32 ? "fp32 (emulated bf16)" : gemm_path_name(c.large);
}

namespace detail {

void scale_c_only(const Bf16Args& g) {
  for (int i = 0; i < g.M; ++i) {
    float* c = g.C + int64_t(i) * g.ldc;
    for (int j = 0; j < g.N; ++j)
      c[j] = (g.beta == 0.0f ? 0.0f : g.beta * c[j]) + (g.bias ? g.bias[j] : 0.0f);
  }
}

}  // namespace detail

namespace {

// The operand as a bf16 unit reads it (rows x cols elements), in fp32 into dst (dense, row
// stride cols): bf16 memory widened exactly, fp32 memory rounded to bf16 (nearest even) first.
void bf16_copy(std::vector<float>& dst, const Mat& X, int rows, int cols, bool par) {
  dst.resize(size_t(rows) * cols);
  float* d = dst.data();
  const bool half = X.t == DType::bf16;
  const uint16_t* h = static_cast<const uint16_t*>(X.p);
  const float* f = static_cast<const float*>(X.p);
#pragma omp parallel for schedule(static) if (par)
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c) {
      const int64_t i = int64_t(r) * X.ld + c;
      d[int64_t(r) * cols + c] = bf16_to_f32(half ? h[i] : f32_to_bf16(f[i]));
    }
}

thread_local std::vector<float> tl_a, tl_b;

// Emulated bf16 (no bf16 unit): the fp32 GEMM on the operands as a bf16 unit reads them,
// fp32 ones rounded to bf16 like every other path rounds them (one pass over each operand,
// against 2MNK flops). Without the rounding, a layout that keeps an operand in fp32 where
// another keeps it in bf16 (context parallelism's chunks, ZeRO-3's gathered weights) got
// other products, and the bf16 layouts drifted apart from one process on CPUs without a
// bf16 unit (2e-2 in 8 Llama steps at cp 2) while they agreed on every CPU with one.
void gemm_emulated(const detail::Bf16Args& g, bool par) {
  const int ar = g.opa == Op::N ? g.M : g.K, ac = g.opa == Op::N ? g.K : g.M;
  const int br = g.opb == Op::N ? g.K : g.N, bc = g.opb == Op::N ? g.N : g.K;
  bf16_copy(tl_a, g.A, ar, ac, par);
  bf16_copy(tl_b, g.B, br, bc, par);
  gemm(g.opa, g.opb, g.M, g.N, g.K, g.alpha, tl_a.data(), ac, tl_b.data(), bc, g.beta, g.C, g.ldc,
       g.bias);
}

void run_path(GemmPath path, const detail::Bf16Args& g, bool par) {
  switch (path) {
    case GemmPath::amx: detail::gemm_amx(g, par); return;
    case GemmPath::avx512bf16: detail::gemm_avx512bf16(g, par); return;
    case GemmPath::fp32: gemm_emulated(g, par); return;
    case GemmPath::onednn: detail::gemm_onednn(g, par); return;
  }
}

}  // namespace

void gemm_bf16_on(GemmPath path, Op opa, Op opb, int M, int N, int K, float alpha, Mat A, Mat B,
                  float beta, float* C, int ldc, const float* bias) {
  if (M <= 0 || N <= 0) return;
  const detail::Bf16Args g{opa, opb, M, N, K, alpha, A, B, beta, C, ldc, bias};
  if (K <= 0 || alpha == 0.0f) {
    detail::scale_c_only(g);
    return;
  }
  // Small products and calls from inside a parallel region run on this thread.
  const double flops = 2.0 * M * N * K;
  const bool par = !(omp_in_parallel() || omp_get_max_threads() == 1 || flops < 4e6);
  STRATA_CHECK(gemm_path_available(path), "gemm_bf16: the ", gemm_path_name(path),
               " path is not available on this CPU");
  run_path(path, g, par);
}

void gemm_bf16(Op opa, Op opb, int M, int N, int K, float alpha, Mat A, Mat B, float beta, float* C,
               int ldc, const float* bias) {
  gemm_bf16_on(bf16_path_for(M, N, K), opa, opb, M, N, K, alpha, A, B, beta, C, ldc, bias);
}

}  // namespace strata::kernels
