// Flash-style causal attention against a naive double-precision softmax attention.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstring>

#include "check.h"
#include "kernels/kernels.h"

namespace strata::test {
namespace k = strata::kernels;

// out (B,T,C) from qkv (B,T,3C), materialising the full T x T softmax; with doc_start (B,T),
// query t sees keys [doc_start[t], t] only.
static std::vector<double> attention_ref(const std::vector<double>& qkv, int B, int T, int C,
                                         int NH, const int32_t* doc_start = nullptr) {
  const int hs = C / NH;
  const double scale = 1 / std::sqrt(double(hs));
  std::vector<double> out(B * T * C), p(T);
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < NH; ++h)
      for (int t = 0; t < T; ++t) {
        const double* q = &qkv[(b * T + t) * 3 * C + h * hs];
        double m = -INFINITY, sum = 0;
        const int s0 = doc_start ? doc_start[b * T + t] : 0;
        for (int s = s0; s <= t; ++s) {
          const double* kk = &qkv[(b * T + s) * 3 * C + C + h * hs];
          double d = 0;
          for (int i = 0; i < hs; ++i) d += q[i] * kk[i];
          p[s] = d * scale;
          m = std::max(m, p[s]);
        }
        for (int s = s0; s <= t; ++s) sum += (p[s] = std::exp(p[s] - m));
        for (int i = 0; i < hs; ++i) {
          double o = 0;
          for (int s = s0; s <= t; ++s)
            o += p[s] / sum * qkv[(b * T + s) * 3 * C + 2 * C + h * hs + i];
          out[(b * T + t) * C + h * hs + i] = o;
        }
      }
  return out;
}

struct AttnCase {
  int B, T, C, NH;
};

class Attention : public ::testing::TestWithParam<AttnCase> {};

TEST_P(Attention, ForwardAndGradients) {
  const auto [B, T, C, NH] = GetParam();
  auto qkv = randn(B * T * 3 * C, 40), dout = randn(B * T * C, 41);
  const auto qd = to_double(qkv), dd = to_double(dout);
  std::vector<float> out(B * T * C), lse(B * NH * T);
  k::attention_forward(out.data(), lse.data(), qkv.data(), B, T, C, NH);
  EXPECT_LT(rel_err(out, attention_ref(qd, B, T, C, NH)), 2e-6);

  std::vector<float> dqkv(B * T * 3 * C, 99.0f);  // written, so stale contents do not matter
  k::attention_backward(dqkv.data(), dout.data(), qkv.data(), out.data(), lse.data(), B, T, C, NH);
  auto g = numeric_grad(
      [&](const std::vector<double>& v) { return dot(attention_ref(v, B, T, C, NH), dd); }, qd);
  EXPECT_LT(rel_err(dqkv, g), 2e-5);
}

// Tiles are 64 rows: cover one partial tile, exact tiles, and ragged multi-tile cases.
INSTANTIATE_TEST_SUITE_P(Shapes, Attention,
                         ::testing::Values(AttnCase{1, 1, 8, 2}, AttnCase{2, 5, 12, 3},
                                           AttnCase{1, 64, 8, 1}, AttnCase{2, 70, 8, 2},
                                           AttnCase{1, 129, 4, 1}),
                         [](const auto& info) {
                           const AttnCase& c = info.param;
                           return "B" + std::to_string(c.B) + "T" + std::to_string(c.T) + "C" +
                                  std::to_string(c.C) + "H" + std::to_string(c.NH);
                         });

// Documents packed into a sequence (doc_start): lengths drawn from `seed` in [1, longest],
// restarting per batch item.
static std::vector<int32_t> doc_starts(int B, int T, int longest, uint32_t seed) {
  std::vector<int32_t> ds(size_t(B) * T);
  uint32_t x = seed;
  for (int b = 0; b < B; ++b) {
    int start = 0, left = 0;
    for (int t = 0; t < T; ++t) {
      if (left == 0) {
        x = x * 1103515245u + 12345u;
        left = 1 + int((x >> 16) % uint32_t(longest));
        start = t;
      }
      ds[size_t(b) * T + t] = start;
      --left;
    }
  }
  return ds;
}

// Documents: forward and gradients against the reference that masks by document, over
// documents shorter than a tile, documents crossing tiles and long ones that leave whole key
// tiles hidden (skipped) for later rows.
TEST(AttentionDocuments, ForwardAndGradientsStayInsideDocuments) {
  for (const auto& [T, longest] : {std::pair{37, 6}, std::pair{150, 70}, std::pair{200, 140}}) {
    const int B = 2, C = 8, NH = 2;
    const auto ds = doc_starts(B, T, longest, uint32_t(T));
    auto qkv = randn(B * T * 3 * C, 46), dout = randn(B * T * C, 47);
    const auto qd = to_double(qkv), dd = to_double(dout);
    std::vector<float> out(B * T * C), lse(B * NH * T);
    k::attention_forward(out.data(), lse.data(), qkv.data(), B, T, C, NH, false, ds.data());
    EXPECT_LT(rel_err(out, attention_ref(qd, B, T, C, NH, ds.data())), 2e-6) << "T " << T;
    std::vector<float> dqkv(B * T * 3 * C, 99.0f);
    k::attention_backward(dqkv.data(), dout.data(), qkv.data(), out.data(), lse.data(), B, T, C,
                          NH, false, ds.data());
    if (T > 40) continue;  // the numeric gradient is quadratic in T: the short case checks it
    auto g = numeric_grad(
        [&](const std::vector<double>& v) { return dot(attention_ref(v, B, T, C, NH, ds.data()), dd); },
        qd);
    EXPECT_LT(rel_err(dqkv, g), 2e-5);
  }
}

// No attention crosses a boundary: the gradient of the last document's outputs with respect
// to every earlier position is exactly zero, and the output of a document does not change
// when an earlier document's tokens do.
TEST(AttentionDocuments, NothingCrossesABoundary) {
  const int B = 1, T = 160, C = 16, NH = 2, start = 97;  // documents [0, 97) and [97, 160)
  std::vector<int32_t> ds(T);
  for (int t = 0; t < T; ++t) ds[size_t(t)] = t < start ? 0 : start;
  auto qkv = randn(B * T * 3 * C, 48), dout = randn(B * T * C, 49);
  std::fill(dout.begin(), dout.begin() + start * C, 0.0f);  // only the last document's outputs
  std::vector<float> out(T * C), lse(NH * T), dqkv(T * 3 * C, 99.0f);
  k::attention_forward(out.data(), lse.data(), qkv.data(), B, T, C, NH, false, ds.data());
  k::attention_backward(dqkv.data(), dout.data(), qkv.data(), out.data(), lse.data(), B, T, C, NH,
                        false, ds.data());
  for (int i = 0; i < start * 3 * C; ++i) ASSERT_EQ(dqkv[size_t(i)], 0.0f) << "element " << i;
  auto other = qkv;
  for (int i = 0; i < start * 3 * C; ++i) other[size_t(i)] = -2.0f * other[size_t(i)] + 1.0f;
  std::vector<float> out2(T * C), lse2(NH * T);
  k::attention_forward(out2.data(), lse2.data(), other.data(), B, T, C, NH, false, ds.data());
  EXPECT_EQ(0, std::memcmp(out.data() + start * C, out2.data() + start * C, (T - start) * C * 4));
  EXPECT_NE(0, std::memcmp(out.data(), out2.data(), start * C * 4));
}

// One document per sequence (every start 0) is plain causal attention, bit for bit, in fp32,
// with bf16 tile products and with bf16 storage.
TEST(AttentionDocuments, OneDocumentIsPlainCausalAttention) {
  const int B = 2, T = 130, C = 32, NH = 2;
  const std::vector<int32_t> zeros(size_t(B) * T, 0);
  auto qkv = randn(B * T * 3 * C, 50), dout = randn(B * T * C, 51);
  for (bool bf16 : {false, true}) {
    std::vector<float> o1(B * T * C), o2(B * T * C), l1(B * NH * T), l2(B * NH * T);
    std::vector<float> d1(B * T * 3 * C), d2(B * T * 3 * C);
    k::attention_forward(o1.data(), l1.data(), qkv.data(), B, T, C, NH, bf16);
    k::attention_forward(o2.data(), l2.data(), qkv.data(), B, T, C, NH, bf16, zeros.data());
    k::attention_backward(d1.data(), dout.data(), qkv.data(), o1.data(), l1.data(), B, T, C, NH, bf16);
    k::attention_backward(d2.data(), dout.data(), qkv.data(), o2.data(), l2.data(), B, T, C, NH, bf16,
                          zeros.data());
    EXPECT_EQ(0, std::memcmp(o1.data(), o2.data(), o1.size() * 4)) << "bf16 " << bf16;
    EXPECT_EQ(0, std::memcmp(d1.data(), d2.data(), d1.size() * 4)) << "bf16 " << bf16;
  }
  std::vector<uint16_t> qkv_h(qkv.size()), o1(B * T * C), o2(B * T * C);
  k::f32_to_bf16(qkv_h.data(), qkv.data(), int64_t(qkv.size()));
  std::vector<float> l1(B * NH * T), l2(B * NH * T), d1(B * T * 3 * C), d2(B * T * 3 * C);
  k::attention_forward(o1.data(), l1.data(), qkv_h.data(), B, T, C, NH);
  k::attention_forward(o2.data(), l2.data(), qkv_h.data(), B, T, C, NH, zeros.data());
  k::attention_backward(d1.data(), dout.data(), qkv_h.data(), o1.data(), l1.data(), B, T, C, NH);
  k::attention_backward(d2.data(), dout.data(), qkv_h.data(), o2.data(), l2.data(), B, T, C, NH,
                        zeros.data());
  EXPECT_EQ(0, std::memcmp(o1.data(), o2.data(), o1.size() * 2));
  EXPECT_EQ(0, std::memcmp(d1.data(), d2.data(), d1.size() * 4));
}

TEST(AttentionDeterminism, SameBitsForAnyThreadCount) {
  const int B = 2, T = 200, C = 64, NH = 4;
  auto qkv = randn(B * T * 3 * C, 42), dout = randn(B * T * C, 43);
  std::vector<float> out1(B * T * C), out2(B * T * C), lse1(B * NH * T), lse2(B * NH * T);
  std::vector<float> d1(B * T * 3 * C), d2(B * T * 3 * C);
  const int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  k::attention_forward(out1.data(), lse1.data(), qkv.data(), B, T, C, NH);
  k::attention_backward(d1.data(), dout.data(), qkv.data(), out1.data(), lse1.data(), B, T, C, NH);
  omp_set_num_threads(3);
  k::attention_forward(out2.data(), lse2.data(), qkv.data(), B, T, C, NH);
  k::attention_backward(d2.data(), dout.data(), qkv.data(), out2.data(), lse2.data(), B, T, C, NH);
  omp_set_num_threads(saved);
  EXPECT_EQ(0, std::memcmp(out1.data(), out2.data(), out1.size() * 4));
  EXPECT_EQ(0, std::memcmp(d1.data(), d2.data(), d1.size() * 4));
}

}  // namespace strata::test

namespace strata::test {

// bf16 storage: with q, k, v stored in bf16, forward gives exactly what the fp32-stored bf16
// path gives for the same (already bf16-representable) inputs, the output rounded once; the
// backward differs only through D = rowsum(dO * O) on the rounded O, so its gradient stays
// within bf16 accuracy of the fp32-stored one.
TEST(AttentionBf16Storage, MatchesTheFp32StoredBf16Path) {
  const int B = 2, T = 130, C = 32, NH = 2;
  auto qkv = randn(B * T * 3 * C, 44), dout = randn(B * T * C, 45);
  std::vector<uint16_t> qkv_h(qkv.size());
  k::f32_to_bf16(qkv_h.data(), qkv.data(), int64_t(qkv.size()));
  k::bf16_to_f32(qkv.data(), qkv_h.data(), int64_t(qkv.size()));  // representable in bf16
  std::vector<float> out(B * T * C), lse(B * NH * T), lse_h(B * NH * T);
  std::vector<uint16_t> out_h(B * T * C), want(B * T * C);
  k::attention_forward(out.data(), lse.data(), qkv.data(), B, T, C, NH, /*bf16=*/true);
  k::attention_forward(out_h.data(), lse_h.data(), qkv_h.data(), B, T, C, NH);
  k::f32_to_bf16(want.data(), out.data(), int64_t(out.size()));
  EXPECT_EQ(0, std::memcmp(want.data(), out_h.data(), want.size() * 2));
  EXPECT_EQ(0, std::memcmp(lse.data(), lse_h.data(), lse.size() * 4));
  std::vector<float> d(B * T * 3 * C), d_h(B * T * 3 * C);
  k::attention_backward(d.data(), dout.data(), qkv.data(), out.data(), lse.data(), B, T, C, NH,
                        true);
  k::attention_backward(d_h.data(), dout.data(), qkv_h.data(), out_h.data(), lse_h.data(), B, T,
                        C, NH);
  EXPECT_LT(rel_err(d_h, to_double(d)), 2e-2);
  EXPECT_NE(0, std::memcmp(d.data(), d_h.data(), d.size() * 4));  // D really read the bf16 O
}

}  // namespace strata::test
