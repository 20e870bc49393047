// Whole-model timing: one GPT forward+backward (and a full step with AdamW) at a fixed
// (B, T), reporting tokens/s and model GFLOP/s (6N + 12*L*d*T per token, cost/flops.h).
// Compare with bench/kernels/torch_step.py at the same thread count.
//   OMP_NUM_THREADS=2 build/bench/bench_gpt --benchmark_filter=tiny
#include <benchmark/benchmark.h>

#include <string>
#include <vector>

#include "core/rng.h"
#include "cost/flops.h"
#include "kernels/adamw.h"
#include "model/gpt.h"
#include "model/shard.h"

namespace {

using strata::model::GPT;
using strata::model::GPTConfig;

struct Setup {
  GPT model;
  std::vector<int32_t> tokens, targets;
  std::vector<float> m, v;
  Setup(const GPTConfig& c, int B, strata::DType compute = strata::DType::f32)
      : model(c, B, true, nullptr, compute) {
    model.init(1);
    strata::Rng r(7, 0);
    const int64_t n = int64_t(B) * c.seq;
    tokens.resize(n);
    targets.resize(n);
    for (int64_t i = 0; i < n; ++i) tokens[i] = int32_t(r.below(c.vocab));
    for (int64_t i = 0; i < n; ++i) targets[i] = int32_t(r.below(c.vocab));
    m.assign(model.num_params(), 0.0f);
    v.assign(model.num_params(), 0.0f);
  }
};

void report(benchmark::State& state, const GPTConfig& c, int B) {
  const double tokens = double(state.iterations()) * B * c.seq;
  const double fpt = strata::cost::model_flops_per_token(strata::model::gpt_shape(c), c.seq);  // as the trainer's MFU
  state.counters["tok/s"] = benchmark::Counter(tokens, benchmark::Counter::kIsRate);
  state.counters["GFLOP/s"] = benchmark::Counter(tokens * fpt * 1e-9, benchmark::Counter::kIsRate);
}

void BM_train_step(benchmark::State& state, const char* preset, bool optimizer) {
  const GPTConfig c = GPTConfig::preset(preset);
  const int B = int(state.range(0));
  Setup s(c, B);
  int64_t t = 0;
  for (auto _ : state) {
    s.model.zero_grads();
    const double loss = s.model.forward(s.tokens.data(), s.targets.data(), nullptr, B, c.seq);
    s.model.backward(float(1.0 / (double(B) * c.seq)));
    benchmark::DoNotOptimize(loss);
    if (optimizer) {
      strata::kernels::AdamWStep st;
      st.lr = 1e-4f;
      st.t = ++t;
      for (const auto& r :
           strata::model::decay_ranges(s.model.param_table(), 0, s.model.num_params()))
        strata::kernels::adamw_update(s.model.params() + r.begin, s.model.grads() + r.begin,
                                      s.m.data() + r.begin, s.v.data() + r.begin, r.end - r.begin,
                                      r.decay, st);
    }
  }
  report(state, c, B);
}

// "tiny", "small", or "L12": 12 layers, dim 768, 12 heads, seq 256, vocab 256.
GPTConfig config(const char* name) {
  if (std::string(name) == "L12")
    return GPTConfig{strata::model::Arch::gpt2, 12, 768, 12, 0, 0, 256, 256, 256, 1e-5f, 10000.0f,
                     true, {}, {}};
  return GPTConfig::preset(name);
}

// One forward+backward in fp32 or bf16 compute (kernels::gemm_bf16 on the CPU's path).
void BM_fwd_bwd(benchmark::State& state, const char* model, bool bf16) {
  const GPTConfig c = config(model);
  const int B = int(state.range(0));
  Setup s(c, B, bf16 ? strata::DType::bf16 : strata::DType::f32);
  auto step = [&] {
    s.model.zero_grads();
    benchmark::DoNotOptimize(s.model.forward(s.tokens.data(), s.targets.data(), nullptr, B, c.seq));
    s.model.backward(float(1.0 / (double(B) * c.seq)));
  };
  // Two untimed steps first, as torch_step.py does: the first touches every buffer and
  // creates oneDNN's primitives; a 2 s step would otherwise be timed once, cold.
  step();
  step();
  for (auto _ : state) step();
  report(state, c, B);
}

void BM_forward(benchmark::State& state, const char* preset) {
  const GPTConfig c = GPTConfig::preset(preset);
  const int B = int(state.range(0));
  Setup s(c, B);
  for (auto _ : state)
    benchmark::DoNotOptimize(s.model.forward(s.tokens.data(), s.targets.data(), nullptr, B, c.seq));
  state.counters["tok/s"] =
      benchmark::Counter(double(state.iterations()) * B * c.seq, benchmark::Counter::kIsRate);
}

BENCHMARK_CAPTURE(BM_forward, tiny, "tiny")->Arg(8)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_train_step, tiny_fwd_bwd, "tiny", false)
    ->Arg(8)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_train_step, tiny_step, "tiny", true)
    ->Arg(8)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_train_step, small_step, "small", true)
    ->Arg(8)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

BENCHMARK_CAPTURE(BM_fwd_bwd, tiny_fp32, "tiny", false)->Arg(8)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_fwd_bwd, tiny_bf16, "tiny", true)->Arg(8)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_fwd_bwd, L12_fp32, "L12", false)->Arg(4)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_fwd_bwd, L12_bf16, "L12", true)->Arg(4)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
