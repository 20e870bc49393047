// Mixed-precision GEMM: bf16 inputs, fp32 accumulation and fp32 output, row-major.
//   C (M,N) = alpha * op(A) (M,K) @ op(B) (K,N) + beta * C (+ bias, per column)
// A and B may each be fp32 or bf16 memory (Mat); on the bf16 paths fp32 operands are
// rounded to bf16 (nearest even) while they are packed, so the result is the product of the
// bf16-rounded inputs summed in fp32: |C - C_exact| <= |alpha| * sum_k |a_ik| |b_kj| * (2^-7 + 2^-16 + K 2^-24)
// (bf16 keeps 8 significant bits, so each rounded input is within 2^-8 relative; plus the
// fp32 rounding of the running sum).
//
// Terms: the *path* is which code computes it, chosen once at run time from cpuid (never
// at compile time only), the path's self-check (selfcheck.h) and STRATA_KERNELS:
//   amx         Intel AMX tiles (tdpbf16ps, 16x32 bf16 tiles into 16x16 fp32), after asking
//               Linux for the tile-data permission (arch_prctl ARCH_REQ_XCOMP_PERM)
//   avx512bf16  AVX-512 BF16 (vdpbf16ps: 16 fp32 lanes += pairs of bf16 products)
//   onednn      libdnnl's matmul primitive (bf16 x bf16 -> fp32; fp32 operands rounded into
//               a reused scratch buffer), one primitive created per shape and cached
//   fp32        no bf16 unit, emulated: kernels::gemm (fp32) on the operands as a bf16
//               unit reads them (fp32 ones rounded to bf16, bf16 ones widened exactly), so
//               every layout rounds alike, as on the other paths
// Each bf16 path is compiled in its own translation unit with its own target flags, so a
// binary built for any x86-64 runs everywhere and picks the best path the CPU has.
//
// Determinism: like kernels::gemm, every element of C is produced by one task in a fixed
// order: bit-identical run to run and for any thread count (per path; different paths
// round differently). The onednn path is bit-identical run to run at a fixed thread count
// only (libdnnl sizes its work split by the thread count), so auto never picks it. Called
// from inside an OpenMP parallel region it runs on the calling thread only.
#pragma once
#include <cstdint>

#include "core/dtype.h"
#include "kernels/cpu.h"
#include "kernels/gemm.h"

namespace strata::kernels {

// A matrix operand in fp32 or bf16 (raw uint16_t bits) memory, row stride ld elements.
struct Mat {
  const void* p;
  int ld;
  DType t;
  Mat(const float* x, int ld_) : p(x), ld(ld_), t(DType::f32) {}
  Mat(const uint16_t* x, int ld_) : p(x), ld(ld_), t(DType::bf16) {}
};

enum class GemmPath : uint8_t { fp32, avx512bf16, amx, onednn };

// bias (N) or nullptr. A: op(A) is (M,K); B: op(B) is (K,N).
void gemm_bf16(Op opa, Op opb, int M, int N, int K, float alpha, Mat A, Mat B, float beta, float* C,
               int ldc, const float* bias = nullptr);

// The path gemm_bf16 takes in this process for large products: STRATA_KERNELS=auto (default)
// takes strata's best kernel that the CPU has and that passed its self-check (amx, else
// avx512bf16, else fp32; a failed one is passed over with a note, path_notes()); onednn|fp32|
// avx512bf16|amx forces one and is refused with one line when the CPU (or the kernel's
// permission) lacks it or it fails its self-check.
GemmPath bf16_gemm_path();
// strata's own kernel under the same setting (amx, avx512bf16 or fp32; onednn when forced).
GemmPath bf16_kernel_path();
// Products of at least this many flops (2MNK) go to the large-product path when it differs.
constexpr double kOnednnMinFlops = 1e8;
// The path one call of gemm_bf16 takes.
GemmPath bf16_path_for(int M, int N, int K);
const char* gemm_path_name(GemmPath p);  // "amx", "avx512bf16", "fp32", "onednn"
// Whether a path can run here (amx: also asks Linux for the tile permission, once); the
// CPU's claim, before the path's self-check.
bool gemm_path_available(GemmPath p);

// What the model's matmuls run, for logs and summaries: "strata fp32" or "openblas fp32"
// (fp32 compute), "avx512bf16", "amx", "onednn", "onednn+avx512bf16" (auto: oneDNN for the
// large products, strata's kernel for the small ones) or "fp32 (emulated bf16)" (bf16 compute).
const char* matmul_gemm_name(bool bf16);

// Runs one path explicitly (tests and benchmarks); the path must be available.
void gemm_bf16_on(GemmPath path, Op opa, Op opb, int M, int N, int K, float alpha, Mat A, Mat B,
                  float beta, float* C, int ldc, const float* bias = nullptr);

}  // namespace strata::kernels
