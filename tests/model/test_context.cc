// Context parallelism (model/context/), ranks as threads: ring (zigzag and contiguous chunks)
// and Ulysses attention over cp = 2, 3, 4 against the one-rank causal attention kernel,
// forward and backward, with sizes that cross tiles and odd head sizes, and the bytes each
// rank sends against cost/comm.h; then a cp GPT against one process: the same
// loss, the same logits, and gradients whose sum over the cp ranks is the one-process
// gradient, with buffers equal to the planner's prediction.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "comm/process_group.h"
#include "core/error.h"
#include "core/rng.h"
#include "cost/activations.h"
#include "cost/comm.h"
#include "kernels/attention.h"
#include "model/context/context_comm.h"
#include "model/gpt.h"
#include "model/shard.h"
#include "support/error_of.h"

namespace strata::model {
namespace {

std::vector<float> randn(int64_t n, uint64_t stream) {
  Rng r(77, stream);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = r.normal();
  return v;
}

double rel_err(const std::vector<float>& a, const std::vector<float>& b) {
  double diff = 0, scale = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    diff = std::max(diff, std::fabs(double(a[i]) - double(b[i])));
    scale = std::max(scale, std::fabs(double(b[i])));
  }
  return diff / scale;
}

struct CpCase {
  int cp;
  CpMode mode;
  CpChunks chunks;
  int B, T, C, NH;
};

std::string name_of(const CpCase& c) {
  return std::string(cp_mode_name(c.mode)) + (c.mode == CpMode::ring ? cp_chunks_name(c.chunks) : "") +
         "Cp" + std::to_string(c.cp) + "B" + std::to_string(c.B) + "T" + std::to_string(c.T) +
         "C" + std::to_string(c.C) + "H" + std::to_string(c.NH);
}

class ContextAttention : public ::testing::TestWithParam<CpCase> {};

// Documents of 1..longest tokens packed into each sequence: (B, T) document starts.
std::vector<int32_t> doc_starts(int B, int T, int longest) {
  std::vector<int32_t> ds(size_t(B) * T);
  Rng r(78, uint64_t(T));
  for (int b = 0; b < B; ++b)
    for (int t = 0, start = 0, left = 0; t < T; ++t, --left) {
      if (left == 0) {
        left = 1 + int(r.next_u32() % uint32_t(longest));
        start = t;
      }
      ds[size_t(b) * T + t] = start;
    }
  return ds;
}

// The cp group's attention against the one-rank kernel; with documents (doc_start set) both
// mask by document, so ring blocks meet rows whose document starts after their keys.
void expect_equals_one_rank(const CpCase& p, const int32_t* doc_start) {
  const int B = p.B, T = p.T, C = p.C, NH = p.NH;
  const auto qkv = randn(int64_t(B) * T * 3 * C, 1), dout = randn(int64_t(B) * T * C, 2);
  std::vector<float> out(size_t(B) * T * C), lse(size_t(B) * NH * T), dqkv(size_t(B) * T * 3 * C);
  kernels::attention_forward(out.data(), lse.data(), qkv.data(), B, T, C, NH, false, doc_start);
  kernels::attention_backward(dqkv.data(), dout.data(), qkv.data(), out.data(), lse.data(), B, T,
                              C, NH, false, doc_start);

  std::vector<float> got_out(out.size()), got_dqkv(dqkv.size());
  std::vector<int64_t> sent(size_t(p.cp));
  comm::run_threads(p.cp, [&](comm::ProcessGroup& pg) {
    ContextComm cc(pg, {p.mode, p.chunks});
    const SeqLayout L = cc.layout(T);
    const int Tl = L.local_len(), r = pg.rank();
    const int64_t N = int64_t(B) * Tl;
    std::vector<float> q(size_t(N * 3 * C)), d(size_t(N * C)), o(size_t(N * C)),
        l(size_t(N * NH)), dq(size_t(N * 3 * C), 99.0f);
    L.take(q.data(), qkv.data(), B, r, 3 * C);
    L.take(d.data(), dout.data(), B, r, C);
    cc.forward(0, o.data(), l.data(), q.data(), B, Tl, C, NH, false, doc_start);
    const int64_t fwd = cc.bytes();
    cc.backward(0, dq.data(), d.data(), q.data(), o.data(), l.data(), B, Tl, C, NH, false, doc_start);
    EXPECT_EQ(fwd, cost::cp_attention_bytes(p.mode == CpMode::ring, p.cp, B, Tl, C, false));
    EXPECT_EQ(cc.bytes() - fwd, cost::cp_attention_bytes(p.mode == CpMode::ring, p.cp, B, Tl, C, true));
    L.put(got_out.data(), o.data(), B, r, C);  // each rank writes its own rows
    L.put(got_dqkv.data(), dq.data(), B, r, 3 * C);
  });
  EXPECT_LT(rel_err(got_out, out), 2e-6);
  EXPECT_LT(rel_err(got_dqkv, dqkv), 2e-5);
}

TEST_P(ContextAttention, EqualsOneRankForwardAndBackward) { expect_equals_one_rank(GetParam(), nullptr); }

// Short documents (inside a chunk) and long ones (crossing chunks and ranks).
TEST_P(ContextAttention, EqualsOneRankWithDocuments) {
  const CpCase p = GetParam();
  for (int longest : {4, p.T / 2 + 1}) {
    const std::vector<int32_t> ds = doc_starts(p.B, p.T, longest);
    expect_equals_one_rank(p, ds.data());
  }
}

std::vector<CpCase> cases() {
  std::vector<CpCase> v;
  const CpMode ring = CpMode::ring, uly = CpMode::ulysses;
  const CpChunks zz = CpChunks::zigzag, ct = CpChunks::contiguous;
  for (int cp : {2, 3, 4}) {
    // Chunks of 5 rows (inside one tile) and of 37 or 29 (the sequence crosses tiles).
    v.push_back({cp, ring, zz, 2, 2 * cp * 5, 12, 4});
    v.push_back({cp, ring, zz, 1, 2 * cp * (cp == 2 ? 37 : 29), 15, 3});
    v.push_back({cp, ring, ct, 2, cp * 7, 12, 4});
    v.push_back({cp, ring, ct, 1, cp * 41, 15, 3});
    v.push_back({cp, uly, zz, 2, 2 * cp * 5, 36, 12});
    v.push_back({cp, uly, ct, 1, cp * 43, 36, 12});
  }
  return v;
}

INSTANTIATE_TEST_SUITE_P(Modes, ContextAttention, ::testing::ValuesIn(cases()),
                         [](const auto& info) { return name_of(info.param); });

// Grouped-query attention (NKV key/value heads) over cp ranks: ring and Ulysses equal the
// one-rank kernel, including Ulysses with fewer key/value heads than cp ranks (each head sent
// to the ranks whose query heads share it, its gradients summed back), and each rank's bytes
// are cost/comm.h's.
TEST(ContextAttentionGqa, SplitAndSharedKeyValueHeadsEqualOneRank) {
  const int B = 2, NH = 4, hs = 6, C = NH * hs;
  for (CpMode mode : {CpMode::ulysses, CpMode::ring})
    for (int cp : {2, 4})
      for (int NKV : {1, 2, 4}) {
        const int T = 2 * cp * 5, K = NKV * hs, W = C + 2 * K;
        const kernels::AttentionShape shape{B, T, NH, NKV, hs};
        const auto qkv = randn(int64_t(B) * T * W, 3), dout = randn(int64_t(B) * T * C, 4);
        std::vector<float> out(size_t(B) * T * C), lse(size_t(B) * NH * T),
            dqkv(size_t(B) * T * W);
        kernels::attention_forward(out.data(), lse.data(), qkv.data(), shape);
        kernels::attention_backward(dqkv.data(), dout.data(), qkv.data(), out.data(), lse.data(),
                                    shape);
        std::vector<float> got_out(out.size()), got_dqkv(dqkv.size());
        const std::string what = std::string(cp_mode_name(mode)) + " cp " +
                                 std::to_string(cp) + " kv " + std::to_string(NKV);
        comm::run_threads(cp, [&](comm::ProcessGroup& pg) {
          ContextComm cc(pg, {mode, CpChunks::zigzag});
          const SeqLayout L = cc.layout(T);
          const int Tl = L.local_len(), r = pg.rank();
          const int64_t N = int64_t(B) * Tl;
          std::vector<float> q(size_t(N * W)), d(size_t(N * C)), o(size_t(N * C)),
              l(size_t(N * NH)), dq(size_t(N * W), 99.0f);
          L.take(q.data(), qkv.data(), B, r, W);
          L.take(d.data(), dout.data(), B, r, C);
          cc.forward(0, o.data(), l.data(), q.data(), B, Tl, C, NH, false, nullptr, NKV);
          const int64_t fwd = cc.bytes();
          cc.backward(0, dq.data(), d.data(), q.data(), o.data(), l.data(), B, Tl, C, NH, false,
                      nullptr, NKV);
          const bool ring = mode == CpMode::ring;
          EXPECT_EQ(fwd, cost::cp_attention_bytes(ring, cp, B, Tl, C, false, K, hs)) << what;
          EXPECT_EQ(cc.bytes() - fwd, cost::cp_attention_bytes(ring, cp, B, Tl, C, true, K, hs))
              << what;
          EXPECT_EQ(cc.buffer_bytes(), cost::cp_buffer_bytes(ring, cp, 1, B, Tl, C, NH, K))
              << what;
          L.put(got_out.data(), o.data(), B, r, C);
          L.put(got_dqkv.data(), dq.data(), B, r, W);
        });
        EXPECT_LT(rel_err(got_out, out), 2e-6) << what;
        EXPECT_LT(rel_err(got_dqkv, dqkv), 2e-5) << what;
      }
}

TEST(ContextLayout, ZigzagPositionsCoverTheSequenceOnce) {
  for (int C : {1, 2, 3, 4})
    for (CpChunks k : {CpChunks::zigzag, CpChunks::contiguous}) {
      const SeqLayout L{k, C, 2 * C * 3};
      std::vector<int> seen(size_t(L.T), 0);
      for (int r = 0; r < C; ++r)
        for (int t = 0; t < L.local_len(); ++t) ++seen[size_t(L.position(r, t))];
      for (int s : seen) EXPECT_EQ(s, 1);
    }
  const SeqLayout z{CpChunks::zigzag, 2, 8};  // chunks of 2: rank 0 holds 0 and 3
  EXPECT_EQ(z.position(0, 0), 0);
  EXPECT_EQ(z.position(0, 2), 6);
  EXPECT_EQ(z.position(1, 0), 2);
  EXPECT_EQ(z.position(1, 3), 5);
}

TEST(ContextLayout, RefusesWhatItCannotSplit) {
  GPTConfig cfg;
  cfg.heads = 6;
  auto msg = [&](int tp, int cp, CpOptions o, int seq) {
    return test::error_of([&] { check_context_parallel(cfg, tp, cp, o, seq); });
  };
  EXPECT_NE(msg(1, 2, {}, 30).find("--seq 30 must be divisible by 2 x --cp = 4"), std::string::npos);
  // When --cp alone divides the sequence, the refusal names the layout that runs it.
  EXPECT_NE(msg(1, 2, {}, 30).find("--cp-chunks contiguous runs it"), std::string::npos);
  EXPECT_EQ(msg(1, 4, {}, 30).find("--cp-chunks contiguous"), std::string::npos);
  EXPECT_NE(msg(1, 4, {CpMode::ulysses, CpChunks::contiguous}, 32).find("heads (6) divisible by --cp 4"),
            std::string::npos);
  EXPECT_NE(msg(2, 2, {CpMode::ulysses, CpChunks::zigzag}, 32).find("6 / --tp 2 = 3"),
            std::string::npos);
  EXPECT_NE(msg(1, 16, {}, 8).find("--cp 16 is larger than the sequence (--seq 8)"),
            std::string::npos);
  EXPECT_EQ(msg(1, 2, {CpMode::ulysses, CpChunks::contiguous}, 30), "");
}

// 2 layers, width 24, 6 heads (Ulysses over 2 and 3 ranks), seq 48, vocab 50; local rows
// (2 x 48 / cp) are multiples of 16, so buffers carve without alignment padding.
const GPTConfig kCfg{Arch::gpt2, 2, 24, 6, 0, 0, 48, 50, 64, 1e-5f, 10000.0f, true, {}, {}};

struct GptCase {
  int cp;
  CpOptions opt;
  DType compute;
};

class ContextGpt : public ::testing::TestWithParam<GptCase> {};

TEST_P(ContextGpt, MatchesOneProcess) {
  const GptCase p = GetParam();
  const int B = 2, T = 48;
  std::vector<int32_t> tokens, targets;
  std::vector<float> weights;
  Rng r(5, 0);
  for (int i = 0; i < B * T; ++i) {
    tokens.push_back(int32_t(r.below(kCfg.vocab)));
    targets.push_back(int32_t(r.below(kCfg.vocab)));
    weights.push_back(i % 7 == 2 ? 0.0f : 1.0f);
  }
  GPT one(kCfg, B, true, nullptr, p.compute);
  one.init(3);
  one.zero_grads();
  const double want = one.forward(tokens.data(), targets.data(), weights.data(), B, T);
  one.backward(0.01f);
  const std::vector<float> want_logits = [&] {
    const float* l = one.logits(tokens.data(), 1, 11);  // a prompt the layout must pad
    return std::vector<float>(l, l + 11 * kCfg.padded_vocab);
  }();

  std::vector<double> loss(size_t(p.cp));
  std::vector<float> grads(size_t(one.num_params()));
  std::vector<std::vector<float>> logits(size_t(p.cp));
  comm::run_threads(p.cp, [&](comm::ProcessGroup& pg) {
    ContextComm cc(pg, p.opt);
    GPT m(kCfg, B, true, nullptr, p.compute, &cc);
    m.init(3);
    m.zero_grads();
    loss[size_t(pg.rank())] = m.forward(tokens.data(), targets.data(), weights.data(), B, T);
    m.backward(0.01f);
    EXPECT_EQ(cc.buffer_bytes(), cost::cp_buffer_bytes(p.opt.mode == CpMode::ring, p.cp, kCfg.layers,
                                                       B, T / p.cp, kCfg.dim, kCfg.heads));
    // What `strata plan --local --cp` and --max-activation-mb predict for this rank.
    EXPECT_EQ(m.activation_bytes() + cc.buffer_bytes(),
              cost::cp_activation_bytes(gpt_shape(kCfg), 1, false, 0, B, p.compute == DType::bf16,
                                        p.opt.mode == CpMode::ring, p.cp, T));
    pg.all_reduce(m.grads(), size_t(m.num_params()));  // what dp_cp's reduction does
    if (pg.rank() == 0) std::copy(m.grads(), m.grads() + m.num_params(), grads.begin());
    const float* l = m.logits(tokens.data(), 1, 11);
    logits[size_t(pg.rank())].assign(l, l + 11 * kCfg.padded_vocab);
  });
  const double tol = p.compute == DType::bf16 ? 1e-3 : 2e-6;
  for (int c = 0; c < p.cp; ++c) {
    EXPECT_NEAR(loss[size_t(c)], want, tol * std::fabs(want)) << "cp rank " << c;
    EXPECT_LT(rel_err(logits[size_t(c)], want_logits),
              p.compute == DType::bf16 ? 2e-2 : 2e-5);
  }
  EXPECT_LT(rel_err(grads, std::vector<float>(one.grads(), one.grads() + one.num_params())),
            p.compute == DType::bf16 ? 3e-2 : 2e-5);
}

INSTANTIATE_TEST_SUITE_P(
    Modes, ContextGpt,
    ::testing::Values(GptCase{2, {CpMode::ring, CpChunks::zigzag}, DType::f32},
                      GptCase{2, {CpMode::ring, CpChunks::contiguous}, DType::f32},
                      GptCase{3, {CpMode::ring, CpChunks::zigzag}, DType::f32},
                      GptCase{2, {CpMode::ulysses, CpChunks::zigzag}, DType::f32},
                      GptCase{3, {CpMode::ulysses, CpChunks::contiguous}, DType::f32},
                      GptCase{2, {CpMode::ring, CpChunks::zigzag}, DType::bf16},
                      GptCase{2, {CpMode::ulysses, CpChunks::zigzag}, DType::bf16}),
    [](const auto& info) {
      const GptCase& c = info.param;
      return std::string(cp_mode_name(c.opt.mode)) + cp_chunks_name(c.opt.chunks) + "Cp" +
             std::to_string(c.cp) + (c.compute == DType::bf16 ? "Bf16" : "F32");
    });

}  // namespace
}  // namespace strata::model
