// The fp32 kernels on every instruction-set level this CPU has (kernels/isa.h), and the
// self-check mechanism that decides which paths a process may use (kernels/selfcheck.h).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "check.h"
#include "kernels/cpu.h"
#include "kernels/isa.h"
#include "kernels/kernels.h"
#include "kernels/selfcheck.h"

namespace strata::test {
namespace k = strata::kernels;

namespace {

// A small forward and backward through the kernels a step runs, on the level in force.
struct Outputs {
  std::vector<float> gemm_nn, gemm_tn, ln, dln, gelu, attn, lse, dqkv, ce, rows, rows_gemm;
  double loss = 0;
};

Outputs run_kernels() {
  Outputs o;
  const int M = 37, N = 70, K = 45;
  const auto a = randn(M * K, 1), b = randn(K * N, 2), bias = randn(N, 3);
  o.gemm_nn.assign(M * N, 0.5f);
  k::gemm(k::Op::N, k::Op::N, M, N, K, 1.0f, a.data(), K, b.data(), N, 1.0f, o.gemm_nn.data(), N,
          bias.data());
  o.gemm_tn.assign(K * N, 0.0f);  // a^T (K x M) times gemm_nn (M x N)
  k::gemm(k::Op::T, k::Op::N, K, N, M, 1.0f, a.data(), K, o.gemm_nn.data(), N, 0.0f,
          o.gemm_tn.data(), N);
  const int64_t R = 24;
  const int C = 48;
  const auto x = randn(R * C, 4), w = randn(C, 5), bb = randn(C, 6), dy = randn(R * C, 7);
  std::vector<float> mean(R), rstd(R), dw(C, 0.0f), dbias(C, 0.0f);
  o.ln.resize(R * C), o.dln.assign(R * C, 0.0f), o.gelu.resize(R * C);
  k::layernorm_forward(o.ln.data(), mean.data(), rstd.data(), x.data(), w.data(), bb.data(), R, C);
  k::layernorm_backward(o.dln.data(), dw.data(), dbias.data(), dy.data(), x.data(), w.data(),
                        mean.data(), rstd.data(), R, C);
  k::gelu_forward(o.gelu.data(), x.data(), R * C);
  const int B = 2, T = 12, NH = 4;
  const auto qkv = randn(B * T * 3 * C, 8), dout = randn(B * T * C, 9);
  o.attn.resize(B * T * C), o.lse.resize(B * NH * T), o.dqkv.assign(B * T * 3 * C, 0.0f);
  k::attention_forward(o.attn.data(), o.lse.data(), qkv.data(), B, T, C, NH);
  k::attention_backward(o.dqkv.data(), dout.data(), qkv.data(), o.attn.data(), o.lse.data(), B, T,
                        C, NH);
  const int V = 50, Vp = 64;
  auto logits = randn(R * Vp, 10);
  std::vector<int32_t> tgt(R);
  for (int64_t i = 0; i < R; ++i) tgt[i] = int32_t((i * 7) % V);
  std::vector<float> losses(R), lse(R), weights(R, 1.0f);
  o.loss = k::crossentropy_forward(losses.data(), lse.data(), logits.data(), tgt.data(),
                                   weights.data(), R, V, Vp);
  k::crossentropy_backward(logits.data(), lse.data(), tgt.data(), weights.data(), 1.0f / R, R, V, Vp);
  o.ce = logits;
  // A decoding step's few-rows product (partial row tiles, output tiles and lanes) beside
  // the GEMM's, both accumulating onto the same values.
  const int RN = 6, RC = 70, ROC = 13;
  const auto rx = randn(RN * RC, 15), rw = randn(ROC * RC, 16), rb = randn(ROC, 17);
  o.rows.assign(RN * ROC, 0.25f), o.rows_gemm.assign(RN * ROC, 0.25f);
  k::matmul_forward_rows(o.rows.data(), rx.data(), rw.data(), rb.data(), RN, RC, ROC, true);
  k::matmul_forward(o.rows_gemm.data(), rx.data(), rw.data(), rb.data(), RN, RC, ROC, true);
  return o;
}

// One AdamW step (with weight decay and a clipping scale from the gradient norm) and the
// dtype conversions: what must round the same on every level.
struct Update {
  std::vector<float> p, m, v;
  std::vector<uint16_t> h;
  double norm2 = 0;
};

Update run_update() {
  const int64_t n = 1000 + 13;
  Update u{randn(n, 11), randn(n, 12, 0.1f), randn(n, 13, 0.1f), {}, 0};
  for (auto& x : u.v) x = x * x;
  const auto g = randn(n, 14, 3.0f);
  u.norm2 = k::sum_squares(g.data(), n);
  k::AdamWStep s;
  s.lr = 3e-3f, s.weight_decay = 0.1f, s.t = 7, s.grad_scale = k::clip_scale(u.norm2, 1.0f);
  k::adamw_update(u.p.data(), g.data(), u.m.data(), u.v.data(), n, true, s);
  u.h.resize(n);
  k::f32_to_bf16(u.h.data(), u.p.data(), n);
  return u;
}

template <typename T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

}  // namespace

// Every level the CPU has passes its own known-answer check, and a process's choice under
// auto is the highest of them (unless a check failed, which a note then says).
TEST(Isa, EveryLevelTheCpuHasIsChosenOnlyAfterItsCheck) {
  const auto here = k::available_isas();
  ASSERT_FALSE(here.empty());
  EXPECT_EQ(here.front(), k::Isa::baseline);
  EXPECT_TRUE(k::isa_available(k::isa()));
  if (k::path_notes().empty() && !std::getenv("STRATA_ISA")) {
    EXPECT_EQ(k::isa(), here.back());
  }
  for (const k::PathCheck& c : k::path_checks()) {
    if (c.path.rfind("x86-64-", 0) == 0) {
      EXPECT_TRUE(c.ok) << c.path << ": " << c.why;
    }
  }
  std::printf("  cpu: %s (%s); kernels: %s\n", k::cpu_info().model.c_str(),
              k::cpu_info().flags_line().c_str(), k::isa_name(k::isa()));
}

// Each level's kernels agree with the baseline's within fp32 rounding (they differ only by
// vector width and fused multiply-add), and each is deterministic run to run.
TEST(Isa, EveryLevelAgreesWithTheBaseline) {
  Outputs base;
  {
    k::ScopedIsa on(k::Isa::baseline);
    base = run_kernels();
  }
  for (k::Isa i : k::available_isas()) {
    k::ScopedIsa on(i);
    const Outputs a = run_kernels(), again = run_kernels();
    const char* name = k::isa_name(i);
    EXPECT_TRUE(same_bits(a.gemm_nn, again.gemm_nn) && same_bits(a.dqkv, again.dqkv)) << name;
    EXPECT_LT(rel_err(a.gemm_nn, base.gemm_nn), 1e-5) << name;
    EXPECT_LT(rel_err(a.gemm_tn, base.gemm_tn), 1e-5) << name;
    EXPECT_LT(rel_err(a.ln, base.ln), 1e-5) << name;
    EXPECT_LT(rel_err(a.dln, base.dln), 1e-5) << name;
    EXPECT_LT(rel_err(a.gelu, base.gelu), 1e-5) << name;
    EXPECT_LT(rel_err(a.attn, base.attn), 1e-5) << name;
    EXPECT_LT(rel_err(a.dqkv, base.dqkv), 1e-5) << name;
    EXPECT_LT(rel_err(a.ce, base.ce), 1e-5) << name;
    EXPECT_LT(rel_err(a.rows, base.rows), 1e-5) << name;
    EXPECT_LT(rel_err(a.rows, a.rows_gemm), 1e-5) << name;
    EXPECT_NEAR(a.loss, base.loss, 1e-5 * std::fabs(base.loss)) << name;
  }
}

// The parameter update, the gradient norm and the conversions give the same bits on every
// level: data-parallel replicas on hosts of different CPU kinds keep equal parameters.
TEST(Isa, UpdatesAreBitIdenticalOnEveryLevel) {
  Update base;
  {
    k::ScopedIsa on(k::Isa::baseline);
    base = run_update();
  }
  for (k::Isa i : k::available_isas()) {
    k::ScopedIsa on(i);
    const Update u = run_update();
    EXPECT_EQ(u.norm2, base.norm2) << k::isa_name(i);
    EXPECT_TRUE(same_bits(u.p, base.p)) << k::isa_name(i);
    EXPECT_TRUE(same_bits(u.m, base.m)) << k::isa_name(i);
    EXPECT_TRUE(same_bits(u.v, base.v)) << k::isa_name(i);
    EXPECT_TRUE(same_bits(u.h, base.h)) << k::isa_name(i);
  }
}

// The mechanism: a check runs in a child, so an illegal instruction, a crash or a wrong
// answer there is a result, not the end of the process; and it runs once per path.
TEST(SelfCheck, ACheckThatFailsInAnyWayIsAResult) {
  EXPECT_TRUE(k::prove_path("test-ok", [] { return true; }).ok);
  const k::PathCheck& wrong = k::prove_path("test-wrong", [] { return false; });
  EXPECT_FALSE(wrong.ok);
  EXPECT_EQ(wrong.why, "wrong answer");
  const k::PathCheck& ill = k::prove_path("test-sigill", [] {
    __builtin_trap();
    return true;
  });
  EXPECT_FALSE(ill.ok);
  EXPECT_EQ(ill.why, "illegal instruction");
  const k::PathCheck& segv = k::prove_path("test-segv", [] {
    volatile int* p = nullptr;
    return *p == 0;
  });
  EXPECT_FALSE(segv.ok);
  EXPECT_EQ(segv.why.rfind("crashed (", 0), 0u) << segv.why;
  int runs = 0;
  EXPECT_FALSE(k::prove_path("test-wrong", [&] { return ++runs, true; }).ok);  // the first result
  EXPECT_EQ(runs, 0);
}

// The testing knob: STRATA_SELFCHECK_FAIL names paths whose check fails, by an illegal
// instruction (the default) or a wrong answer, whatever the check itself would say.
TEST(SelfCheck, TheKnobMakesANamedPathFail) {
  ::setenv("STRATA_SELFCHECK_FAIL", "test-knob-a,test-knob-b:wrong", 1);
  const k::PathCheck a = k::prove_path("test-knob-a", [] { return true; });
  const k::PathCheck b = k::prove_path("test-knob-b", [] { return true; });
  const k::PathCheck c = k::prove_path("test-knob-c", [] { return true; });
  ::unsetenv("STRATA_SELFCHECK_FAIL");
  EXPECT_FALSE(a.ok);
  EXPECT_EQ(a.why, "illegal instruction");
  EXPECT_FALSE(b.ok);
  EXPECT_EQ(b.why, "wrong answer");
  EXPECT_TRUE(c.ok) << c.why;
}

}  // namespace strata::test
