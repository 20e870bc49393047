#include "model/expert/moe.h"

#include <cstring>
#include <optional>
#include <string>

#include "core/error.h"
#include "core/rng.h"
#include "core/trace.h"
#include "kernels/convert.h"
#include "kernels/matmul.h"
#include "model/tensor/collectives.h"

namespace strata::model::expert {

namespace {

// A trace span, built only when tracing is on: "dispatch L3", "experts L3", "combine L3".
struct Span {
  std::optional<TraceSpan> s;
  Span(const char* what, const char* pass, int layer, const char* cat) {
    if (tracer().enabled())
      s.emplace(tracer(), std::string(pass) + " " + what + " M" + std::to_string(layer), cat);
  }
};

float* grow(GrowBuf& b, int64_t n) { return b.need(n); }

}  // namespace

// What one block keeps from its forward for its backward.
struct MoE::Layer {
  int64_t N = 0;
  bool jittered = false;
  GrowBuf xin, noise, xr, logits;  // (N, C), (N, C), (N, C), (N, E)
  Routing r;
  std::vector<int64_t> off;    // (E + 1) send offsets by expert
  std::vector<int64_t> recv;   // (P, El) rows received per source and local expert
  std::unique_ptr<OwnerLayout> owner;
  GrowBuf X, H, A, R, stage;  // owner: (M, C), (M, 4C), (M, 4C); source: (S, C)
  GrowBuf Hs, As;             // the shared experts': (N, Fs or 2Fs gated), (N, Fs)
};

MoE::MoE(const MoEConfig& cfg, int layers, int C, int slots, int hidden, bool gated)
    : cfg_(cfg), C_(C), F_(cfg.expert_width(hidden > 0 ? hidden : 4 * C)), hidden_(F_),
      shared_(cfg.shared_width(hidden > 0 ? hidden : 4 * C)), Fs_(shared_), gated_(gated), slots_(slots) {
  cfg_.validate();
  STRATA_CHECK(slots >= 1, "MoE: ", slots, " activation slots (at least 1)");
  for (int i = 0; i < cfg_.moe_layers(layers) * slots; ++i) layers_.push_back(std::make_unique<Layer>());
  load_.layers = cfg_.moe_layers(layers);
  load_.E = cfg_.experts;
  load_.v.assign(size_t(load_.layers) * (2 * cfg_.experts + LoadStats::kExtra), 0.0);
  bias_.assign(size_t(load_.layers) * size_t(cfg_.experts), 0.0f);
  set_group(nullptr);
}

void MoE::set_router_bias(const std::vector<float>& bias) {
  STRATA_CHECK(bias.size() == bias_.size(), "MoE: a balancing bias of ", bias.size(), " values for ", load_.layers,
               " blocks of ", cfg_.experts, " experts");
  bias_ = bias;
}

void MoE::update_router_bias(const LoadStats& global) {
  const int E = cfg_.experts;
  STRATA_CHECK(global.layers == load_.layers && global.E == E, "MoE: load of ", global.layers, " blocks of ", global.E,
               " experts for ", load_.layers, " of ", E);
  for (int m = 0; m < load_.layers; ++m) {
    const double* wanted = global.layer(m);
    double total = 0;
    for (int e = 0; e < E; ++e) total += wanted[e];
    if (total == 0) continue;  // a block no token reached (an evaluation-only stage)
    const double mean = total / E;
    for (int e = 0; e < E; ++e) {
      const double gap = mean - wanted[e];
      bias_[size_t(m) * E + e] += float(cfg_.bias_rate) * float((gap > 0) - (gap < 0));
    }
  }
}

MoE::~MoE() = default;

MoE::Layer& MoE::layer(int m, int slot) {
  STRATA_CHECK(slot >= 0 && slot < slots_, "MoE block ", m, ": slot ", slot, " outside [0, ", slots_, ")");
  return *layers_[size_t(m * slots_ + slot)];
}

void MoE::set_group(comm::ProcessGroup* group) {
  group_ = std::make_unique<ExpertGroup>(group, cfg_.experts);
}

void MoE::set_context(comm::ProcessGroup* group) { cp_ = group && group->size() > 1 ? group : nullptr; }

void MoE::set_tensor(TensorComm* tc) {
  tp_ = tc && tc->size() > 1 ? tc : nullptr;
  const int T = tp_ ? tp_->size() : 1;
  STRATA_CHECK(hidden_ % T == 0 && shared_ % T == 0, "--tp ", T, " does not divide the experts' hidden width ",
               hidden_, shared_ > 0 ? cat(" and the shared experts' ", shared_) : "",
               cfg_.expert_ffn > 0 ? " (--expert-ffn)" : gated_ ? " (--ffn)" : " (4 x --dim)");
  F_ = hidden_ / T;
  Fs_ = shared_ / T;
}

double LoadStats::aux() const {
  double s = 0;
  for (int m = 0; m < layers; ++m) s += layer(m)[2 * E + 3];
  return s;
}
double LoadStats::z() const {
  double s = 0;
  for (int m = 0; m < layers; ++m) s += layer(m)[2 * E + 4];
  return s;
}

LoadStats MoE::take_load() {
  LoadStats out = load_;
  std::fill(load_.v.begin(), load_.v.end(), 0.0);
  return out;
}

// U(1 - j, 1 + j) from 24 random bits.
static float jitter_factor(uint32_t bits, float j) {
  const float u = float(bits >> 8) * (1.0f / 16777216.0f);
  return 1.0f - j + 2.0f * j * u;
}

// Keyed rows: element (t, c) of sample s at position p draws word c % 4 of
// Philox(key, stream = s, counter = p · 2^32 + c / 4), key = Philox(seed, stream = block,
// counter = epoch): nothing but the data and the seed, so every layout (ranks, micro-batches,
// context-parallel chunks, tp ranks that see every row) draws the same noise for a token, a
// resumed run draws what the uninterrupted one did, and each epoch draws anew. Anonymous
// rows (no ids) keep a per-process count of forwards: element i of forward n draws word 0
// of Philox(seed, stream = block, counter = n · 2^32 + i).
void MoE::draw_noise(int m, float* noise, int64_t N, const TokenIds* ids) {
  const int C = C_;
  const float jit = cfg_.jitter;
  const uint64_t seed = seed_ ^ 0x6d6f65ull;
  if (!ids) {
    const uint64_t base = counter_ * 0x100000000ull;
    for (int64_t i = 0; i < N * C; ++i)
      noise[i] = jitter_factor(philox4x32(seed, uint64_t(m), base + uint64_t(i))[0], jit);
    if (m == load_.layers - 1) ++counter_;
    return;
  }
  STRATA_CHECK(int64_t(ids->B) * ids->T == N, "MoE block ", m, ": ", N, " rows but ", ids->B,
               " x ", ids->T, " token ids");
  const auto k = philox4x32(seed, uint64_t(m), uint64_t(ids->epoch));
  const uint64_t key = (uint64_t(k[1]) << 32) | k[0];
  for (int64_t i = 0; i < N; ++i) {
    const int64_t b = i / ids->T, t = i % ids->T;
    const uint64_t stream = uint64_t(ids->sample[b]);  // a padding row (-1): 2^64 - 1
    const uint64_t pos = uint64_t(ids->position ? ids->position[t] : t);
    float* row = noise + i * C;
    for (int c = 0; c < C; c += 4) {
      const auto bits = philox4x32(key, stream, (pos << 32) | uint64_t(c / 4));
      for (int q = 0; q < 4 && c + q < C; ++q) row[c + q] = jitter_factor(bits[size_t(q)], jit);
    }
  }
}

void MoE::forward(int m, const float* x, const uint16_t* xh, float* out, int64_t N,
                  const MoEWeights& w, bool bf16, const TokenIds* ids, int slot, int64_t seq_rows) {
  Layer& L = layer(m, slot);
  const int E = cfg_.experts, K = cfg_.top_k, C = C_, F = F_;
  ExpertGroup& g = *group_;
  if (m <= last_m_) last_aux_ = last_z_ = 0;  // a new forward
  last_m_ = m;
  L.N = N;
  float* xin = grow(L.xin, N * C);
  if (xh)
    kernels::bf16_to_f32(xin, xh, N * C);
  else if (N > 0)
    std::memcpy(xin, x, sizeof(float) * N * C);
  const float* xr = xin;
  const bool jitter = training_ && cfg_.jitter > 0;
  L.jittered = jitter;
  if (jitter) {
    float* nz = grow(L.noise, N * C);
    float* j = grow(L.xr, N * C);
    draw_noise(m, nz, N, ids);
    for (int64_t i = 0; i < N * C; ++i) j[i] = xin[i] * nz[i];
    xr = j;
  }
  float* logits = grow(L.logits, N * E);
  if (N > 0) kernels::matmul_forward(logits, xr, w.router, nullptr, N, C, E);
  // Under cp a token's place in the group: b · (T · cp) + its global position, as one
  // process numbers the micro-batch's rows (rows without ids: this rank's after the lower ranks').
  std::vector<int64_t> order;
  RouteGroup group;
  if (cp_) {
    order.resize(size_t(N));
    for (int64_t i = 0; i < N; ++i)
      order[size_t(i)] = ids && ids->T > 0
                             ? (i / ids->T) * int64_t(ids->T) * cp_->size() +
                                   (ids->position ? ids->position[i % ids->T] : i % ids->T)
                             : int64_t(cp_->rank()) * N + i;
    group = {cp_, order.data()};
  }
  route(L.r, logits, N, cfg_, cp_ ? &group : nullptr, cfg_.bias_rate > 0 ? &bias_[size_t(m) * E] : nullptr,
        seq_rows);
  last_aux_ += L.r.aux;
  last_z_ += L.r.zsum;
  double* st = load_.layer(m);
  for (int e = 0; e < E; ++e) {
    st[e] += double(L.r.wanted[size_t(e)]);
    st[E + e] += double(L.r.kept[size_t(e)]);
  }
  st[2 * E] += double(L.r.dropped);
  st[2 * E + 1] += double(N);
  st[2 * E + 2] += L.r.entropy_sum;
  st[2 * E + 3] += L.r.aux;
  st[2 * E + 4] += L.r.zsum;

  L.off.assign(size_t(E + 1), 0);
  for (int e = 0; e < E; ++e) L.off[size_t(e + 1)] = L.off[size_t(e)] + L.r.kept[size_t(e)];
  const int64_t S = L.off.back();
  float* send = grow(L.R, S * C);
  for (int64_t t = 0; t < N; ++t)
    for (int k = 0; k < K; ++k) {
      const int64_t s = L.r.slot[size_t(t * K + k)];
      if (s < 0) continue;
      const int e = L.r.choice[size_t(t * K + k)];
      std::memcpy(send + (L.off[size_t(e)] + s) * C, xin + t * C, sizeof(float) * C);
    }
  {
    Span sp("dispatch", "forward", m, "ep_comm");
    L.recv = g.exchange_counts(L.r.kept);
    L.owner = std::make_unique<OwnerLayout>(L.recv, g.size(), g.local_experts());
    const int64_t M = L.owner->rows;
    float* stage = grow(L.stage, M * C);
    g.rows(send, stage, L.r.kept, L.recv, C, false);
    L.owner->to_expert_major(stage, grow(L.X, M * C), C);
  }
  const OwnerLayout& ol = *L.owner;
  const int64_t M = ol.rows;
  owned_rows_ += M;
  std::vector<int64_t> rows(size_t(g.local_experts() + 1));
  for (int e = 0; e <= g.local_experts(); ++e) rows[size_t(e)] = ol.exp[size_t(e * g.size())];
  std::vector<ExpertViews> mine(w.experts.begin() + g.first_expert(),
                                w.experts.begin() + g.first_expert() + g.local_experts());
  float* O = grow(scratch_[1], M * C);
  {
    Span sp("experts", "forward", m, "compute");
    experts_forward(mine, rows, L.X.data(), grow(L.H, M * F * (gated_ ? 2 : 1)), grow(L.A, M * F),
                    O, C, F, /*proj_bias=*/!tp_ || tp_->rank() == 0, bf16, gated_);
  }
  {
    Span sp("combine", "forward", m, "ep_comm");
    ol.to_source_major(O, L.stage.data(), C);
    g.rows(L.stage.data(), send, L.r.kept, L.recv, C, true);  // send now holds the results
  }
  for (int64_t t = 0; t < N; ++t)
    for (int k = 0; k < K; ++k) {
      const int64_t s = L.r.slot[size_t(t * K + k)];
      if (s < 0) continue;
      const float gk = L.r.gate[size_t(t * K + k)];
      const float* o = send + (L.off[size_t(L.r.choice[size_t(t * K + k)])] + s) * C;
      float* y = out + t * C;
      for (int c = 0; c < C; ++c) y[c] += gk * o[c];
    }
  if (Fs_ == 0 || N == 0) return;
  Span sp("shared", "forward", m, "compute");
  float* Os = grow(scratch_[1], N * C);
  experts_forward({w.shared}, {0, N}, xin, grow(L.Hs, N * Fs_ * (gated_ ? 2 : 1)), grow(L.As, N * Fs_), Os, C, Fs_,
                  /*proj_bias=*/!tp_ || tp_->rank() == 0, bf16, gated_);
  for (int64_t i = 0; i < N * C; ++i) out[i] += Os[i];
}

void MoE::backward(int m, const float* dout, float* dx, const MoEWeights& w,
                   const MoEWeights& gw, bool bf16, float scale, int slot) {
  Layer& L = layer(m, slot);
  const int E = cfg_.experts, K = cfg_.top_k, C = C_, F = F_;
  const int64_t N = L.N, S = L.off.back();
  ExpertGroup& g = *group_;
  const OwnerLayout& ol = *L.owner;
  const int64_t M = ol.rows;
  // d loss / d O(t, k) = g · dout[t] (source rows); d loss / d g = <dout[t], O(t, k)>.
  float* dR = grow(scratch_[0], S * C);
  std::vector<float> dgate(size_t(N * K), 0.0f);
  for (int64_t t = 0; t < N; ++t)
    for (int k = 0; k < K; ++k) {
      const int64_t s = L.r.slot[size_t(t * K + k)];
      if (s < 0) continue;
      const int64_t row = L.off[size_t(L.r.choice[size_t(t * K + k)])] + s;
      const float gk = L.r.gate[size_t(t * K + k)];
      const float *o = L.R.data() + row * C, *d = dout + t * C;
      float* dr = dR + row * C;
      double dot = 0;
      for (int c = 0; c < C; ++c) {
        dr[c] = gk * d[c];
        dot += double(d[c]) * o[c];
      }
      dgate[size_t(t * K + k)] = float(dot);
    }
  // Each tp rank's O is its partial sum over its hidden units: so is <dout, O>.
  if (tp_ && N > 0) tp_->all_reduce_sum(dgate.data(), N * K);
  float* dO = grow(scratch_[1], M * C);
  {
    Span sp("dispatch", "backward", m, "ep_comm");
    g.rows(dR, L.stage.data(), L.r.kept, L.recv, C, false);
    ol.to_expert_major(L.stage.data(), dO, C);
  }
  std::vector<int64_t> rows(size_t(g.local_experts() + 1));
  for (int e = 0; e <= g.local_experts(); ++e) rows[size_t(e)] = ol.exp[size_t(e * g.size())];
  const auto first = size_t(g.first_expert()), n = size_t(g.local_experts());
  std::vector<ExpertViews> mine(w.experts.begin() + first, w.experts.begin() + first + n);
  std::vector<ExpertViews> grads(gw.experts.begin() + first, gw.experts.begin() + first + n);
  float* dX = grow(scratch_[3], M * C);
  {
    Span sp("experts", "backward", m, "compute");
    experts_backward(mine, grads, rows, L.X.data(), L.H.data(), L.A.data(), dO,
                     grow(scratch_[2], M * F), dX, C, F, bf16, gated_,
                     gated_ ? grow(scratch_[4], 2 * M * F) : nullptr);
  }
  {
    Span sp("combine", "backward", m, "ep_comm");
    ol.to_source_major(dX, L.stage.data(), C);
    g.rows(L.stage.data(), dR, L.r.kept, L.recv, C, true);  // dR now holds d x rows
  }
  if (N > 0) std::memset(dx, 0, sizeof(float) * N * C);
  for (int64_t t = 0; t < N; ++t)
    for (int k = 0; k < K; ++k) {
      const int64_t s = L.r.slot[size_t(t * K + k)];
      if (s < 0) continue;
      const float* d = dR + (L.off[size_t(L.r.choice[size_t(t * K + k)])] + s) * C;
      float* o = dx + t * C;
      for (int c = 0; c < C; ++c) o[c] += d[c];
    }
  if (N == 0) return;
  if (Fs_ > 0) {  // the shared experts: their dO is dout itself
    Span sp("shared", "backward", m, "compute");
    float* dXs = grow(scratch_[3], N * C);
    experts_backward({w.shared}, {gw.shared}, {0, N}, L.xin.data(), L.Hs.data(), L.As.data(), dout,
                     grow(scratch_[2], N * Fs_), dXs, C, Fs_, bf16, gated_,
                     gated_ ? grow(scratch_[4], 2 * N * Fs_) : nullptr);
    for (int64_t i = 0; i < N * C; ++i) dx[i] += dXs[i];
  }
  std::vector<float> dlogits(size_t(N * E));
  route_backward(L.r, L.logits.data(), dgate.data(), scale, cfg_, dlogits.data());
  // The router's term of dx is whole on every tp rank: one of them adds it to its partial.
  const bool router_dx = !tp_ || tp_->rank() == 0;
  if (!L.jittered) {
    kernels::matmul_backward(router_dx ? dx : nullptr, gw.router, nullptr, dlogits.data(),
                             L.xin.data(), w.router, N, C, E, /*accumulate_dinp=*/true);
    return;
  }
  std::vector<float> dxr(size_t(N * C));
  kernels::matmul_backward(dxr.data(), gw.router, nullptr, dlogits.data(), L.xr.data(), w.router,
                           N, C, E, /*accumulate_dinp=*/false);
  if (router_dx)
    for (int64_t i = 0; i < N * C; ++i) dx[i] += dxr[size_t(i)] * L.noise.data()[i];
}

}  // namespace strata::model::expert
