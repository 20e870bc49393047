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

// The dense MLP's width the experts default to: `hidden`, or (0) GPT-2's rule.
int dense_width(int hidden, int C) { return hidden > 0 ? hidden : int(cost::default_ffn(false, C)); }

}  // namespace

// What one block keeps from its forward for its backward.
struct MoE::Layer {
  int64_t N = 0;
  bool jittered = false;
  GrowBuf xin, noise, xr, logits;  // (N, C), (N, C), (N, C), (N, E)
  Routing r;
  // As a source: the rows it sends, one per (token, owner rank) with a kept assignment there,
  // owner-major and in token order (one rank: row t is token t). tok[j] is row j's token and
  // ks[j·K + i] the k of its i-th assignment at that owner (in k order; -1 after the last).
  std::vector<int64_t> sent;  // (P) rows to each owner
  std::vector<int64_t> tok;   // (U)
  std::vector<int32_t> ks;    // (U, K)
  // As an owner: the rows received from each source and where each one's assignments lie in
  // the expert-major batch X / O (-1 after the last), with their gates.
  std::vector<int64_t> got;   // (P) rows received per source
  std::vector<int64_t> pos;   // (R, K)
  std::vector<float> gate;    // (R, K)
  std::vector<int64_t> rows;  // (El + 1) expert-major offsets of each local expert
  GrowBuf X, H, A, O;         // owner, expert-major: (M, C), (M, F or 2F), (M, F), (M, C)
  GrowBuf Hs, As;             // the shared experts': (N, Fs or 2Fs gated), (N, Fs)
  int64_t M() const { return rows.back(); }
  int64_t R() const { return int64_t(pos.size()) / std::max<int64_t>(1, r.K); }
};

MoE::MoE(const MoEConfig& cfg, int layers, int C, int slots, int hidden, bool gated)
    : cfg_(cfg), C_(C), F_(cfg.expert_width(dense_width(hidden, C))), hidden_(F_),
      shared_(cfg.shared_width(dense_width(hidden, C))), Fs_(shared_), gated_(gated), slots_(slots) {
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
  STRATA_CHECK_SETTING(hidden_ % T == 0 && shared_ % T == 0, setting("tp"), " ", T,
                       " does not divide the experts' hidden width ", hidden_,
                       shared_ > 0 ? cat(" and the shared experts' ", shared_) : "", " (",
                       cfg_.expert_ffn > 0 ? setting("expert-ffn")
                       : gated_            ? setting("ffn")
                                           : cat("4 x ", setting("dim")),
                       ")");
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

// x (or xh) into L.xin (fp32); the router's input: xin, or in training under jitter xin times
// the rows' noise (kept in L.xr, L.noise for the backward).
const float* MoE::router_input(int m, Layer& L, const float* x, const uint16_t* xh, const TokenIds* ids) {
  const int64_t N = L.N, C = C_;
  float* xin = grow(L.xin, N * C);
  if (xh)
    kernels::bf16_to_f32(xin, xh, N * C);
  else if (N > 0)
    std::memcpy(xin, x, sizeof(float) * N * C);
  L.jittered = training_ && cfg_.jitter > 0;
  if (!L.jittered) return xin;
  float* nz = grow(L.noise, N * C);
  float* j = grow(L.xr, N * C);
  draw_noise(m, nz, N, ids);
  for (int64_t i = 0; i < N * C; ++i) j[i] = xin[i] * nz[i];
  return j;
}

// Block m's routing of one forward into the losses and the load since the last take.
void MoE::record_load(int m, const Routing& r) {
  const int E = cfg_.experts;
  last_aux_ += r.aux;
  last_z_ += r.zsum;
  double* st = load_.layer(m);
  for (int e = 0; e < E; ++e) {
    st[e] += double(r.wanted[size_t(e)]);
    st[E + e] += double(r.kept[size_t(e)]);
  }
  st[2 * E] += double(r.dropped);
  st[2 * E + 1] += double(r.N);
  st[2 * E + 2] += r.entropy_sum;
  st[2 * E + 3] += r.aux;
  st[2 * E + 4] += r.zsum;
}

void MoE::forward(int m, const float* x, const uint16_t* xh, float* out, int64_t N,
                  const MoEWeights& w, bool bf16, const TokenIds* ids, int slot, int64_t seq_rows) {
  Layer& L = layer(m, slot);
  const int E = cfg_.experts, K = cfg_.top_k, C = C_, F = F_;
  ExpertGroup& g = *group_;
  if (m <= last_m_) last_aux_ = last_z_ = 0;  // a new forward
  last_m_ = m;
  L.N = N;
  const float* xr = router_input(m, L, x, xh, ids);
  const float* xin = L.xin.data();
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
  record_load(m, L.r);

  dispatch(m, L, xin, C);
  const int64_t M = L.M(), R = L.R();
  owned_rows_ += M;
  std::vector<ExpertViews> mine(w.experts.begin() + g.first_expert(),
                                w.experts.begin() + g.first_expert() + g.local_experts());
  float* O = grow(L.O, M * C);
  {
    Span sp("experts", "forward", m, "compute");
    experts_forward(mine, L.rows, L.X.data(), grow(L.H, M * F * (gated_ ? 2 : 1)), grow(L.A, M * F), O, C, F,
                    /*proj_bias=*/!tp_ || tp_->rank() == 0, bf16, gated_);
  }
  // Each received row's gate-weighted sum of its experts' outputs (one rank: into out itself).
  const bool local = g.size() == 1;
  float* Y = local ? out : grow(scratch_[2], R * C);
  if (!local && R > 0) std::memset(Y, 0, sizeof(float) * size_t(R * C));
  for (int64_t j = 0; j < R; ++j)
    for (int i = 0; i < K && L.pos[size_t(j * K + i)] >= 0; ++i) {
      const float gk = L.gate[size_t(j * K + i)];
      const float* o = O + L.pos[size_t(j * K + i)] * C;
      float* y = Y + j * C;
      for (int c = 0; c < C; ++c) y[c] += gk * o[c];
    }
  if (!local) {
    Span sp("combine", "forward", m, "ep_comm");
    const int64_t U = int64_t(L.tok.size());
    float* back = grow(scratch_[3], U * C);
    group_->to_peers(Y, L.got, back, L.sent, C, DType::f32);
    for (int64_t j = 0; j < U; ++j) {
      float* y = out + L.tok[size_t(j)] * C;
      const float* b = back + j * C;
      for (int c = 0; c < C; ++c) y[c] += b[c];
    }
  }
  if (Fs_ == 0 || N == 0) return;
  Span sp("shared", "forward", m, "compute");
  float* Os = grow(scratch_[1], N * C);
  experts_forward({w.shared}, {0, N}, xin, grow(L.Hs, N * Fs_ * (gated_ ? 2 : 1)), grow(L.As, N * Fs_), Os, C, Fs_,
                  /*proj_bias=*/!tp_ || tp_->rank() == 0, bf16, gated_);
  for (int64_t i = 0; i < N * C; ++i) out[i] += Os[i];
}

// The source's rows of L.r's kept assignments: one per (token, owner rank), owner-major and
// in token order (one rank: row t is token t), with the k of each of its assignments there.
void MoE::source_rows(Layer& L, int P, int El) {
  const int K = cfg_.top_k;
  const Routing& r = L.r;
  const int64_t N = L.N;
  L.sent.assign(size_t(P), 0);
  std::vector<int64_t> first(static_cast<size_t>(P) + 1, 0);  // each owner's first row
  if (P == 1) {
    L.sent[0] = N;
  } else {
    std::vector<int64_t> last(static_cast<size_t>(P), -1);  // the token of each owner's newest row
    for (int64_t t = 0; t < N; ++t)
      for (int k = 0; k < K; ++k) {
        if (r.slot[size_t(t * K + k)] < 0) continue;
        const int q = r.choice[size_t(t * K + k)] / El;
        if (last[size_t(q)] != t) last[size_t(q)] = t, ++L.sent[size_t(q)];
      }
  }
  for (int q = 0; q < P; ++q) first[size_t(q + 1)] = first[size_t(q)] + L.sent[size_t(q)];
  const int64_t U = first.back();
  L.tok.assign(size_t(U), -1);
  L.ks.assign(size_t(U * K), -1);
  {
    std::vector<int64_t> at(first.begin(), first.end() - 1), row(static_cast<size_t>(P), -1);
    std::vector<int> n(static_cast<size_t>(U), 0);
    for (int64_t t = 0; t < N; ++t)
      for (int k = 0; k < K; ++k) {
        if (r.slot[size_t(t * K + k)] < 0) continue;
        const int q = r.choice[size_t(t * K + k)] / El;
        int64_t& j = row[size_t(q)];
        if (P == 1) j = t;
        else if (j < 0 || L.tok[size_t(j)] != t) j = at[size_t(q)]++;
        L.tok[size_t(j)] = t;
        L.ks[size_t(j * K + n[size_t(j)]++)] = k;
      }
    if (P == 1)
      for (int64_t t = 0; t < N; ++t) L.tok[size_t(t)] = t;
  }
}

// The source's rows to the owners and, as an owner, the received rows placed into the
// expert-major batch X (one rank: straight from xin).
void MoE::dispatch(int m, Layer& L, const float* xin, int C) {
  const int K = cfg_.top_k;
  ExpertGroup& g = *group_;
  const int P = g.size(), El = g.local_experts();
  const Routing& r = L.r;
  const int64_t N = L.N;
  source_rows(L, P, El);
  const int64_t U = int64_t(L.tok.size());
  Span sp("dispatch", "forward", m, "ep_comm");
  const OwnerLayout ol(g.exchange_counts(r.kept), P, El);
  L.rows.resize(size_t(El + 1));
  for (int e = 0; e <= El; ++e) L.rows[size_t(e)] = ol.exp[size_t(e * P)];
  L.got = P == 1 ? L.sent : g.exchange_peer_counts(L.sent);
  int64_t R = 0;
  for (int64_t c : L.got) R += c;
  L.pos.assign(size_t(R * K), -1);
  L.gate.assign(size_t(R * K), 0.0f);
  const float* xrow = xin;  // the received rows (one rank: the tokens)
  if (P == 1) {
    for (int64_t t = 0; t < N; ++t)
      for (int i = 0; i < K && L.ks[size_t(t * K + i)] >= 0; ++i) {
        const int64_t a = t * K + L.ks[size_t(t * K + i)];
        L.pos[size_t(t * K + i)] = ol.exp[size_t(r.choice[size_t(a)])] + r.slot[size_t(a)];
        L.gate[size_t(t * K + i)] = r.gate[size_t(a)];
      }
  } else {
    // Each row's assignments as (local expert << 40 | slot) with their gates, and the rows.
    std::vector<int64_t> code(static_cast<size_t>(U * K), -1), code_in(size_t(R * K));
    std::vector<float> gates(static_cast<size_t>(U * K), 0.0f);
    float* send = grow(scratch_[0], U * C);
    for (int64_t j = 0; j < U; ++j) {
      const int64_t t = L.tok[size_t(j)];
      std::memcpy(send + j * C, xin + t * C, sizeof(float) * size_t(C));
      for (int i = 0; i < K && L.ks[size_t(j * K + i)] >= 0; ++i) {
        const int64_t a = t * K + L.ks[size_t(j * K + i)];
        code[size_t(j * K + i)] = (int64_t(r.choice[size_t(a)] % El) << 40) | r.slot[size_t(a)];
        gates[size_t(j * K + i)] = r.gate[size_t(a)];
      }
    }
    float* in = grow(scratch_[1], R * C);
    g.to_peers(code.data(), L.sent, code_in.data(), L.got, K, DType::i64);
    g.to_peers(gates.data(), L.sent, L.gate.data(), L.got, K, DType::f32);
    g.to_peers(send, L.sent, in, L.got, C, DType::f32);
    int64_t j = 0;
    for (int s = 0; s < P; ++s)
      for (int64_t end = j + L.got[size_t(s)]; j < end; ++j)
        for (int i = 0; i < K && code_in[size_t(j * K + i)] >= 0; ++i) {
          const int64_t c = code_in[size_t(j * K + i)];
          L.pos[size_t(j * K + i)] = ol.exp[size_t((c >> 40) * P + s)] + (c & ((int64_t(1) << 40) - 1));
        }
    xrow = in;
    g.add_rows(U);
  }
  float* X = grow(L.X, ol.rows * C);
  for (int64_t j = 0; j < R; ++j)
    for (int i = 0; i < K && L.pos[size_t(j * K + i)] >= 0; ++i)
      std::memcpy(X + L.pos[size_t(j * K + i)] * C, xrow + j * C, sizeof(float) * size_t(C));
}

void MoE::backward(int m, const float* dout, float* dx, const MoEWeights& w,
                   const MoEWeights& gw, bool bf16, float scale, int slot) {
  Layer& L = layer(m, slot);
  const int K = cfg_.top_k, C = C_;
  const int64_t N = L.N, R = L.R(), U = int64_t(L.tok.size());
  ExpertGroup& g = *group_;
  const bool local = g.size() == 1;
  // The owners' rows of d loss / d out (one rank: dout itself).
  const float* d = dout;
  if (!local) {
    Span sp("dispatch", "backward", m, "ep_comm");
    float* send = grow(scratch_[0], U * C);
    for (int64_t j = 0; j < U; ++j)
      std::memcpy(send + j * C, dout + L.tok[size_t(j)] * C, sizeof(float) * size_t(C));
    float* in = grow(scratch_[1], R * C);
    g.to_peers(send, L.sent, in, L.got, C, DType::f32);
    d = in;
  }
  std::vector<float> dg(static_cast<size_t>(R * K), 0.0f);
  const float* Z = owner_backward(m, L, d, w, gw, bf16, dg.data());
  const float* back = Z;
  std::vector<float> dg_back;
  if (!local) {
    Span sp("combine", "backward", m, "ep_comm");
    float* b = grow(scratch_[7], U * C);
    g.to_peers(Z, L.got, b, L.sent, C, DType::f32);
    dg_back.resize(size_t(U * K));
    g.to_peers(dg.data(), L.got, dg_back.data(), L.sent, K, DType::f32);
    back = b;
  }
  const std::vector<float>& dgr = local ? dg : dg_back;
  std::vector<float> dgate(static_cast<size_t>(N * K), 0.0f);
  if (N > 0) std::memset(dx, 0, sizeof(float) * N * C);
  for (int64_t j = 0; j < U; ++j) {
    const int64_t t = L.tok[size_t(j)];
    for (int i = 0; i < K && L.ks[size_t(j * K + i)] >= 0; ++i)
      dgate[size_t(t * K + L.ks[size_t(j * K + i)])] = dgr[size_t(j * K + i)];
    float* o = dx + t * C;
    const float* b = back + j * C;
    for (int c = 0; c < C; ++c) o[c] += b[c];
  }
  if (tp_ && N > 0) tp_->all_reduce_sum(dgate.data(), N * K);
  if (N == 0) return;
  if (Fs_ > 0) {  // the shared experts: their dO is dout itself
    Span sp("shared", "backward", m, "compute");
    float* dXs = grow(scratch_[3], N * C);
    experts_backward({w.shared}, {gw.shared}, {0, N}, L.xin.data(), L.Hs.data(), L.As.data(), dout,
                     grow(scratch_[2], N * Fs_), dXs, C, Fs_, bf16, gated_,
                     gated_ ? grow(scratch_[4], 2 * N * Fs_) : nullptr);
    for (int64_t i = 0; i < N * C; ++i) dx[i] += dXs[i];
  }
  router_backward(L, dgate, dx, w, gw, scale);
}

// As an owner: from the received rows d of d loss / d out, its experts' gradients, each row's
// sum of its assignments' d x rows (returned, R rows) and its gates' gradients dg (R, K).
const float* MoE::owner_backward(int m, const Layer& L, const float* d, const MoEWeights& w, const MoEWeights& gw,
                                 bool bf16, float* dg) {
  const int K = cfg_.top_k, C = C_, F = F_;
  const int64_t M = L.M(), R = L.R();
  const ExpertGroup& g = *group_;
  // d loss / d O(a) = g · d[row]; d loss / d g = <d[row], O(a)> (each tp rank's O is its partial
  // sum over its hidden units: so is the dot, summed over tp below).
  float* dO = grow(scratch_[5], M * C);
  for (int64_t j = 0; j < R; ++j)
    for (int i = 0; i < K && L.pos[size_t(j * K + i)] >= 0; ++i) {
      const int64_t p = L.pos[size_t(j * K + i)];
      const float gk = L.gate[size_t(j * K + i)];
      const float *o = L.O.data() + p * C, *dj = d + j * C;
      float* dr = dO + p * C;
      double dot = 0;
      for (int c = 0; c < C; ++c) {
        dr[c] = gk * dj[c];
        dot += double(dj[c]) * o[c];
      }
      dg[size_t(j * K + i)] = float(dot);
    }
  const auto first = size_t(g.first_expert()), n = size_t(g.local_experts());
  std::vector<ExpertViews> mine(w.experts.begin() + first, w.experts.begin() + first + n);
  std::vector<ExpertViews> grads(gw.experts.begin() + first, gw.experts.begin() + first + n);
  float* dX = grow(scratch_[3], M * C);
  {
    Span sp("experts", "backward", m, "compute");
    experts_backward(mine, grads, L.rows, L.X.data(), L.H.data(), L.A.data(), dO, grow(scratch_[2], M * F), dX, C, F,
                     bf16, gated_, gated_ ? grow(scratch_[4], 2 * M * F) : nullptr);
  }
  // Each row's sum of its assignments' d x rows, back to the sources with the gates' gradients.
  float* Z = grow(scratch_[6], R * C);
  if (R > 0) std::memset(Z, 0, sizeof(float) * size_t(R * C));
  for (int64_t j = 0; j < R; ++j)
    for (int i = 0; i < K && L.pos[size_t(j * K + i)] >= 0; ++i) {
      const float* s = dX + L.pos[size_t(j * K + i)] * C;
      float* z = Z + j * C;
      for (int c = 0; c < C; ++c) z[c] += s[c];
    }
  return Z;
}

// The router's gradients from the gates' (dgate), the balance and z losses': its weight's
// gradient, and its term of dx (whole on every tp rank: one of them adds it to its partial).
void MoE::router_backward(const Layer& L, const std::vector<float>& dgate, float* dx, const MoEWeights& w,
                          const MoEWeights& gw, float scale) {
  const int64_t N = L.N, C = C_;
  const int E = cfg_.experts;
  std::vector<float> dlogits(static_cast<size_t>(N * E));
  route_backward(L.r, L.logits.data(), dgate.data(), scale, cfg_, dlogits.data());
  const bool router_dx = !tp_ || tp_->rank() == 0;
  if (!L.jittered) {
    kernels::matmul_backward(router_dx ? dx : nullptr, gw.router, nullptr, dlogits.data(),
                             L.xin.data(), w.router, N, C, E, /*accumulate_dinp=*/true);
    return;
  }
  std::vector<float> dxr(static_cast<size_t>(N * C));
  kernels::matmul_backward(dxr.data(), gw.router, nullptr, dlogits.data(), L.xr.data(), w.router,
                           N, C, E, /*accumulate_dinp=*/false);
  if (router_dx)
    for (int64_t i = 0; i < N * C; ++i) dx[i] += dxr[size_t(i)] * L.noise.data()[i];
}

}  // namespace strata::model::expert
