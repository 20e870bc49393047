// Ring attention (model/context/context_comm.h): terms of layout.h, plus
//   kv     a (B, Tl, 2Kl) block of one rank's keys | values, the unit that travels the ring
//          (Kl = Cl, or NKV·hs under grouped-query attention; q | k | v rows are W = Cl + 2Kl)
//   owner  the rank whose tokens the kv block held at step s belongs to: (r - s) mod C
//   dkv    the gradient of one kv block, (B, Tl, 2Kl), summed over the ranks it visited
// At step s every rank sends the block it holds to r+1 and receives the next one from r-1
// while it computes on the one it holds; the pair of chunks (query chunk i, key chunk j) is
// computed when j <= i (j == i with the causal mask, j < i in full).
// The backward's dkv of owner o starts at rank o+1 (step 1), picks up one rank's share per
// step and reaches o after step C-1. Messages between two ranks must be received in the
// order they were sent (comm/process_group.h), so each step posts the previous step's dkv
// receive before the next kv receive, which is the order in which r-1 sends them.
#include <cmath>
#include <cstring>

#include "core/timer.h"
#include "core/trace.h"
#include "kernels/attention_block.h"
#include "model/context/context_comm.h"

namespace strata::model {

namespace k = strata::kernels;

namespace {

constexpr int kTagKv = 1, kTagDkv = 2;

// The views of one rank's rows, chunk by chunk.
struct RingGeom {
  SeqLayout L;
  int B, Tl, Cl, NH, NKV, S;
  const int32_t* docs;  // (B, T) document starts of the whole sequence, or null
  k::BlockShape shape() const { return {B, NH, Cl / NH, S, S, NKV}; }
  int Kl() const { return NKV * (Cl / NH); }  // key (or value) columns
  int W() const { return Cl + 2 * Kl(); }     // a q | k | v row
  // Rows of local chunk c in a (B, Tl, width) tensor whose head block starts at column col.
  template <typename X>
  k::RowsOf<X> rows(X* base, int c, int64_t width, int64_t col) const {
    return {base + int64_t(c) * S * width + col, int64_t(Tl) * width, width};
  }
  k::Stats stats(float* base, int c) const {
    return {base + int64_t(c) * S, int64_t(NH) * Tl, Tl};
  }
  // fn(query chunk qc, key chunk kc, mask, documents) for each pair of this rank's chunks and
  // the owner's that has a visible key: key chunk id <= query chunk id (causal on the
  // diagonal), and with documents, some query row whose document starts before the key
  // chunk ends (document starts grow along the sequence: the chunk's first row has the earliest).
  template <typename Fn>
  void for_each_pair(int r, int owner, Fn&& fn) const {
    for (int qc = 0; qc < L.chunks_per_rank(); ++qc)
      for (int kc = 0; kc < L.chunks_per_rank(); ++kc) {
        const int gq = L.chunk_id(r, qc), gk = L.chunk_id(owner, kc);
        if (gk > gq) continue;
        k::DocBounds d;
        if (docs) {
          d = {docs + int64_t(gq) * S, L.T, int64_t(gk) * S};
          bool seen = false;
          for (int b = 0; b < B && !seen; ++b) seen = d.rows(b)[0] < (gk + 1) * S;
          if (!seen) continue;
        }
        fn(qc, kc, gk == gq ? k::BlockMask::causal : k::BlockMask::full, d);
      }
  }
};

// kv (N, 2Kl) <- the k | v columns of qkv (N, W).
void pack_kv(float* kv, const float* qkv, int64_t N, const RingGeom& g) {
  const int Kl = g.Kl(), W = g.W(), Cl = g.Cl;
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n)
    std::memcpy(kv + n * 2 * Kl, qkv + n * W + Cl, sizeof(float) * 2 * Kl);
}

// dst (N, 2Kl) at stride ld += src (N, 2Kl) contiguous.
void add_kv(float* dst, int64_t ld, const float* src, int64_t N, int Kl) {
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n)
    for (int j = 0; j < 2 * Kl; ++j) dst[n * ld + j] += src[n * 2 * Kl + j];
}

// Waits for one step's kv transfer. Traced: a "wait" span for the exposed part and, around
// the step's compute span, a "comm" span from the post to the end of the transfer, so the
// trace shows how much of each transfer the block computations hid.
void finish_transfer(comm::Work& sent, comm::Work& got, int64_t posted, const char* pass, int s) {
  {
    TraceSpan span(tracer(), tracer().enabled() ? cat("ring ", pass, " wait ", s) : "", "wait");
    sent.wait();
    got.wait();
  }
  if (tracer().enabled())
    tracer().add(cat("cp ring ", pass, " kv transfer ", s), "comm", posted, now_ns() - posted);
}

}  // namespace

void ContextComm::ring_forward(float* out, float* lse, const float* qkv, int B, int Tl, int Cl,
                               int NH, int NKV, bool bf16, const int32_t* doc_start) {
  const RingGeom g{layout(Tl * size_), B,   Tl, Cl, NH, NKV, layout(Tl * size_).chunk_len(),
                   doc_start};
  const int C = size_, r = rank_, Kl = g.Kl(), W = g.W();
  const int64_t N = int64_t(B) * Tl, kvn = N * 2 * Kl;
  float* kv[2] = {scratch(0, kvn), scratch(1, kvn)};
  pack_kv(kv[0], qkv, N, g);
  for (int64_t i = 0; i < N * NH; ++i) lse[i] = -INFINITY;  // (B, NH, Tl): no key seen yet
  for (int s = 0; s < C; ++s) {
    comm::WorkPtr sent, got;
    const int64_t posted = now_ns();
    if (s + 1 < C) {
      sent = group_.send_async(kv[s % 2], size_t(kvn), DType::f32, (r + 1) % C, kTagKv);
      got = group_.recv_async(kv[(s + 1) % 2], size_t(kvn), DType::f32, (r + C - 1) % C, kTagKv);
      bytes_ += kvn * int64_t(sizeof(float));
    }
    const int owner = (r + C - s) % C;
    {
      TraceSpan span(tracer(), tracer().enabled() ? cat("ring fwd step ", s) : "", "compute");
      const ComputeClock clock(*this);
      const float* blk = kv[s % 2];
      g.for_each_pair(r, owner, [&](int qc, int kc, k::BlockMask m, k::DocBounds d) {
        k::attention_block_forward(g.rows(out, qc, Cl, 0), g.stats(lse, qc),
                                   g.rows(qkv, qc, W, 0), g.rows(blk, kc, 2 * Kl, 0),
                                   g.rows(blk, kc, 2 * Kl, Kl), g.shape(), m, bf16, d);
      });
    }
    if (sent) finish_transfer(*sent, *got, posted, "fwd", s);
  }
}

void ContextComm::ring_backward(float* dqkv, const float* dout, const float* qkv,
                                const float* out, const float* lse, int B, int Tl, int Cl, int NH,
                                int NKV, bool bf16, const int32_t* doc_start) {
  const RingGeom g{layout(Tl * size_), B,   Tl, Cl, NH, NKV, layout(Tl * size_).chunk_len(),
                   doc_start};
  const int C = size_, r = rank_, Kl = g.Kl(), W = g.W();
  const int64_t N = int64_t(B) * Tl, kvn = N * 2 * Kl;
  float* kv[2] = {scratch(0, kvn), scratch(1, kvn)};
  float* dkv[2] = {scratch(2, kvn), scratch(3, kvn)};  // this step's share, sent on
  float* dkv_in = scratch(4, kvn);                      // the share of the ranks before
  float* D = scratch(5, N * NH);                        // (B, NH, Tl)
  const int next = (r + 1) % C, prev = (r + C - 1) % C;
  pack_kv(kv[0], qkv, N, g);
  std::memset(dqkv, 0, sizeof(float) * N * W);
  {
    const ComputeClock clock(*this);
    k::attention_row_dot({D, int64_t(NH) * Tl, Tl}, {dout, int64_t(Tl) * Cl, Cl},
                         {out, int64_t(Tl) * Cl, Cl}, {B, NH, Cl / NH, Tl, Tl});
  }
  comm::WorkPtr dsent[2];
  for (int s = 0; s < C; ++s) {
    comm::WorkPtr sent, got, dgot;
    const int64_t posted = now_ns();
    if (s >= 2)
      dgot = group_.recv_async(dkv_in, size_t(kvn), DType::f32, prev, kTagDkv);
    if (s + 1 < C) {
      sent = group_.send_async(kv[s % 2], size_t(kvn), DType::f32, next, kTagKv);
      got = group_.recv_async(kv[(s + 1) % 2], size_t(kvn), DType::f32, prev, kTagKv);
      bytes_ += kvn * int64_t(sizeof(float));
    }
    const int owner = (r + C - s) % C;
    // Step 0: this rank's own block; its gradient goes straight into dqkv's k | v columns.
    float* dk_base = s == 0 ? dqkv + Cl : dkv[s % 2];
    const int64_t dk_ld = s == 0 ? W : 2 * Kl;
    if (s > 0) {
      if (dsent[s % 2]) dsent[s % 2]->wait();  // the buffer of step s-2 has left
      std::memset(dk_base, 0, sizeof(float) * kvn);
    }
    {
      TraceSpan span(tracer(), tracer().enabled() ? cat("ring bwd step ", s) : "", "compute");
      const ComputeClock clock(*this);
      const float* blk = kv[s % 2];
      g.for_each_pair(r, owner, [&](int qc, int kc, k::BlockMask m, k::DocBounds d) {
        k::attention_block_backward(
            g.rows(dqkv, qc, W, 0), g.rows(dk_base, kc, dk_ld, 0),
            g.rows(dk_base, kc, dk_ld, Kl), g.rows(dout, qc, Cl, 0), g.rows(qkv, qc, W, 0),
            g.rows(blk, kc, 2 * Kl, 0), g.rows(blk, kc, 2 * Kl, Kl),
            g.stats(const_cast<float*>(lse), qc), g.stats(D, qc), g.shape(), m, bf16, d);
      });
    }
    if (s > 0) {
      if (dgot) {
        dgot->wait();
        add_kv(dk_base, 2 * Kl, dkv_in, N, Kl);
      }
      dsent[s % 2] = group_.send_async(dk_base, size_t(kvn), DType::f32, next, kTagDkv);
      bytes_ += kvn * int64_t(sizeof(float));
    }
    if (sent) finish_transfer(*sent, *got, posted, "bwd", s);
  }
  if (C > 1) {  // this rank's own block's gradient from the other C-1 ranks
    group_.recv_async(dkv_in, size_t(kvn), DType::f32, prev, kTagDkv)->wait();
    add_kv(dqkv + Cl, W, dkv_in, N, Kl);
  }
  for (comm::WorkPtr& w : dsent)
    if (w) w->wait();
}

}  // namespace strata::model
