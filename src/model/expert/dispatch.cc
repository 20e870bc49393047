#include "model/expert/dispatch.h"

#include <cstring>

#include "comm/bootstrap.h"
#include "core/error.h"
#include "core/trace.h"
#include "model/parallel_rules.h"

namespace strata::model::expert {

ExpertGroup::ExpertGroup(comm::ProcessGroup* group, int experts) {
  if (group && group->size() > 1) {
    group_ = group;
    P_ = group->size();
    rank_ = group->rank();
  }
  STRATA_CHECK_SETTING(ep_splits_experts(experts, P_), setting("experts"), " ", experts,
                       " is not divisible by ", setting("ep"), " ", P_);
  El_ = experts / P_;
}

void ExpertGroup::count(const std::vector<size_t>& n, DType dt) {
  if (off_host_.empty()) {  // the ranks' hosts: each host's first rank, from every peer
    const comm::RankEnv env = comm::detect_rank_env();
    const int64_t mine = env.rank - env.local_rank;
    std::vector<int64_t> hosts(static_cast<size_t>(P_));
    group_->all_gather(&mine, hosts.data(), 1, DType::i64);
    off_host_.resize(size_t(P_));
    for (int q = 0; q < P_; ++q) off_host_[size_t(q)] = hosts[size_t(q)] != mine;
  }
  for (int q = 0; q < P_; ++q) {
    const int64_t b = int64_t(n[size_t(q)] * dtype_size(dt));
    bytes_ += b;
    if (off_host_[size_t(q)]) off_host_bytes_ += b;
  }
}

std::vector<int64_t> ExpertGroup::exchange_counts(const std::vector<int64_t>& sent) {
  STRATA_CHECK(int64_t(sent.size()) == int64_t(P_) * El_, "expert counts: ", sent.size(),
               " entries for ", P_ * El_, " experts");
  if (!group_) return sent;
  std::vector<int64_t> recv(sent.size());
  group_->all_to_all(sent.data(), recv.data(), size_t(El_), DType::i64);
  count(std::vector<size_t>(size_t(P_), size_t(El_)), DType::i64);
  return recv;
}

std::vector<int64_t> ExpertGroup::exchange_peer_counts(const std::vector<int64_t>& sent) {
  STRATA_CHECK(int64_t(sent.size()) == P_, "peer counts: ", sent.size(), " entries for ", P_, " ranks");
  if (!group_) return sent;
  std::vector<int64_t> recv(sent.size());
  group_->all_to_all(sent.data(), recv.data(), 1, DType::i64);
  count(std::vector<size_t>(size_t(P_), 1), DType::i64);
  return recv;
}

void ExpertGroup::to_peers(const void* send, const std::vector<int64_t>& send_rows, void* recv,
                           const std::vector<int64_t>& recv_rows, int64_t W, DType dt) {
  std::vector<size_t> out(static_cast<size_t>(P_)), in(static_cast<size_t>(P_));
  for (int q = 0; q < P_; ++q) {
    out[size_t(q)] = size_t(send_rows[size_t(q)] * W);
    in[size_t(q)] = size_t(recv_rows[size_t(q)] * W);
  }
  if (!group_) {
    if (out[0] > 0) std::memcpy(recv, send, out[0] * dtype_size(dt));
    return;
  }
  count(out, dt);
  group_->all_to_all_v(send, out, recv, in, dt);
}

OwnerLayout::OwnerLayout(const std::vector<int64_t>& recv, int P, int El) {
  src.assign(size_t(P * El + 1), 0);
  exp.assign(size_t(P * El + 1), 0);
  for (int i = 0; i < P * El; ++i) src[size_t(i + 1)] = src[size_t(i)] + recv[size_t(i)];
  int i = 0;
  for (int e = 0; e < El; ++e)
    for (int s = 0; s < P; ++s, ++i) exp[size_t(i + 1)] = exp[size_t(i)] + recv[size_t(s * El + e)];
  rows = src.back();
}

}  // namespace strata::model::expert
