// gemm_bf16: run-time choice of the path (cpuid + STRATA_KERNELS) and the emulated path.
// This unit is compiled for the build's baseline; the bf16 paths live in gemm_avx512bf16.cc
// and gemm_amx.cc, compiled with their own target flags and entered only after cpuid, and in
// gemm_onednn.cc (libdnnl's matmul, which picks its own kernels from cpuid).
#include "kernels/gemm_bf16.h"

#include <omp.h>

#include <string>
#include <vector>

#include "core/env.h"
#include "core/error.h"
#include "kernels/gemm_bf16_impl.h"

#if defined(__x86_64__)
#include <cpuid.h>
#endif

namespace strata::kernels {

static const EnvVar kKernels("STRATA_KERNELS", "auto",
                             "bf16 GEMM path under --precision bf16: auto (oneDNN for large products where "
                             "it measured faster, else the best the CPU has), onednn, amx, avx512bf16, "
                             "or fp32 (emulated: the fp32 GEMM on the stored values)");

namespace {

#if defined(__x86_64__)
uint64_t xcr0() {
  uint32_t lo, hi;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (uint64_t(hi) << 32) | lo;
}

bool osxsave() {
  unsigned a, b, c, d;
  return __get_cpuid_count(1, 0, &a, &b, &c, &d) && (c & (1u << 27));
}
#endif

}  // namespace

bool cpu_has_avx512bf16() {
#if defined(__x86_64__)
  unsigned a, b, c, d;
  // XCR0: SSE, AVX, opmask, ZMM_Hi256, Hi16_ZMM state enabled by the OS.
  if (!osxsave() || (xcr0() & 0xe6) != 0xe6) return false;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
  const bool f = b & (1u << 16), dq = b & (1u << 17), bw = b & (1u << 30), vl = b & (1u << 31);
  if (!(f && dq && bw && vl) || a < 1) return false;
  if (!__get_cpuid_count(7, 1, &a, &b, &c, &d)) return false;
  return a & (1u << 5);  // AVX512_BF16
#else
  return false;
#endif
}

bool cpu_has_amx_bf16() {
#if defined(__x86_64__)
  unsigned a, b, c, d;
  if (!cpu_has_avx512bf16()) return false;  // the packing code uses AVX-512 BF16
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
  const bool amx_bf16 = d & (1u << 22), amx_tile = d & (1u << 24);
  // XCR0 bits 17 (XTILECFG) and 18 (XTILEDATA): the OS manages tile state.
  return amx_bf16 && amx_tile && (xcr0() & (3ull << 17)) == (3ull << 17);
#else
  return false;
#endif
}

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

struct Choice {
  GemmPath large, small;  // products of >= kOnednnMinFlops; the rest
};

const Choice& choice() {
  static const Choice c = [] {
    const std::string s = kKernels.get();
    if (s == "auto") {
      if (gemm_path_available(GemmPath::amx)) return Choice{GemmPath::amx, GemmPath::amx};
      // oneDNN measured faster than strata's AVX-512 BF16 kernel on every training shape.
      if (gemm_path_available(GemmPath::avx512bf16))
        return Choice{GemmPath::onednn, GemmPath::avx512bf16};
      return Choice{GemmPath::fp32, GemmPath::fp32};
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
                 p == GemmPath::amx ? "AMX-BF16 tiles" : "AVX-512 BF16", "; use auto or fp32");
    return Choice{p, p};
  }();
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

// The stored matrix behind a bf16 operand (rows x cols elements), widened exactly into dst
// (dense, row stride cols).
void widen_copy(std::vector<float>& dst, const Mat& X, int rows, int cols, bool par) {
  dst.resize(size_t(rows) * cols);
  float* d = dst.data();
  const uint16_t* x = static_cast<const uint16_t*>(X.p);
#pragma omp parallel for schedule(static) if (par)
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c) d[int64_t(r) * cols + c] = bf16_to_f32(x[int64_t(r) * X.ld + c]);
}

thread_local std::vector<float> tl_a, tl_b;

// Emulated bf16 (no bf16 unit): the fp32 GEMM on the operands as stored, bf16 ones widened
// exactly. fp32 operands are not rounded first: that would only cost time, and the result
// stays within the bf16 bound (it is at least as accurate).
void gemm_emulated(const detail::Bf16Args& g, bool par) {
  const int ar = g.opa == Op::N ? g.M : g.K, ac = g.opa == Op::N ? g.K : g.M;
  const int br = g.opb == Op::N ? g.K : g.N, bc = g.opb == Op::N ? g.N : g.K;
  const float* a = static_cast<const float*>(g.A.p);
  const float* b = static_cast<const float*>(g.B.p);
  int lda = g.A.ld, ldb = g.B.ld;
  if (g.A.t == DType::bf16) {
    widen_copy(tl_a, g.A, ar, ac, par);
    a = tl_a.data();
    lda = ac;
  }
  if (g.B.t == DType::bf16) {
    widen_copy(tl_b, g.B, br, bc, par);
    b = tl_b.data();
    ldb = bc;
  }
  gemm(g.opa, g.opb, g.M, g.N, g.K, g.alpha, a, lda, b, ldb, g.beta, g.C, g.ldc, g.bias);
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
  static const bool has_avx512bf16 = gemm_path_available(GemmPath::avx512bf16);
  static const bool has_amx = gemm_path_available(GemmPath::amx);
  STRATA_CHECK(path == GemmPath::fp32 || (path == GemmPath::amx ? has_amx : has_avx512bf16),
               "gemm_bf16: the ", gemm_path_name(path), " path is not available on this CPU");
  switch (path) {
    case GemmPath::amx: detail::gemm_amx(g, par); return;
    case GemmPath::avx512bf16: detail::gemm_avx512bf16(g, par); return;
    case GemmPath::fp32: gemm_emulated(g, par); return;
    case GemmPath::onednn: detail::gemm_onednn(g, par); return;
  }
}

void gemm_bf16(Op opa, Op opb, int M, int N, int K, float alpha, Mat A, Mat B, float beta, float* C,
               int ldc, const float* bias) {
  gemm_bf16_on(bf16_path_for(M, N, K), opa, opb, M, N, K, alpha, A, B, beta, C, ldc, bias);
}

}  // namespace strata::kernels
