// Single-precision GEMM, row-major, written for strata (GotoBLAS/BLIS structure):
//   C (M,N) = alpha * op(A) (M,K) @ op(B) (K,N) + beta * C
// op(X) is X (Op::N) or its transpose (Op::T); A is (M,K) or (K,M) with row stride lda,
// B is (K,N) or (N,K) with row stride ldb, C has row stride ldc. beta = 0 never reads C.
//
// Terms: op(B) is packed, all of K at once, in column blocks of at most ~2 MB, into
// NR-wide panels shared by the threads. C is cut into tasks of MT x NT (96 x 128 with
// AVX-512); a task walks K in KC-deep slices (128) and runs a register-blocked MR x NR
// micro-kernel (6 x 64 with AVX-512, 6 x 16 with AVX2; GCC vector extensions, no per-ISA
// intrinsics) that reads op(A) in place: each k step needs only MR scalars of it, so A is
// never packed. Two barriers per column block.
// Cost: 2*M*N*K flops; packing copies op(B) once.
//
// Determinism: each element of C is produced by one task with a fixed arithmetic order
// (K slices in order, k in order inside a slice), whatever the number of threads, so
// results are bit-identical for any thread count. Called from inside an OpenMP parallel
// region it runs on the calling thread only.
#pragma once
#include <cstdint>

namespace strata::kernels {

enum class Op : uint8_t { N, T };

// bias (N) or nullptr: added to every row of C, i.e. C = alpha op(A) op(B) + beta C + bias
// (fuses a layer's bias into the GEMM's output pass).
void gemm(Op opa, Op opb, int M, int N, int K, float alpha, const float* A, int lda, const float* B,
          int ldb, float beta, float* C, int ldc, const float* bias = nullptr);

// STRATA_GEMM=openblas: gemm calls cblas_sgemm.
bool gemm_uses_openblas();

}  // namespace strata::kernels
