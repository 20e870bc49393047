// Reductions whose order is fixed by the data, not by the threads: same bits for 1 and N threads.
#include <gtest/gtest.h>
#include <omp.h>

#include <cstring>

#include "check.h"
#include "kernels/kernels.h"

namespace strata::test {
namespace k = strata::kernels;

template <typename F>
static void same_bits_1_vs_3_threads(F run) {
  const int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  auto a = run();
  omp_set_num_threads(3);
  auto b = run();
  omp_set_num_threads(saved);
  ASSERT_EQ(a.size(), b.size());
  EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(a[0])));
}

TEST(Determinism, LayerNormBackward) {
  const int N = 300, C = 96;
  auto x = randn(N * C, 80), w = randn(C, 81), b = randn(C, 82), d = randn(N * C, 83);
  std::vector<float> out(N * C), mean(N), rstd(N);
  k::layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C);
  same_bits_1_vs_3_threads([&] {
    std::vector<float> g(N * C + 2 * C, 0.0f);
    k::layernorm_backward(g.data(), g.data() + N * C, g.data() + N * C + C, d.data(), x.data(),
                          w.data(), mean.data(), rstd.data(), N, C);
    return g;
  });
}

TEST(Determinism, EncoderAndBiasBackward) {
  const int B = 3, T = 50, C = 100, V = 5;
  auto d = randn(B * T * C, 84);
  std::vector<int32_t> tok(B * T);
  for (int i = 0; i < B * T; ++i) tok[i] = (i * 7) % V;
  same_bits_1_vs_3_threads([&] {
    std::vector<float> g(V * C + T * C + C, 0.0f);
    k::encoder_backward(g.data(), g.data() + V * C, d.data(), tok.data(), B, T, C);
    k::bias_backward(g.data() + V * C + T * C, d.data(), B * T, C);
    return g;
  });
}

}  // namespace strata::test
