// Ulysses attention (model/context/context_comm.h): terms of layout.h, plus
//   cw = Cl / C   columns of the heads one rank attends to (its NH / C heads)
//   N  = B · Tl   local rows
// Forward: block j of the send buffer holds this rank's rows of rank j's heads, (B, Tl, 3, cw)
// (under grouped-query attention its q heads cw and k, v heads kw each: (B, Tl, cw + 2kw));
// after the all-to-all, block i of the receive buffer holds rank i's rows of this rank's
// heads, which go to their global positions of the head-sharded full sequence
// qkv_h (B, T, 3cw) (kept in the caller's qkv buffer, which has exactly that size; with key/
// value heads shared by several cp ranks, whose blocks carry a head each, in the layer's saved
// state instead). kernels::attention_forward then runs on NH / C heads of the whole sequence,
// and a second all-to-all returns each rank's rows of the output (B, Tl, Cl). The
// head-sharded output is kept per layer for the backward, which moves dO the same way, runs
// kernels::attention_backward and returns dq, dk, dv with one all-to-all. The head-sharded
// sequence is in global order, so documents mask it as they do one rank's.
#include <cstring>

#include "core/error.h"
#include "core/timer.h"
#include "core/trace.h"
#include "cost/shapes.h"
#include "kernels/attention.h"
#include "model/context/context_comm.h"
#include "model/parallel_rules.h"

namespace strata::model {

namespace {

// kw = Kl / C: the key (or value) columns of one rank's NKV / C key/value heads (cw without
// grouped-query attention). With fewer key/value heads than cp ranks (rep = C / NKV > 1) each
// head goes to the rep ranks whose query heads share it: kw is one head's columns and their
// gradients come back summed. A q | k | v row of x is (Cl + 2Kl); of a block, (cw + 2kw).
struct UlyssesGeom {
  SeqLayout L;
  int B, Tl, C, Cl, cw, Kl, kw, rep, hs;
  int64_t N() const { return int64_t(B) * Tl; }
  // Full-sequence row of rank i's local row n (= b * Tl + t).
  int64_t full_row(int i, int64_t n) const {
    const int b = int(n / Tl), t = int(n % Tl);
    return int64_t(b) * L.T + L.position(i, t);
  }
  int64_t width(int k) const { return k == 3 ? Cl + 2 * Kl : Cl; }  // of an x row
  int64_t block(int k) const { return k == 3 ? cw + 2 * kw : cw; }  // of a block row
  // Floats of the head-sharded q | k | v (B, T, cw + 2kw): the all-to-all's C blocks.
  int64_t sharded() const { return N() * C * block(3); }
  // Where rank j's key (value) columns start within x's key (value) columns.
  int64_t kv_at(int j) const { return int64_t(j / rep) * kw; }
  int kv_heads() const { return kw / hs; }  // a rank's key/value heads in its attention
};

// rep and kw are the cost model's (cost/shapes.h), so its bytes and buffers are these.
UlyssesGeom geometry(const SeqLayout& L, int B, int Tl, int C, int Cl, int NH, int NKV) {
  const int hs = Cl / NH, Kl = NKV * hs;
  return {L, B, Tl, C, Cl, Cl / C, Kl, int(cost::ulysses_kv_columns(Kl, C, hs)),
          int(cost::tp_kv_share(NKV, C)), hs};
}

// Block j (N, block(k)) of `blocks` <-> rank j's heads of x (N, width(k)): of q (columns
// [j·cw, +cw)), and with k = 3 of k and v ([Cl + kv_at(j), +kw), [Cl + Kl + kv_at(j), +kw)).
// split (x -> blocks) before an all-to-all, join (blocks -> x) after one.
void move_heads(float* blocks, float* x, const UlyssesGeom& g, int k, bool split) {
  const int64_t N = g.N(), bw = g.block(k), xw = g.width(k), blk = N * bw;
#pragma omp parallel for collapse(2) schedule(static)
  for (int j = 0; j < g.C; ++j)
    for (int64_t n = 0; n < N; ++n)
      for (int w = 0; w < k; ++w) {
        const int64_t part = w == 0 ? g.cw : g.kw;
        const int64_t at_b = w == 0 ? 0 : g.cw + (w - 1) * g.kw;
        const int64_t at_x = w == 0 ? j * g.cw : g.Cl + (w - 1) * g.Kl + g.kv_at(j);
        float* b = blocks + j * blk + n * bw + at_b;
        float* c = x + n * xw + at_x;
        std::memcpy(split ? b : c, split ? c : b, sizeof(float) * part);
      }
}
void split_heads(float* send, const float* x, const UlyssesGeom& g, int k) {
  move_heads(send, const_cast<float*>(x), g, k, true);
}
// With shared key/value heads (rep > 1, k = 3) the rep blocks of one head add up, in rank
// order: each holds what its rank's query heads contributed to the head's gradient.
void join_heads(float* x, const float* recv, const UlyssesGeom& g, int k) {
  if (k == 1 || g.rep == 1) return move_heads(const_cast<float*>(recv), x, g, k, false);
  const int64_t N = g.N(), bw = g.block(3), xw = g.width(3), blk = N * bw;
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    float* row = x + n * xw;
    for (int j = 0; j < g.C; ++j) {
      const float* b = recv + j * blk + n * bw;
      std::memcpy(row + j * g.cw, b, sizeof(float) * size_t(g.cw));
      for (int w = 0; w < 2; ++w) {
        float* dst = row + g.Cl + w * g.Kl + g.kv_at(j);
        const float* src = b + g.cw + w * g.kw;
        if (j % g.rep == 0)
          std::memcpy(dst, src, sizeof(float) * size_t(g.kw));
        else
          for (int i = 0; i < g.kw; ++i) dst[i] += src[i];
      }
    }
  }
}

// full (B, T, width) <- recv block i (N, width) at rank i's positions, for every i.
void scatter_rows(float* full, const float* recv, const UlyssesGeom& g, int64_t width) {
  const int64_t N = g.N();
#pragma omp parallel for collapse(2) schedule(static)
  for (int i = 0; i < g.C; ++i)
    for (int64_t n = 0; n < N; ++n)
      std::memcpy(full + g.full_row(i, n) * width, recv + (i * N + n) * width,
                  sizeof(float) * width);
}

// send block i (N, width) <- rank i's positions of full (B, T, width).
void gather_rows(float* send, const float* full, const UlyssesGeom& g, int64_t width) {
  const int64_t N = g.N();
#pragma omp parallel for collapse(2) schedule(static)
  for (int i = 0; i < g.C; ++i)
    for (int64_t n = 0; n < N; ++n)
      std::memcpy(send + (i * N + n) * width, full + g.full_row(i, n) * width,
                  sizeof(float) * width);
}

}  // namespace

void ContextComm::ulysses_forward(int layer, float* out, float* lse, float* qkv, int B, int Tl,
                                  int Cl, int NH, int NKV, bool bf16, const int32_t* doc_start) {
  const int C = size_;
  STRATA_CHECK_SETTING(
      NH % C == 0 && splits_kv_heads(NKV, C), setting("cp-mode"), " ulysses: ", NH, " heads and ",
      NKV, " key/value heads on this rank: ", setting("cp"), " ", C,
      " must divide the heads, and divide or be a multiple of the key/value heads");
  const UlyssesGeom g = geometry(layout(Tl * C), B, Tl, C, Cl, NH, NKV);
  const int64_t N = g.N();
  float* send = scratch(0, g.sharded());
  float* recv = scratch(1, g.sharded());
  // Kept for the backward: the head-sharded output (B, T, cw) and, with shared key/value
  // heads (whose q | k | v rows outgrow the caller's qkv), the head-sharded qkv.
  const int64_t keep = N * Cl + (g.rep > 1 ? g.sharded() : 0);
  if (int(saved_.size()) <= layer) saved_.resize(size_t(layer) + 1);
  if (int64_t(saved_[size_t(layer)].bytes()) < keep * int64_t(sizeof(float)))
    saved_[size_t(layer)] = Buffer(MemCategory::activations, size_t(keep) * sizeof(float));
  float* out_h = saved_[size_t(layer)].as<float>();        // (B, T, cw)
  float* qkv_h = g.rep > 1 ? out_h + N * Cl : qkv;           // (B, T, cw + 2kw)

  split_heads(send, qkv, g, 3);
  group_.all_to_all_async(send, recv, size_t(N * g.block(3)), DType::f32)->wait();
  bytes_ += (C - 1) * N * g.block(3) * int64_t(sizeof(float));
  scatter_rows(qkv_h, recv, g, g.block(3));
  {
    TraceSpan span(tracer(), "ulysses attention fwd", "compute");
    const ComputeClock clock(*this);
    const kernels::AttentionShape shape{B, Tl * C, NH / C, g.kv_heads(), Cl / NH};
    kernels::attention_forward(out_h, lse, qkv_h, shape, bf16, doc_start);
  }
  gather_rows(send, out_h, g, g.cw);
  group_.all_to_all_async(send, recv, size_t(N * g.cw), DType::f32)->wait();
  bytes_ += (C - 1) * N * g.cw * int64_t(sizeof(float));
  join_heads(out, recv, g, 1);
}

void ContextComm::ulysses_backward(int layer, float* dqkv, const float* dout, const float* qkv,
                                   const float* lse, int B, int Tl, int Cl, int NH, int NKV, bool bf16,
                                   const int32_t* doc_start) {
  const int C = size_;
  const UlyssesGeom g = geometry(layout(Tl * C), B, Tl, C, Cl, NH, NKV);
  const int64_t N = g.N();
  STRATA_CHECK(int(saved_.size()) > layer, "ulysses backward of layer ", layer,
               " without its forward");
  const float* out_h = saved_[size_t(layer)].as<float>();
  const float* qkv_h = g.rep > 1 ? out_h + N * Cl : qkv;
  float* send = scratch(0, g.sharded());
  float* recv = scratch(1, g.sharded());
  float* dout_h = scratch(2, N * Cl);        // (B, T, cw)
  float* dqkv_h = scratch(3, g.sharded());   // (B, T, cw + 2kw)
  split_heads(send, dout, g, 1);
  group_.all_to_all_async(send, recv, size_t(N * g.cw), DType::f32)->wait();
  bytes_ += (C - 1) * N * g.cw * int64_t(sizeof(float));
  scatter_rows(dout_h, recv, g, g.cw);
  {
    TraceSpan span(tracer(), "ulysses attention bwd", "compute");
    const ComputeClock clock(*this);
    const kernels::AttentionShape shape{B, Tl * C, NH / C, g.kv_heads(), Cl / NH};
    kernels::attention_backward(dqkv_h, dout_h, qkv_h, out_h, lse, shape, bf16, doc_start);
  }
  gather_rows(send, dqkv_h, g, g.block(3));
  group_.all_to_all_async(send, recv, size_t(N * g.block(3)), DType::f32)->wait();
  bytes_ += (C - 1) * N * g.block(3) * int64_t(sizeof(float));
  join_heads(dqkv, recv, g, 3);
}

}  // namespace strata::model
