#include "model/tensor/collectives.h"

#include <cstring>
#include <string>

#include "core/error.h"

namespace strata::model {

TensorComm::TensorComm(comm::ProcessGroup& group, bool sequence_parallel, int kv_share)
    : group_(&group), size_(group.size()), rank_(group.rank()), kv_share_(kv_share),
      sp_(sequence_parallel) {
  STRATA_CHECK(kv_share >= 1 && size_ % kv_share == 0, "internal: ", kv_share,
               " tp ranks sharing a key/value head do not divide the tp group of ", size_);
  if (kv_share_ > 1)
    kv_group_ = group.split(rank_ / kv_share_, rank_,
                            group.name() + ".kv" + std::to_string(rank_ / kv_share_));
}

comm::ProcessGroup& TensorComm::group() {
  STRATA_CHECK(group_, "internal: the one-rank tensor communicator has no group");
  return *group_;
}

void TensorComm::count(int64_t elems) { bytes_ += elems * int64_t(sizeof(float)); }

const float* TensorComm::gather_rows(const float* local, float* full, int64_t N, int64_t C) {
  if (!sp_ || size_ == 1) return local;
  count(N * C);
  group_->all_gather_async(local, full, size_t(N / size_ * C), DType::f32)->wait();
  return full;
}

void TensorComm::reduce_rows(const float* partial, float* local, int64_t N, int64_t C) {
  if (!group_ || size_ == 1) {
    if (partial != local) std::memcpy(local, partial, sizeof(float) * size_t(N * C));
    return;
  }
  count(N * C);
  if (sp_)
    group_->reduce_scatter_async(partial, local, size_t(N / size_ * C), DType::f32,
                                comm::ReduceOp::sum)
        ->wait();
  else
    group_->all_reduce_async(partial, local, size_t(N * C), DType::f32, comm::ReduceOp::sum)->wait();
}

void TensorComm::all_reduce_sum(float* x, int64_t n) {
  if (!group_ || size_ == 1) return;
  count(n);
  group_->all_reduce_async(x, x, size_t(n), DType::f32, comm::ReduceOp::sum)->wait();
}

void TensorComm::sum_shared_kv(float* x, int64_t n) {
  if (!kv_group_) return;
  count(n);
  kv_group_->all_reduce_async(x, x, size_t(n), DType::f32, comm::ReduceOp::sum)->wait();
}

void TensorComm::all_reduce_max(float* x, int64_t n) {
  if (!group_ || size_ == 1) return;
  count(n);
  group_->all_reduce_async(x, x, size_t(n), DType::f32, comm::ReduceOp::max)->wait();
}

}  // namespace strata::model
