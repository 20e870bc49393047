// Context-parallel attention (model/context/): ring (zigzag and contiguous chunks) and
// Ulysses over cp = 2, 3, 4 ranks as threads, against the one-rank causal attention kernel,
// forward and backward, with sizes that cross tiles and odd head sizes; the bytes each rank
// sends against model/context/cp_cost.h.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "comm/process_group.h"
#include "core/error.h"
#include "core/rng.h"
#include "kernels/attention.h"
#include "model/context/context_comm.h"
#include "model/context/cp_cost.h"

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

TEST_P(ContextAttention, EqualsOneRankForwardAndBackward) {
  const CpCase p = GetParam();
  const int B = p.B, T = p.T, C = p.C, NH = p.NH;
  const auto qkv = randn(int64_t(B) * T * 3 * C, 1), dout = randn(int64_t(B) * T * C, 2);
  std::vector<float> out(size_t(B) * T * C), lse(size_t(B) * NH * T), dqkv(size_t(B) * T * 3 * C);
  kernels::attention_forward(out.data(), lse.data(), qkv.data(), B, T, C, NH);
  kernels::attention_backward(dqkv.data(), dout.data(), qkv.data(), out.data(), lse.data(), B, T,
                              C, NH);

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
    cc.forward(0, o.data(), l.data(), q.data(), B, Tl, C, NH, false);
    const int64_t fwd = cc.bytes();
    cc.backward(0, dq.data(), d.data(), q.data(), o.data(), l.data(), B, Tl, C, NH, false);
    EXPECT_EQ(fwd, cp_attention_bytes(p.mode, p.cp, B, Tl, C, false));
    EXPECT_EQ(cc.bytes() - fwd, cp_attention_bytes(p.mode, p.cp, B, Tl, C, true));
    L.put(got_out.data(), o.data(), B, r, C);  // each rank writes its own rows
    L.put(got_dqkv.data(), dq.data(), B, r, 3 * C);
  });
  EXPECT_LT(rel_err(got_out, out), 2e-6);
  EXPECT_LT(rel_err(got_dqkv, dqkv), 2e-5);
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
    try {
      check_context_parallel(cfg, tp, cp, o, seq);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(msg(1, 2, {}, 30).find("--seq 30 must be divisible by 2 x --cp = 4"), std::string::npos);
  EXPECT_NE(msg(1, 4, {CpMode::ulysses, CpChunks::contiguous}, 32).find("heads (6) divisible by --cp 4"),
            std::string::npos);
  EXPECT_NE(msg(2, 2, {CpMode::ulysses, CpChunks::zigzag}, 32).find("6 / --tp 2 = 3"),
            std::string::npos);
  EXPECT_NE(msg(1, 16, {}, 8).find("--cp 16 is larger than the sequence (--seq 8)"),
            std::string::npos);
  EXPECT_EQ(msg(1, 2, {CpMode::ulysses, CpChunks::contiguous}, 30), "");
}

}  // namespace
}  // namespace strata::model
