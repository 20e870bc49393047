// Grouped-query attention (KV heads dividing the query heads) in the flash kernel and in the
// ring block kernel, against a naive double-precision softmax attention.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "check.h"
#include "kernels/attention_block.h"
#include "kernels/kernels.h"

namespace strata::test {
namespace k = strata::kernels;

// out (B,T,NH*hs) from qkv (B,T,(NH+2NKV)hs); query head h reads KV head h / (NH/NKV); with
// doc_start (B,T), query t sees keys [doc_start[t], t] only.
static std::vector<double> gqa_ref(const std::vector<double>& qkv, k::AttentionShape s,
                                   const int32_t* doc_start = nullptr) {
  const int T = s.T, hs = s.hs, group = s.NH / s.NKV;
  const int64_t ld = s.row(), C = int64_t(s.NH) * hs;
  const double scale = 1 / std::sqrt(double(hs));
  std::vector<double> out(s.B * T * C), p(T);
  for (int b = 0; b < s.B; ++b)
    for (int h = 0; h < s.NH; ++h)
      for (int t = 0; t < T; ++t) {
        const double* q = &qkv[(b * T + t) * ld + h * hs];
        const int64_t kc = s.k_col(h / group), vc = kc + int64_t(s.NKV) * hs;
        const int s0 = doc_start ? doc_start[b * T + t] : 0;
        double m = -INFINITY, sum = 0;
        for (int j = s0; j <= t; ++j) {
          double d = 0;
          for (int i = 0; i < hs; ++i) d += q[i] * qkv[(b * T + j) * ld + kc + i];
          p[j] = d * scale;
          m = std::max(m, p[j]);
        }
        for (int j = s0; j <= t; ++j) sum += (p[j] = std::exp(p[j] - m));
        for (int i = 0; i < hs; ++i) {
          double o = 0;
          for (int j = s0; j <= t; ++j) o += p[j] / sum * qkv[(b * T + j) * ld + vc + i];
          out[(b * T + t) * C + h * hs + i] = o;
        }
      }
  return out;
}

// Documents of lengths in [1, longest] from a fixed generator, restarting per batch item.
static std::vector<int32_t> doc_starts(int B, int T, int longest) {
  std::vector<int32_t> ds(size_t(B) * T);
  uint32_t x = uint32_t(T * 31 + longest);
  for (int b = 0; b < B; ++b)
    for (int t = 0, start = 0, left = 0; t < T; ++t, --left) {
      if (left == 0) {
        x = x * 1103515245u + 12345u;
        left = 1 + int((x >> 16) % uint32_t(longest));
        start = t;
      }
      ds[size_t(b) * T + t] = start;
    }
  return ds;
}

struct GqaCase {
  int B, T, NH, NKV, hs;
};

static std::string name(const GqaCase& c) {
  return "B" + std::to_string(c.B) + "T" + std::to_string(c.T) + "H" + std::to_string(c.NH) + "KV" +
         std::to_string(c.NKV) + "hs" + std::to_string(c.hs);
}

class Gqa : public ::testing::TestWithParam<GqaCase> {};

// Forward and gradients, with and without documents; numeric gradients where affordable.
TEST_P(Gqa, ForwardAndGradients) {
  const auto c = GetParam();
  const k::AttentionShape s{c.B, c.T, c.NH, c.NKV, c.hs};
  const int64_t C = int64_t(c.NH) * c.hs, n = s.B * s.T * s.row();
  const auto ds = doc_starts(c.B, c.T, 40);
  auto qkv = randn(n, 80), dout = randn(s.B * s.T * C, 81);
  const auto qd = to_double(qkv), dd = to_double(dout);
  for (const int32_t* doc : {(const int32_t*)nullptr, ds.data()}) {
    std::vector<float> out(s.B * s.T * C), lse(s.B * s.NH * s.T), dqkv(n, 99.0f);
    k::attention_forward(out.data(), lse.data(), qkv.data(), s, false, doc);
    EXPECT_LT(rel_err(out, gqa_ref(qd, s, doc)), 2e-6) << (doc ? "documents" : "causal");
    k::attention_backward(dqkv.data(), dout.data(), qkv.data(), out.data(), lse.data(), s, false,
                          doc);
    if (n > 4000) continue;  // the numeric gradient is quadratic in T: small shapes check it
    auto g =
        numeric_grad([&](const std::vector<double>& v) { return dot(gqa_ref(v, s, doc), dd); }, qd);
    EXPECT_LT(rel_err(dqkv, g), 2e-5) << (doc ? "documents" : "causal");
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, Gqa,
                         ::testing::Values(GqaCase{1, 1, 4, 4, 4}, GqaCase{1, 1, 4, 1, 4},
                                           GqaCase{2, 5, 4, 4, 4}, GqaCase{2, 5, 4, 2, 4},
                                           GqaCase{2, 5, 4, 1, 4}, GqaCase{1, 64, 4, 2, 2},
                                           GqaCase{1, 64, 4, 1, 4}, GqaCase{1, 70, 4, 4, 4},
                                           GqaCase{1, 70, 4, 2, 4}, GqaCase{1, 70, 4, 1, 4},
                                           GqaCase{1, 129, 4, 4, 4}, GqaCase{1, 129, 4, 2, 4},
                                           GqaCase{1, 129, 4, 1, 2}),
                         [](const auto& info) { return name(info.param); });

// NKV = NH through the shape is today's (C, NH) attention, bit for bit, fp32, bf16 tile
// products and bf16 storage, with and without documents.
TEST(GqaShape, FullHeadsAreTheExistingKernel) {
  const int B = 2, T = 130, C = 32, NH = 4;
  const k::AttentionShape s{B, T, NH, NH, C / NH};
  const auto ds = doc_starts(B, T, 70);
  auto qkv = randn(B * T * 3 * C, 82), dout = randn(B * T * C, 83);
  std::vector<uint16_t> qkv_h(qkv.size());
  k::f32_to_bf16(qkv_h.data(), qkv.data(), int64_t(qkv.size()));
  for (const int32_t* doc : {(const int32_t*)nullptr, ds.data()})
    for (bool bf16 : {false, true}) {
      std::vector<float> o1(B * T * C), o2(B * T * C), l1(B * NH * T), l2(B * NH * T);
      std::vector<float> d1(qkv.size()), d2(qkv.size());
      k::attention_forward(o1.data(), l1.data(), qkv.data(), B, T, C, NH, bf16, doc);
      k::attention_forward(o2.data(), l2.data(), qkv.data(), s, bf16, doc);
      k::attention_backward(d1.data(), dout.data(), qkv.data(), o1.data(), l1.data(), B, T, C, NH,
                            bf16, doc);
      k::attention_backward(d2.data(), dout.data(), qkv.data(), o2.data(), l2.data(), s, bf16, doc);
      EXPECT_EQ(0, std::memcmp(o1.data(), o2.data(), o1.size() * 4));
      EXPECT_EQ(0, std::memcmp(d1.data(), d2.data(), d1.size() * 4));
      std::vector<uint16_t> h1(B * T * C), h2(B * T * C);
      k::attention_forward(h1.data(), l1.data(), qkv_h.data(), B, T, C, NH, doc);
      k::attention_forward(h2.data(), l2.data(), qkv_h.data(), s, doc);
      k::attention_backward(d1.data(), dout.data(), qkv_h.data(), h1.data(), l1.data(), B, T, C, NH,
                            doc);
      k::attention_backward(d2.data(), dout.data(), qkv_h.data(), h2.data(), l2.data(), s, doc);
      EXPECT_EQ(0, std::memcmp(h1.data(), h2.data(), h1.size() * 2));
      EXPECT_EQ(0, std::memcmp(d1.data(), d2.data(), d1.size() * 4));
    }
}

TEST(GqaShape, SameBitsForAnyThreadCountAndBf16WithinTolerance) {
  const k::AttentionShape s{2, 200, 8, 2, 8};
  const int64_t C = int64_t(s.NH) * s.hs, n = s.B * s.T * s.row();
  const auto ds = doc_starts(s.B, s.T, 90);
  auto qkv = randn(n, 84), dout = randn(s.B * s.T * C, 85);
  auto run = [&](bool bf16) {
    std::vector<float> out(s.B * s.T * C), lse(s.B * s.NH * s.T), d(n);
    k::attention_forward(out.data(), lse.data(), qkv.data(), s, bf16, ds.data());
    k::attention_backward(d.data(), dout.data(), qkv.data(), out.data(), lse.data(), s, bf16,
                          ds.data());
    out.insert(out.end(), d.begin(), d.end());
    return out;
  };
  auto runs = for_thread_counts([&] { return run(false); });
  for (size_t i = 1; i < runs.size(); ++i)
    EXPECT_EQ(0, std::memcmp(runs[0].data(), runs[i].data(), runs[0].size() * 4));
  EXPECT_LT(rel_err(run(true), to_double(runs[0])), 2e-2);
  std::vector<uint16_t> qkv_h(n), out_h(s.B * s.T * C);
  k::f32_to_bf16(qkv_h.data(), qkv.data(), n);
  std::vector<float> lse(s.B * s.NH * s.T), d(n), out(out_h.size());
  k::attention_forward(out_h.data(), lse.data(), qkv_h.data(), s, ds.data());
  k::attention_backward(d.data(), dout.data(), qkv_h.data(), out_h.data(), lse.data(), s,
                        ds.data());
  k::bf16_to_f32(out.data(), out_h.data(), int64_t(out.size()));
  out.insert(out.end(), d.begin(), d.end());
  EXPECT_LT(rel_err(out, to_double(runs[0])), 2e-2);
}

TEST(GqaShape, KvHeadsThatDoNotDivideAreRefused) {
  const k::AttentionShape s{1, 4, 4, 3, 4};
  std::vector<float> qkv(4 * s.row()), out(4 * 16), lse(16);
  EXPECT_THROW(k::attention_forward(out.data(), lse.data(), qkv.data(), s), std::exception);
}

// The ring block kernel with GQA: the sequence split into two blocks (the second seeing the
// first in full and itself causally), merged, gives the reference attention and gradients.
TEST(GqaBlock, TwoBlocksMergeToTheReference) {
  for (int NKV : {4, 2, 1})
    for (bool docs : {false, true}) {
      const k::AttentionShape s{2, 70, 4, NKV, 4};
      const int half = 33, C = s.NH * s.hs;
      const int64_t ld = s.row(), n = s.B * s.T * ld;
      const auto ds = doc_starts(s.B, s.T, 20);
      auto qkv = randn(n, 86), dout = randn(s.B * s.T * C, 87);
      const auto qd = to_double(qkv);
      std::vector<float> out(s.B * s.T * C), lse(s.B * s.NH * s.T, -INFINITY), D(lse.size());
      std::vector<float> dqkv(n, 0.0f);
      auto rows = [&](const float* p, int64_t col, int64_t stride, int t0) {
        return k::Rows{p + col + t0 * stride, s.T * stride, stride};
      };
      auto rows_out = [&](float* p, int64_t col, int64_t stride, int t0) {
        return k::RowsOut{p + col + t0 * stride, s.T * stride, stride};
      };
      const int64_t kc = s.k_col(0), vc = kc + int64_t(NKV) * s.hs;
      // (query block, key block, mask) in the order a ring meets them.
      struct Step {
        int q0, nq, k0, nk;
        k::BlockMask mask;
      };
      const Step steps[] = {{0, half, 0, half, k::BlockMask::causal},
                            {half, s.T - half, half, s.T - half, k::BlockMask::causal},
                            {half, s.T - half, 0, half, k::BlockMask::full}};
      auto stats = [&](float* p, int t0) { return k::Stats{p + t0, s.NH * s.T, s.T}; };
      for (const Step& st : steps) {
        const k::BlockShape bs{s.B, s.NH, s.hs, st.nq, st.nk, NKV};
        const k::DocBounds db{docs ? ds.data() + st.q0 : nullptr, s.T, st.k0};
        k::attention_block_forward(rows_out(out.data(), 0, C, st.q0), stats(lse.data(), st.q0),
                                   rows(qkv.data(), 0, ld, st.q0), rows(qkv.data(), kc, ld, st.k0),
                                   rows(qkv.data(), vc, ld, st.k0), bs, st.mask, false, db);
      }
      EXPECT_LT(rel_err(out, gqa_ref(qd, s, docs ? ds.data() : nullptr)), 5e-6);
      k::attention_row_dot(stats(D.data(), 0), rows(dout.data(), 0, C, 0),
                           rows(out.data(), 0, C, 0),
                           k::BlockShape{s.B, s.NH, s.hs, s.T, s.T, NKV});
      for (const Step& st : steps) {
        const k::BlockShape bs{s.B, s.NH, s.hs, st.nq, st.nk, NKV};
        const k::DocBounds db{docs ? ds.data() + st.q0 : nullptr, s.T, st.k0};
        k::attention_block_backward(
            rows_out(dqkv.data(), 0, ld, st.q0), rows_out(dqkv.data(), kc, ld, st.k0),
            rows_out(dqkv.data(), vc, ld, st.k0), rows(dout.data(), 0, C, st.q0),
            rows(qkv.data(), 0, ld, st.q0), rows(qkv.data(), kc, ld, st.k0),
            rows(qkv.data(), vc, ld, st.k0), stats(lse.data(), st.q0), stats(D.data(), st.q0), bs,
            st.mask, false, db);
      }
      // Against the one-pass kernel's gradients (themselves checked numerically above).
      std::vector<float> o1(out.size()), l1(lse.size()), d1(n);
      k::attention_forward(o1.data(), l1.data(), qkv.data(), s, false, docs ? ds.data() : nullptr);
      k::attention_backward(d1.data(), dout.data(), qkv.data(), o1.data(), l1.data(), s, false,
                            docs ? ds.data() : nullptr);
      EXPECT_LT(rel_err(dqkv, to_double(d1)), 1e-5) << "NKV " << NKV << " docs " << docs;
    }
}

// A decoding step (kernels::attention_decode): the last query of each sequence over a cache
// of the T positions' keys and values (S > T rows per sequence, the rest garbage), against
// the reference's last row, for multi-head, grouped and multi-query attention and a head
// size with a partial lane group; the same bits for any thread count.
TEST(GqaDecode, TheLastQueryOverACacheIsTheReferencesLastRow) {
  const int B = 3, T = 11, NH = 4, S = 16;
  for (int hs : {16, 20})
    for (int NKV : {4, 2, 1}) {
      const k::AttentionShape s{B, T, NH, NKV, hs};
      const auto qkv = randn(int64_t(B) * T * s.row(), 40 + NKV + hs);
      const int64_t KW = int64_t(NKV) * hs;
      std::vector<float> K = randn(int64_t(B) * S * KW, 50), V = randn(int64_t(B) * S * KW, 51);
      for (int b = 0; b < B; ++b)
        for (int t = 0; t < T; ++t) {
          const float* row = &qkv[size_t((int64_t(b) * T + t) * s.row())];
          std::memcpy(&K[size_t((int64_t(b) * S + t) * KW)], row + s.k_col(0), sizeof(float) * KW);
          std::memcpy(&V[size_t((int64_t(b) * S + t) * KW)], row + s.k_col(0) + KW,
                      sizeof(float) * KW);
        }
      const auto ref = gqa_ref(to_double(qkv), s);
      const int64_t C = int64_t(NH) * hs;
      std::vector<double> want(size_t(B * C));
      for (int b = 0; b < B; ++b)
        for (int64_t c = 0; c < C; ++c)
          want[size_t(b * C + c)] = ref[size_t((int64_t(b) * T + T - 1) * C + c)];
      const float* last_q = &qkv[size_t(int64_t(T - 1) * s.row())];
      std::vector<float> out1(size_t(B * C)), out3(size_t(B * C));
      omp_set_num_threads(1);
      k::attention_decode(out1.data(), last_q, int64_t(T) * s.row(), K.data(), V.data(), s, S);
      omp_set_num_threads(3);
      k::attention_decode(out3.data(), last_q, int64_t(T) * s.row(), K.data(), V.data(), s, S);
      omp_set_num_threads(1);
      EXPECT_LT(rel_err(out1, want), 1e-5) << "NKV " << NKV << " hs " << hs;
      EXPECT_EQ(std::memcmp(out1.data(), out3.data(), out1.size() * sizeof(float)), 0);
    }
}

}  // namespace strata::test
