// Per-kernel micro-benchmarks at the `tiny` training shapes (B=8, T=256, C=256, NH=4,
// V=256), plus an sgemm probe of the machine's peak. GFLOP/s counters count the useful
// flops of each kernel (attention: causal half of the T x T products).
//   OMP_NUM_THREADS=2 build/bench/bench_kernels
#include <benchmark/benchmark.h>
#include <cblas.h>

#include <string>
#include <vector>

#include "core/rng.h"
#include "kernels/gemm.h"
#include "kernels/isa.h"
#include "kernels/kernels.h"

namespace {
namespace k = strata::kernels;

constexpr int B = 8, T = 256, C = 256, NH = 4, V = 256;
constexpr int64_t N = int64_t(B) * T;

std::vector<float> randn(int64_t n, uint64_t stream) {
  strata::Rng r(3, stream);
  std::vector<float> v(n);
  for (auto& x : v) x = r.normal();
  return v;
}

void flops(benchmark::State& s, double per_iter) {
  s.counters["GFLOP/s"] =
      benchmark::Counter(per_iter * double(s.iterations()) * 1e-9, benchmark::Counter::kIsRate);
}

void BM_sgemm_peak(benchmark::State& s) {
  const int n = int(s.range(0));
  auto a = randn(int64_t(n) * n, 1), b = randn(int64_t(n) * n, 2);
  std::vector<float> c(int64_t(n) * n);
  for (auto _ : s)
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a.data(), n, b.data(), n,
                0.0f, c.data(), n);
  flops(s, 2.0 * n * n * n);
}
BENCHMARK(BM_sgemm_peak)->Arg(1024)->Arg(2048)->UseRealTime();

// strata's own GEMM (kernels/gemm.h), the one the model uses.
void BM_gemm_peak(benchmark::State& s) {
  const int n = int(s.range(0));
  auto a = randn(int64_t(n) * n, 1), b = randn(int64_t(n) * n, 2);
  std::vector<float> c(int64_t(n) * n);
  for (auto _ : s)
    k::gemm(k::Op::N, k::Op::N, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);
  flops(s, 2.0 * n * n * n);
}
BENCHMARK(BM_gemm_peak)->Arg(1024)->Arg(2048)->UseRealTime();

void BM_matmul_forward(benchmark::State& s) {
  const int IC = int(s.range(0)), OC = int(s.range(1));
  auto x = randn(N * IC, 3), w = randn(int64_t(OC) * IC, 4), b = randn(OC, 5);
  std::vector<float> out(N * OC);
  for (auto _ : s) k::matmul_forward(out.data(), x.data(), w.data(), b.data(), N, IC, OC);
  flops(s, 2.0 * N * IC * OC);
}
void BM_matmul_backward(benchmark::State& s) {
  const int IC = int(s.range(0)), OC = int(s.range(1));
  auto x = randn(N * IC, 3), w = randn(int64_t(OC) * IC, 4), d = randn(N * OC, 5);
  std::vector<float> dx(N * IC), dw(int64_t(OC) * IC), db(OC);
  for (auto _ : s)
    k::matmul_backward(dx.data(), dw.data(), db.data(), d.data(), x.data(), w.data(), N, IC, OC);
  flops(s, 4.0 * N * IC * OC);
}
// (C, 3C) qkv, (C, C) attn proj, (C, 4C) fc, (4C, C) fc proj, (C, V) logits
#define MATMUL_SHAPES \
  ->Args({C, 3 * C})->Args({C, C})->Args({C, 4 * C})->Args({4 * C, C})->Args({C, V})->UseRealTime()
BENCHMARK(BM_matmul_forward) MATMUL_SHAPES;
BENCHMARK(BM_matmul_backward) MATMUL_SHAPES;

// A decoding step's product (the KV cache's, rlhf/kv_cache.cc): N = 8 rows through GPT-2
// small's MLP weight (768 -> 3072), the few-rows kernel on each instruction-set level the
// CPU has (arg 2: 0 x86-64-v2, 1 v3, 2 v4) and, with arg 1 = 1, the GEMM path instead.
void BM_decode_rows(benchmark::State& s) {
  constexpr int rows = 8, IC = 768, OC = 3072;
  const auto level = k::Isa(s.range(1));
  if (!k::isa_available(level)) return s.SkipWithError("this CPU lacks the level");
  k::ScopedIsa on(level);
  auto x = randn(rows * IC, 3), w = randn(int64_t(OC) * IC, 4), b = randn(OC, 5);
  std::vector<float> out(rows * OC);
  for (auto _ : s) {
    if (s.range(0))
      k::matmul_forward(out.data(), x.data(), w.data(), b.data(), rows, IC, OC);
    else
      k::matmul_forward_rows(out.data(), x.data(), w.data(), b.data(), rows, IC, OC);
  }
  flops(s, 2.0 * rows * IC * OC);
  s.SetLabel(std::string(s.range(0) ? "gemm " : "rows ") + k::isa_name(level));
}
BENCHMARK(BM_decode_rows)->ArgsProduct({{0, 1}, {0, 1, 2}})->UseRealTime();

// A decoding step's attention (kernels::attention_decode): 8 sequences, GPT-2 small's 12
// heads of 64, one query each over a cache of 512 positions, on each level (arg 0).
void BM_decode_attention(benchmark::State& s) {
  constexpr int seqs = 8, heads = 12, hs = 64, len = 512;
  const auto level = k::Isa(s.range(0));
  if (!k::isa_available(level)) return s.SkipWithError("this CPU lacks the level");
  k::ScopedIsa on(level);
  const k::AttentionShape shape{seqs, len, heads, heads, hs};
  const int64_t row = shape.row(), cache = int64_t(seqs) * len * heads * hs;
  auto q = randn(seqs * row, 6), K = randn(cache, 7), V = randn(cache, 8);
  std::vector<float> out(seqs * heads * hs);
  for (auto _ : s) k::attention_decode(out.data(), q.data(), row, K.data(), V.data(), shape, len);
  flops(s, 4.0 * seqs * heads * hs * len);  // q·k and the weighted sum of v
  s.SetLabel(k::isa_name(level));
}
BENCHMARK(BM_decode_attention)->DenseRange(0, 2)->UseRealTime();

void BM_attention_forward(benchmark::State& s) {
  auto qkv = randn(N * 3 * C, 6);
  std::vector<float> out(N * C), lse(B * NH * T);
  for (auto _ : s) k::attention_forward(out.data(), lse.data(), qkv.data(), B, T, C, NH);
  flops(s, 2.0 * B * T * T * C);  // QK^T and PV, causal half each
}
BENCHMARK(BM_attention_forward)->UseRealTime();

void BM_attention_backward(benchmark::State& s) {
  auto qkv = randn(N * 3 * C, 6), d = randn(N * C, 7);
  std::vector<float> out(N * C), lse(B * NH * T), dqkv(N * 3 * C);
  k::attention_forward(out.data(), lse.data(), qkv.data(), B, T, C, NH);
  for (auto _ : s)
    k::attention_backward(dqkv.data(), d.data(), qkv.data(), out.data(), lse.data(), B, T, C, NH);
  flops(s, 4.0 * B * T * T * C);  // dV, dP, dQ, dK (causal half each); recompute not counted
}
BENCHMARK(BM_attention_backward)->UseRealTime();

// Grouped-query attention at 8 query heads of 32 columns (C = 256), KV heads = range(0):
// 8 is multi-head attention, 2 is GQA with groups of 4. Same flops; fewer k/v bytes.
constexpr int kGqaHeads = 8, kGqaHs = C / kGqaHeads;
void BM_gqa_attention_forward(benchmark::State& s) {
  const k::AttentionShape shape{B, T, kGqaHeads, int(s.range(0)), kGqaHs};
  auto qkv = randn(N * shape.row(), 6);
  std::vector<float> out(N * C), lse(B * kGqaHeads * T);
  for (auto _ : s) k::attention_forward(out.data(), lse.data(), qkv.data(), shape);
  flops(s, 2.0 * B * T * T * C);
}
BENCHMARK(BM_gqa_attention_forward)->Arg(kGqaHeads)->Arg(kGqaHeads / 4)->UseRealTime();

void BM_gqa_attention_backward(benchmark::State& s) {
  const k::AttentionShape shape{B, T, kGqaHeads, int(s.range(0)), kGqaHs};
  auto qkv = randn(N * shape.row(), 6), d = randn(N * C, 7);
  std::vector<float> out(N * C), lse(B * kGqaHeads * T), dqkv(N * shape.row());
  k::attention_forward(out.data(), lse.data(), qkv.data(), shape);
  for (auto _ : s)
    k::attention_backward(dqkv.data(), d.data(), qkv.data(), out.data(), lse.data(), shape);
  flops(s, 4.0 * B * T * T * C);
}
BENCHMARK(BM_gqa_attention_backward)->Arg(kGqaHeads)->Arg(kGqaHeads / 4)->UseRealTime();

void BM_layernorm_forward(benchmark::State& s) {
  auto x = randn(N * C, 8), w = randn(C, 9), b = randn(C, 10);
  std::vector<float> out(N * C), mean(N), rstd(N);
  for (auto _ : s)
    k::layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C);
}
BENCHMARK(BM_layernorm_forward)->UseRealTime();

void BM_layernorm_backward(benchmark::State& s) {
  auto x = randn(N * C, 8), w = randn(C, 9), b = randn(C, 10), d = randn(N * C, 11);
  std::vector<float> out(N * C), mean(N), rstd(N), dx(N * C), dw(C), db(C);
  k::layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C);
  for (auto _ : s)
    k::layernorm_backward(dx.data(), dw.data(), db.data(), d.data(), x.data(), w.data(),
                          mean.data(), rstd.data(), N, C);
}
BENCHMARK(BM_layernorm_backward)->UseRealTime();

void BM_gelu_forward(benchmark::State& s) {
  auto x = randn(N * 4 * C, 12);
  std::vector<float> y(N * 4 * C);
  for (auto _ : s) k::gelu_forward(y.data(), x.data(), N * 4 * C);
}
void BM_gelu_backward(benchmark::State& s) {
  auto x = randn(N * 4 * C, 12), d = randn(N * 4 * C, 13);
  for (auto _ : s) k::gelu_backward(d.data(), x.data(), d.data(), N * 4 * C);
}
BENCHMARK(BM_gelu_forward)->UseRealTime();
BENCHMARK(BM_gelu_backward)->UseRealTime();

void BM_crossentropy(benchmark::State& s) {
  auto logits = randn(N * V, 14);
  std::vector<int32_t> tgt(N);
  for (int64_t i = 0; i < N; ++i) tgt[i] = int32_t(i % V);
  std::vector<float> losses(N), lse(N), work(N * V);
  for (auto _ : s) {
    benchmark::DoNotOptimize(k::crossentropy_forward(losses.data(), lse.data(), logits.data(),
                                                     tgt.data(), nullptr, N, V, V));
    work = logits;
    k::crossentropy_backward(work.data(), lse.data(), tgt.data(), nullptr, 1.0f, N, V, V);
  }
}
BENCHMARK(BM_crossentropy)->UseRealTime();

void BM_encoder(benchmark::State& s) {
  auto wte = randn(V * C, 15), wpe = randn(T * C, 16), d = randn(N * C, 17);
  std::vector<int32_t> tok(N);
  for (int64_t i = 0; i < N; ++i) tok[i] = int32_t((i * 31) % V);
  std::vector<float> out(N * C), dwte(V * C), dwpe(T * C);
  for (auto _ : s) {
    k::encoder_forward(out.data(), tok.data(), wte.data(), wpe.data(), B, T, C);
    k::encoder_backward(dwte.data(), dwpe.data(), d.data(), tok.data(), B, T, C);
  }
}
BENCHMARK(BM_encoder)->UseRealTime();

void BM_adamw(benchmark::State& s) {
  const int64_t n = 3'300'000;  // ~tiny's parameter count
  auto p = randn(n, 18), g = randn(n, 19);
  std::vector<float> m(n), v(n);
  k::AdamWStep st;
  st.lr = 1e-4f;
  for (auto _ : s) {
    k::adamw_update(p.data(), g.data(), m.data(), v.data(), n, true, st);
    benchmark::DoNotOptimize(k::sum_squares(g.data(), n));
  }
}
BENCHMARK(BM_adamw)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
