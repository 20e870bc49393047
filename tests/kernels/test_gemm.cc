// strata's own GEMM against a double-precision reference: every transpose combination,
// ragged shapes around the micro-tile and block sizes, alpha/beta, strided operands, and
// bit-identical results for any thread count.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstring>

#include "check.h"
#include "kernels/gemm.h"

namespace strata::test {
namespace k = strata::kernels;

struct GemmCase {
  k::Op opa, opb;
  int M, N, K;
  float alpha, beta;
};

static std::vector<float> run_gemm(const GemmCase& c, const std::vector<float>& A, int lda,
                                   const std::vector<float>& B, int ldb, std::vector<float> C,
                                   int ldc) {
  k::gemm(c.opa, c.opb, c.M, c.N, c.K, c.alpha, A.data(), lda, B.data(), ldb, c.beta, C.data(),
          ldc);
  return C;
}

class Gemm : public ::testing::TestWithParam<GemmCase> {};

TEST_P(Gemm, MatchesDoubleReference) {
  const GemmCase c = GetParam();
  const int ar = c.opa == k::Op::N ? c.M : c.K, ac = c.opa == k::Op::N ? c.K : c.M;
  const int br = c.opb == k::Op::N ? c.K : c.N, bc = c.opb == k::Op::N ? c.N : c.K;
  const int lda = ac + 3, ldb = bc + 1, ldc = c.N + 5;  // strided operands
  auto A = randn(int64_t(ar) * lda, 90), B = randn(int64_t(br) * ldb, 91);
  auto C0 = randn(int64_t(c.M) * ldc, 92);
  if (c.beta == 0.0f)
    for (auto& x : C0) x = NAN;  // beta = 0 must not read C
  auto C = run_gemm(c, A, lda, B, ldb, C0, ldc);
  std::vector<double> ref(size_t(c.M) * c.N);
  std::vector<float> got(ref.size());
  for (int i = 0; i < c.M; ++i)
    for (int j = 0; j < c.N; ++j) {
      double s = 0;
      for (int p = 0; p < c.K; ++p) {
        const double a = c.opa == k::Op::N ? A[size_t(i) * lda + p] : A[size_t(p) * lda + i];
        const double b = c.opb == k::Op::N ? B[size_t(p) * ldb + j] : B[size_t(j) * ldb + p];
        s += a * b;
      }
      ref[size_t(i) * c.N + j] =
          c.alpha * s + (c.beta == 0.0f ? 0.0 : c.beta * double(C0[size_t(i) * ldc + j]));
      got[size_t(i) * c.N + j] = C[size_t(i) * ldc + j];
    }
  EXPECT_LT(rel_err(got, ref), 1e-5 * std::sqrt(double(std::max(c.K, 1))));
  // Padding columns of C (beyond N) are untouched.
  for (int i = 0; i < c.M; ++i)
    for (int j = c.N; j < ldc; ++j) {
      const float before = C0[size_t(i) * ldc + j], after = C[size_t(i) * ldc + j];
      ASSERT_TRUE(before == after || (std::isnan(before) && std::isnan(after)));
    }
}

INSTANTIATE_TEST_SUITE_P(Shapes, Gemm,
                         ::testing::Values(GemmCase{k::Op::N, k::Op::N, 1, 1, 1, 1.0f, 0.0f},
                                           GemmCase{k::Op::N, k::Op::T, 7, 65, 129, 1.0f, 0.0f},
                                           GemmCase{k::Op::T, k::Op::N, 13, 70, 300, 0.5f, 1.0f},
                                           GemmCase{k::Op::T, k::Op::T, 50, 129, 33, -2.0f, 0.25f},
                                           GemmCase{k::Op::N, k::Op::N, 97, 200, 257, 1.0f, 1.0f},
                                           GemmCase{k::Op::N, k::Op::T, 64, 64, 64, 0.125f, 0.0f},
                                           GemmCase{k::Op::N, k::Op::N, 5, 2100, 9, 1.0f,
                                                    0.0f},  // > one B block
                                           GemmCase{k::Op::T, k::Op::T, 40, 2100, 140, 1.0f,
                                                    1.0f}),  // threaded, 2 blocks
                         [](const auto& info) {
                           const GemmCase& c = info.param;
                           return std::string(c.opa == k::Op::N ? "N" : "T") +
                                  (c.opb == k::Op::N ? "N" : "T") + "_" + std::to_string(c.M) +
                                  "x" + std::to_string(c.N) + "x" + std::to_string(c.K);
                         });

TEST(GemmEdge, EmptyAndZeroK) {
  std::vector<float> A(4, 1.0f), B(4, 1.0f), C = {1.0f, 2.0f, 3.0f, 4.0f};
  k::gemm(k::Op::N, k::Op::N, 0, 2, 2, 1.0f, A.data(), 2, B.data(), 2, 0.0f, C.data(), 2);
  EXPECT_EQ(C[0], 1.0f);
  k::gemm(k::Op::N, k::Op::N, 2, 2, 0, 1.0f, A.data(), 2, B.data(), 2, 0.5f, C.data(), 2);
  EXPECT_EQ(C[3], 2.0f);  // K = 0: C = beta * C
}

TEST(GemmEdge, BiasIsAddedOncePerElement) {
  // K spans several slices and the shape needs the threaded path: the bias must still be
  // added exactly once, with beta = 0 and beta = 1, and for K = 0.
  const int M = 70, N = 130, K = 300;
  auto A = randn(int64_t(M) * K, 95), B = randn(int64_t(K) * N, 96), bias = randn(N, 97);
  for (float beta : {0.0f, 1.0f}) {
    std::vector<float> C0(size_t(M) * N, 2.0f), C = C0, Cnb = C0;
    k::gemm(k::Op::N, k::Op::N, M, N, K, 1.0f, A.data(), K, B.data(), N, beta, C.data(), N,
            bias.data());
    k::gemm(k::Op::N, k::Op::N, M, N, K, 1.0f, A.data(), K, B.data(), N, beta, Cnb.data(), N);
    std::vector<double> want(C.size());
    for (int i = 0; i < M; ++i)
      for (int j = 0; j < N; ++j)
        want[size_t(i) * N + j] = double(Cnb[size_t(i) * N + j]) + bias[j];
    EXPECT_LT(rel_err(C, want), 1e-6) << "beta " << beta;
  }
  std::vector<float> C(size_t(M) * N, 2.0f);
  k::gemm(k::Op::N, k::Op::N, M, N, 0, 1.0f, A.data(), K, B.data(), N, 0.5f, C.data(), N,
          bias.data());
  EXPECT_FLOAT_EQ(C[5], 1.0f + bias[5]);
}

TEST(GemmDeterminism, SameBitsForAnyThreadCount) {
  const int M = 300, N = 200, K = 520;
  auto A = randn(int64_t(K) * M, 93), B = randn(int64_t(K) * N, 94);
  const auto out = for_thread_counts([&] {
    std::vector<float> C(size_t(M) * N, 1.0f);
    k::gemm(k::Op::T, k::Op::N, M, N, K, 1.0f, A.data(), M, B.data(), N, 1.0f, C.data(), N);
    return C;
  });
  EXPECT_EQ(0, std::memcmp(out[0].data(), out[1].data(), out[0].size() * 4));
  EXPECT_EQ(0, std::memcmp(out[0].data(), out[2].data(), out[0].size() * 4));
  // And from inside a parallel region (runs on the calling thread) too.
  std::vector<float> C(size_t(M) * N, 1.0f);
#pragma omp parallel num_threads(2)
  {
#pragma omp single
    k::gemm(k::Op::T, k::Op::N, M, N, K, 1.0f, A.data(), M, B.data(), N, 1.0f, C.data(), N);
  }
  EXPECT_EQ(0, std::memcmp(out[0].data(), C.data(), C.size() * 4));
}

}  // namespace strata::test
