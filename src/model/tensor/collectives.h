// The communication of tensor and sequence parallelism, apart from the maths (picotron's
// tp_communications.py). Megatron-LM (Shoeybi et al. 2019) names two conjugate operators:
//
//   f  before a column-parallel GEMM:  forward identity,    backward all-reduce
//   g  after a row-parallel GEMM:      forward all-reduce,  backward identity
//
// With sequence parallelism (Korthikanti et al. 2022) the regions between them (norms,
// residuals) hold rows/T of the N = B·seq rows per rank, and the pair becomes
//
//   f  forward all-gather along rows,      backward reduce-scatter along rows
//   g  forward reduce-scatter along rows,  backward all-gather along rows
//
// so the two functions below are the whole vocabulary: gather_rows is f's forward and g's
// backward, reduce_rows is g's forward and f's backward. Without SP, gather_rows is the
// identity (returns its input) and reduce_rows an all-reduce. Rows are split as contiguous
// blocks of N/T (rank r holds rows [rN/T, (r+1)N/T)); the caller checks seq % T == 0.
//
// Every call is a collective of the tp group (same order on every tp rank). They run on the
// group's communication thread, so a trace shows them on the track "comm <group name>".
// bytes() counts the payload of every call: the full (N, C) tensor of an all-gather or
// reduce-scatter, the buffer of an all-reduce, 4 bytes per element (the step engine takes
// the difference over a step's forward and backward; the planner predicts the same number,
// cost/comm.h).
// Cost per call of (N, C) fp32 over T ranks (ring): (T-1)/T · 4NC bytes on each rank's link,
// twice that for an all-reduce.
#pragma once
#include <cstdint>
#include <memory>

#include "comm/process_group.h"

namespace strata::model {

class TensorComm {
 public:
  // group: the tensor-parallel group (outlives this object); sp: sequence parallelism;
  // kv_share: how many consecutive tp ranks hold each key/value head (cost::tp_kv_share; 1:
  // whole heads split). Above 1 the constructor splits `group` into those sets (a collective
  // over it) for sum_shared_kv.
  TensorComm(comm::ProcessGroup& group, bool sequence_parallel, int kv_share = 1);
  // One rank, no group: every call is local (gather_rows returns its input, reduce_rows
  // copies), so a model without tensor parallelism runs the same passes at T = 1.
  TensorComm() = default;

  int size() const { return size_; }
  int rank() const { return rank_; }
  bool sequence_parallel() const { return sp_; }
  comm::ProcessGroup& group();

  // Rows of an N-row region this rank holds, and the first of them.
  int64_t local_rows(int64_t N) const { return sp_ ? N / size_ : N; }
  int64_t row_offset(int64_t N) const { return sp_ ? N / size_ * rank_ : 0; }

  // local (local_rows(N), C) -> (N, C): SP all-gathers into `full` and returns it; without
  // SP returns `local` itself.
  const float* gather_rows(const float* local, float* full, int64_t N, int64_t C);
  // partial (N, C), a different partial sum on each rank -> local (local_rows(N), C): the
  // sum over ranks of this rank's rows (SP reduce-scatter; without SP all-reduce).
  void reduce_rows(const float* partial, float* local, int64_t N, int64_t C);
  void all_reduce_sum(float* x, int64_t n);
  void all_reduce_max(float* x, int64_t n);
  // Replicated key/value heads: x (n floats) summed over the tp ranks that share this rank's
  // head (each holds the part its own query heads contributed). A no-op at kv_share 1.
  int kv_share() const { return kv_share_; }
  void sum_shared_kv(float* x, int64_t n);

  int64_t bytes() const { return bytes_; }

 private:
  void count(int64_t elems);
  comm::ProcessGroup* group_ = nullptr;
  std::shared_ptr<comm::ProcessGroup> kv_group_;  // the ranks sharing a key/value head
  int size_ = 1, rank_ = 0, kv_share_ = 1;
  bool sp_ = false;
  int64_t bytes_ = 0;
};

}  // namespace strata::model
