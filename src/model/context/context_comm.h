// Context parallelism: the attention of a sequence cut over the C ranks of a cp group
// (model/context/layout.h says which tokens a rank holds). Everything else of the model is
// per token and runs on the local rows unchanged; only attention mixes positions, and this
// class computes it exactly, in one of two ways:
//
// ring (ring.cc; Liu et al. 2023, "Ring Attention"): a rank keeps its queries and passes its
//   keys and values around the ring (send to r+1, receive from r-1) in C-1 steps, each
//   overlapped with the attention of the block it holds; partial results merge by the
//   log-sum-exp rule (kernels/attention_block.h). The backward passes the key/value blocks
//   around again, with an accumulator of their gradients that travels with them and comes
//   home after the last step.
//   Bytes sent per rank, layer and micro-batch (fp32, B·Tl local rows, Cl columns):
//   forward (C-1)·2·B·Tl·Cl·4, backward twice that (K, V and dK, dV).
// ulysses (ulysses.cc; Jacobs et al. 2023, "DeepSpeed Ulysses"): an all-to-all turns the
//   sequence-sharded q, k, v (B, Tl, 3Cl) into head-sharded full sequences (B, T, 3Cl/C),
//   attention runs locally on NHl/C heads, and an all-to-all turns the output back; the
//   backward does the same with dO and dq, dk, dv.
//   Bytes sent per rank, layer and micro-batch: (C-1)/C · 4·B·Tl·Cl·4 forward (q, k, v and
//   the output) and the same backward.
// bytes() counts what this rank sent; cost/comm.h predicts the same numbers.
//
// Every call is a collective of the cp group: all cp ranks call forward and backward of the
// same layers in the same order with the same shapes.
#pragma once
#include <cstdint>
#include <vector>

#include "comm/process_group.h"
#include "core/memory.h"
#include "model/context/layout.h"

namespace strata::model {

class ContextComm {
 public:
  // group: the cp group (outlives this object).
  ContextComm(comm::ProcessGroup& group, CpOptions options);

  int size() const { return size_; }
  int rank() const { return rank_; }
  const CpOptions& options() const { return opt_; }
  comm::ProcessGroup& group() { return group_; }
  // The layout of a full sequence of T tokens over this group.
  SeqLayout layout(int T) const { return SeqLayout{opt_.chunks, size_, T}; }

  // Attention of this rank's local rows, layer `layer` (its saved state is per layer).
  // qkv (B, Tl, 3Cl): q | k | v of NH heads, each Cl / NH wide. out (B, Tl, Cl); lse (B, NH, Tl).
  // Ulysses keeps its head-sharded copies in qkv and lse (same sizes): pass the same buffers,
  // untouched, to backward. doc_start (B, T) of the whole sequence (kernels/attention.h), or
  // nullptr: each position's document start, so no attention crosses a document.
  // NKV key/value heads (grouped-query attention; 0: NH): qkv is (B, Tl, Cl + 2Kl) with
  // Kl = NKV·Cl/NH, the ring's kv blocks are (B, Tl, 2Kl) and Ulysses moves NH/C query and
  // NKV/C key/value heads to each rank.
  void forward(int layer, float* out, float* lse, float* qkv, int B, int Tl, int Cl, int NH,
               bool bf16, const int32_t* doc_start = nullptr, int NKV = 0);
  // dqkv (B, Tl, Cl + 2Kl) written; dout, out (B, Tl, Cl).
  void backward(int layer, float* dqkv, const float* dout, const float* qkv, const float* out,
                const float* lse, int B, int Tl, int Cl, int NH, bool bf16,
                const int32_t* doc_start = nullptr, int NKV = 0);

  int64_t bytes() const { return bytes_; }                 // sent by this rank so far
  // Attention arithmetic on this rank: wall time, and the calling thread's CPU time (the
  // work itself, whatever else the machine runs; all of it with one OpenMP thread).
  int64_t compute_ns() const { return compute_ns_; }
  int64_t compute_cpu_ns() const { return compute_cpu_ns_; }
  int64_t buffer_bytes() const;                            // scratch and saved state held

 private:
  void ring_forward(float* out, float* lse, const float* qkv, int B, int Tl, int Cl, int NH,
                    int NKV, bool bf16, const int32_t* doc_start);
  void ring_backward(float* dqkv, const float* dout, const float* qkv, const float* out,
                     const float* lse, int B, int Tl, int Cl, int NH, int NKV, bool bf16,
                     const int32_t* doc_start);
  void ulysses_forward(int layer, float* out, float* lse, float* qkv, int B, int Tl, int Cl,
                       int NH, int NKV, bool bf16, const int32_t* doc_start);
  void ulysses_backward(int layer, float* dqkv, const float* dout, const float* qkv,
                        const float* lse, int B, int Tl, int Cl, int NH, int NKV, bool bf16,
                        const int32_t* doc_start);
  // Scratch i holds at least n floats (grown on demand; counted as activations).
  float* scratch(int i, int64_t n);

  comm::ProcessGroup& group_;
  CpOptions opt_;
  int size_, rank_;
  // Adds the wall and thread CPU time of its scope to the attention's compute time.
  class ComputeClock {
   public:
    explicit ComputeClock(ContextComm& c);
    ~ComputeClock();

   private:
    ContextComm& c_;
    int64_t wall0_, cpu0_;
  };
  int64_t bytes_ = 0, compute_ns_ = 0, compute_cpu_ns_ = 0;
  std::vector<Buffer> scratch_;
  std::vector<Buffer> saved_;  // Ulysses: each layer's head-sharded output
};

}  // namespace strata::model
