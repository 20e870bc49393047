// The known-answer check of one level's kernels (selfcheck.h), compiled with the level's
// flags like the kernels themselves: a GEMM of odd sizes in two transposes against an exact
// answer (small integers: every product and sum is exact in fp32 at any order, with or
// without fused multiply-add) and the GELU against a double-precision reference.
#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/gelu.h"
#include "kernels/gemm.h"
#include "kernels/isa_target.h"  // last: what follows is compiled for the level

// The calls below name the level: unqualified, argument-dependent lookup would also find the
// dispatching strata::kernels::gemm of the same signature.
namespace strata::kernels::STRATA_ISA {

void gemm(Op opa, Op opb, int M, int N, int K, float alpha, const float* A, int lda, const float* B,
          int ldb, float beta, float* C, int ldc, const float* bias);
void gelu_forward(float* out, const float* inp, int64_t n);

bool self_check() {
  constexpr int M = 13, N = 70, K = 37;
  std::vector<float> a(M * K), b(K * N), c(M * N), ct(M * N);
  std::vector<float> at(K * M), bt(N * K);
  for (int i = 0; i < M; ++i)
    for (int k = 0; k < K; ++k) a[i * K + k] = at[k * M + i] = float((i * 7 + k * 3) % 9 - 4);
  for (int k = 0; k < K; ++k)
    for (int j = 0; j < N; ++j) b[k * N + j] = bt[j * K + k] = float((k * 5 + j * 11) % 7 - 3);
  STRATA_ISA::gemm(Op::N, Op::N, M, N, K, 1.0f, a.data(), K, b.data(), N, 0.0f, c.data(), N, nullptr);
  STRATA_ISA::gemm(Op::T, Op::T, M, N, K, 1.0f, at.data(), M, bt.data(), K, 0.0f, ct.data(), N, nullptr);
  for (int i = 0; i < M; ++i)
    for (int j = 0; j < N; ++j) {
      int64_t want = 0;
      for (int k = 0; k < K; ++k) want += int64_t(a[i * K + k]) * int64_t(b[k * N + j]);
      if (c[i * N + j] != float(want) || ct[i * N + j] != float(want)) return false;
    }
  constexpr int n = 67;
  std::vector<float> x(n), y(n);
  for (int i = 0; i < n; ++i) x[i] = -6.0f + 12.0f * float(i) / float(n - 1);
  STRATA_ISA::gelu_forward(y.data(), x.data(), n);
  for (int i = 0; i < n; ++i) {
    const double u = x[i], g = 0.5 * u * (1.0 + std::tanh(0.7978845608028654 * (u + 0.044715 * u * u * u)));
    if (!(std::fabs(y[i] - g) <= 1e-5 + 1e-5 * std::fabs(g))) return false;
  }
  return true;
}

}  // namespace strata::kernels::STRATA_ISA
