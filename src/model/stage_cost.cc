// Layer costs and the cost-balanced split: terms in model/stage_cost.h.
#include "model/stage_cost.h"

#include <omp.h>
#include <time.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <numeric>

#include "core/error.h"
#include "core/timer.h"
#include "cost/flops.h"
#include "model/shard.h"

namespace strata::model {

LayerCosts estimate_layer_costs(const GPTConfig& cfg, int seq, bool split_backward) {
  const double C = cfg.dim, T = seq;
  auto pass = [split_backward](double fwd) {
    return split_backward ? PassCost{fwd, fwd, fwd} : PassCost{fwd, 2 * fwd, 0};
  };
  LayerCosts c;
  const cost::GptShape shape = gpt_shape(cfg);
  c.block = pass(cost::block_forward_flops_per_token(shape, T));
  c.head = pass(cost::logits_forward_flops_per_token(shape));
  c.embed = {C, C, 0};  // a lookup and an add; its gradient a scatter-add
  return c;
}

namespace {

// Seconds on this thread's CPU clock with one compute thread (what a pass costs a core,
// whatever else the machine runs meanwhile), else on the wall clock.
int64_t clock_ns(bool cpu) {
  if (!cpu) return now_ns();
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return int64_t(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

// One micro-batch through the probe's three chunks, timing every pass.
struct Probe {
  StageModel& m;
  bool split;
  bool cpu = omp_get_max_threads() == 1;
  int64_t now_ns() const { return clock_ns(cpu); }
  // Forward of chunks 0, 1, 2 in turn, each fed the previous one's output; then the backwards
  // in reverse, each fed the next one's input gradient; then the weight passes. t[pass][chunk].
  void run(double t[3][3]) {
    const size_t bytes = sizeof(float) * size_t(m.message_floats(0));
    for (int c = 0; c < 3; ++c) {
      if (c > 0) std::memcpy(m.input(c, 0), m.output(c - 1, 0), bytes);
      const int64_t t0 = now_ns();
      m.forward(c, 0);
      t[0][c] = double(now_ns() - t0) * 1e-9;
    }
    for (int c = 2; c >= 0; --c) {
      if (c < 2) std::memcpy(m.grad_input(c, 0), m.grad_output(c + 1, 0), bytes);
      const int64_t t0 = now_ns();
      if (split)
        m.backward_input(c, 0, 1.0f);
      else
        m.backward(c, 0, 1.0f);
      t[1][c] = double(now_ns() - t0) * 1e-9;
    }
    for (int c = 2; c >= 0; --c) {
      const int64_t t0 = now_ns();
      if (split) m.backward_weight(c, 0);
      t[2][c] = split ? double(now_ns() - t0) * 1e-9 : 0;
    }
  }
};

}  // namespace

LayerCosts measure_layer_costs(const GPTConfig& cfg, int batch, int seq, DType compute,
                               bool split_backward, int reps) {
  STRATA_CHECK(batch >= 1 && seq >= 1 && seq <= cfg.seq && reps >= 1,
               "layer cost probe: micro-batch ", batch, " x seq ", seq, " (max ", cfg.seq,
               "), ", reps, " repetitions");
  GPTConfig g = cfg;
  g.layers = 3;
  g.moe = {};
  StageModel m(g, {{0, 1, true, false}, {1, 2, false, false}, {2, 3, false, true}}, {1, 1, 1},
               batch, compute, split_backward);
  m.init(1);
  std::vector<int32_t> tokens(size_t(batch) * size_t(seq)), targets(tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) {
    tokens[i] = int32_t((i * 7 + 3) % size_t(g.vocab));
    targets[i] = int32_t((i * 11 + 5) % size_t(g.vocab));
  }
  m.set_inputs({{tokens.data(), targets.data(), nullptr, batch, seq}});
  Probe p{m, split_backward};
  double best[3][3], t[3][3];
  for (auto& row : best) std::fill(row, row + 3, std::numeric_limits<double>::infinity());
  for (int r = 0; r <= reps; ++r) {
    m.zero_grads();
    p.run(t);
    if (r == 0) continue;  // warm-up: first touch of the buffers, the BLAS threads
    for (int k = 0; k < 3; ++k)
      for (int c = 0; c < 3; ++c) best[k][c] = std::min(best[k][c], t[k][c]);
  }
  auto diff = [](double a, double b) { return std::max(0.0, a - b); };
  LayerCosts out;
  out.measured = true;
  out.block = {best[0][1], best[1][1], best[2][1]};
  out.embed = {diff(best[0][0], best[0][1]), diff(best[1][0], best[1][1]),
               diff(best[2][0], best[2][1])};
  out.head = {diff(best[0][2], best[0][1]), diff(best[1][2], best[1][1]),
              diff(best[2][2], best[2][1])};
  return out;
}

PassCost chunk_cost(const LayerCosts& c, const StageChunk& ch) {
  const double n = ch.end - ch.begin;
  PassCost p{n * c.block.f, n * c.block.b, n * c.block.w};
  for (const PassCost* extra : {ch.embed ? &c.embed : nullptr, ch.head ? &c.head : nullptr}) {
    if (!extra) continue;
    p.f += extra->f;
    p.b += extra->b;
    p.w += extra->w;
  }
  return p;
}

std::vector<int> balance_layers(const LayerCosts& c, int L, int VP) {
  STRATA_CHECK(VP >= 1 && VP <= L, "balance_layers: ", VP, " stages for ", L, " layers");
  // best[v][i]: the first v + 1 virtual stages hold layers [0, i); (max cost, sum of squares).
  using Score = std::pair<double, double>;
  const Score none{std::numeric_limits<double>::infinity(), 0};
  std::vector<std::vector<Score>> best(size_t(VP), std::vector<Score>(size_t(L + 1), none));
  std::vector<std::vector<int>> take(size_t(VP), std::vector<int>(size_t(L + 1), 0));
  auto cost = [&](int v, int n) {
    return n * c.block.total() + (v == 0 ? c.embed.total() : 0) +
           (v == VP - 1 ? c.head.total() : 0);
  };
  for (int i = 1; i <= L - (VP - 1); ++i) {
    const double x = cost(0, i);
    best[0][size_t(i)] = {x, x * x};
    take[0][size_t(i)] = i;
  }
  for (int v = 1; v < VP; ++v)
    for (int i = v + 1; i <= L - (VP - 1 - v); ++i)
      for (int n = 1; n <= i - v; ++n) {
        const Score& prev = best[size_t(v - 1)][size_t(i - n)];
        const double x = cost(v, n);
        const Score s{std::max(prev.first, x), prev.second + x * x};
        if (s < best[size_t(v)][size_t(i)]) best[size_t(v)][size_t(i)] = s, take[size_t(v)][size_t(i)] = n;
      }
  std::vector<int> sizes(static_cast<size_t>(VP));
  for (int v = VP - 1, i = L; v >= 0; --v) {
    sizes[size_t(v)] = take[size_t(v)][size_t(i)];
    i -= sizes[size_t(v)];
  }
  return sizes;
}

std::vector<StageChunk> split_layers(const GPTConfig& cfg, int stages, int virt,
                                     const std::vector<int>& split, const LayerCosts& costs) {
  const int L = cfg.layers, VP = stages * virt;
  STRATA_CHECK_SETTING(VP <= L, setting("pp"), " ", stages,
                       virt > 1 ? cat(" x ", setting("virtual-stages"), " ", virt) : "", " = ", VP,
                       " stages but the model has only ", L, " layers (each stage needs one)");
  std::vector<int> sizes = split;
  if (!sizes.empty()) {
    STRATA_CHECK_SETTING(int(sizes.size()) == VP, setting("pp-split"), " has ", sizes.size(),
                         " sizes but there are ", VP, " (virtual) stages");
    const int sum = std::accumulate(sizes.begin(), sizes.end(), 0);
    for (int n : sizes)
      STRATA_CHECK_SETTING(n >= 1, setting("pp-split"), ": every stage needs a layer (got ", n,
                           ")");
    STRATA_CHECK_SETTING(sum == L, setting("pp-split"), " sums to ", sum,
                         " layers but the model has ", L);
  } else {
    sizes = balance_layers(costs, L, VP);
  }
  std::vector<StageChunk> out;
  int at = 0;
  for (int n : sizes) {
    out.push_back({at, at + n, at == 0, at + n == L});
    at += n;
  }
  return out;
}

}  // namespace strata::model
