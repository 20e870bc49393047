// Ulysses attention (model/context/context_comm.h): terms of layout.h, plus
//   cw = Cl / C   columns of the heads one rank attends to (its NH / C heads)
//   N  = B · Tl   local rows
// Forward: block j of the send buffer holds this rank's rows of rank j's heads, (B, Tl, 3, cw)
// (under grouped-query attention its q heads cw and k, v heads kw each: (B, Tl, cw + 2kw));
// after the all-to-all, block i of the receive buffer holds rank i's rows of this rank's
// heads, which go to their global positions of the head-sharded full sequence
// qkv_h (B, T, 3cw) (kept in the caller's qkv buffer, which has exactly that size).
// kernels::attention_forward then runs on NH / C heads of the whole sequence, and a second
// all-to-all returns each rank's rows of the output (B, Tl, Cl). The head-sharded output is
// kept per layer for the backward, which moves dO the same way, runs
// kernels::attention_backward and returns dq, dk, dv with one all-to-all. The head-sharded
// sequence is in global order, so documents mask it as they do one rank's.
#include <cstring>

#include "core/error.h"
#include "core/timer.h"
#include "core/trace.h"
#include "kernels/attention.h"
#include "model/context/context_comm.h"

namespace strata::model {

namespace {

// kw = Kl / C: the key (or value) columns of one rank's NKV / C key/value heads (cw without
// grouped-query attention). A q | k | v row of x is (Cl + 2Kl); of a block, (cw + 2kw).
struct UlyssesGeom {
  SeqLayout L;
  int B, Tl, C, Cl, cw, Kl, kw;
  int64_t N() const { return int64_t(B) * Tl; }
  // Full-sequence row of rank i's local row n (= b * Tl + t).
  int64_t full_row(int i, int64_t n) const {
    const int b = int(n / Tl), t = int(n % Tl);
    return int64_t(b) * L.T + L.position(i, t);
  }
  int64_t width(int k) const { return k == 3 ? Cl + 2 * Kl : Cl; }  // of an x row
  int64_t block(int k) const { return k == 3 ? cw + 2 * kw : cw; }  // of a block row
};

// Block j (N, block(k)) of `blocks` <-> rank j's heads of x (N, width(k)): of q (columns
// [j·cw, +cw)), and with k = 3 of k and v ([Cl + j·kw, +kw), [Cl + Kl + j·kw, +kw)). split
// (x -> blocks) before an all-to-all, join (blocks -> x) after one.
void move_heads(float* blocks, float* x, const UlyssesGeom& g, int k, bool split) {
  const int64_t N = g.N(), bw = g.block(k), xw = g.width(k), blk = N * bw;
#pragma omp parallel for collapse(2) schedule(static)
  for (int j = 0; j < g.C; ++j)
    for (int64_t n = 0; n < N; ++n)
      for (int w = 0; w < k; ++w) {
        const int64_t part = w == 0 ? g.cw : g.kw;
        const int64_t at_b = w == 0 ? 0 : g.cw + (w - 1) * g.kw;
        const int64_t at_x = w == 0 ? j * g.cw : g.Cl + (w - 1) * g.Kl + j * g.kw;
        float* b = blocks + j * blk + n * bw + at_b;
        float* c = x + n * xw + at_x;
        std::memcpy(split ? b : c, split ? c : b, sizeof(float) * part);
      }
}
void split_heads(float* send, const float* x, const UlyssesGeom& g, int k) {
  move_heads(send, const_cast<float*>(x), g, k, true);
}
void join_heads(float* x, const float* recv, const UlyssesGeom& g, int k) {
  move_heads(const_cast<float*>(recv), x, g, k, false);
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
  STRATA_CHECK(NH % C == 0 && NKV % C == 0, "--cp-mode ulysses: ", NH, " heads and ", NKV,
               " key/value heads on this rank must both be divisible by --cp ", C);
  const int Kl = NKV * (Cl / NH);
  const UlyssesGeom g{layout(Tl * C), B, Tl, C, Cl, Cl / C, Kl, Kl / C};
  const int64_t N = g.N();
  float* send = scratch(0, N * g.width(3));
  float* recv = scratch(1, N * g.width(3));
  if (int(saved_.size()) <= layer) saved_.resize(size_t(layer) + 1);
  if (int64_t(saved_[size_t(layer)].bytes()) < N * Cl * int64_t(sizeof(float)))
    saved_[size_t(layer)] = Buffer(MemCategory::activations, size_t(N * Cl) * sizeof(float));
  float* out_h = saved_[size_t(layer)].as<float>();  // (B, T, cw)

  split_heads(send, qkv, g, 3);
  group_.all_to_all_async(send, recv, size_t(N * g.block(3)), DType::f32)->wait();
  bytes_ += (C - 1) * N * g.block(3) * int64_t(sizeof(float));
  scatter_rows(qkv, recv, g, g.block(3));  // qkv now holds qkv_h (B, T, cw + 2kw)
  {
    TraceSpan span(tracer(), "ulysses attention fwd", "compute");
    const ComputeClock clock(*this);
    kernels::attention_forward(out_h, lse, qkv, {B, Tl * C, NH / C, NKV / C, Cl / NH}, bf16,
                               doc_start);
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
  const int Kl = NKV * (Cl / NH);
  const UlyssesGeom g{layout(Tl * C), B, Tl, C, Cl, Cl / C, Kl, Kl / C};
  const int64_t N = g.N();
  STRATA_CHECK(int(saved_.size()) > layer, "ulysses backward of layer ", layer,
               " without its forward");
  float* send = scratch(0, N * g.width(3));
  float* recv = scratch(1, N * g.width(3));
  float* dout_h = scratch(2, N * Cl);             // (B, T, cw)
  float* dqkv_h = scratch(3, N * g.width(3));     // (B, T, cw + 2kw)
  split_heads(send, dout, g, 1);
  group_.all_to_all_async(send, recv, size_t(N * g.cw), DType::f32)->wait();
  bytes_ += (C - 1) * N * g.cw * int64_t(sizeof(float));
  scatter_rows(dout_h, recv, g, g.cw);
  {
    TraceSpan span(tracer(), "ulysses attention bwd", "compute");
    const ComputeClock clock(*this);
    kernels::attention_backward(dqkv_h, dout_h, qkv, saved_[size_t(layer)].as<float>(), lse,
                                {B, Tl * C, NH / C, NKV / C, Cl / NH}, bf16, doc_start);
  }
  gather_rows(send, dqkv_h, g, g.block(3));
  group_.all_to_all_async(send, recv, size_t(N * g.block(3)), DType::f32)->wait();
  bytes_ += (C - 1) * N * g.block(3) * int64_t(sizeof(float));
  join_heads(dqkv, recv, g, 3);
}

}  // namespace strata::model
