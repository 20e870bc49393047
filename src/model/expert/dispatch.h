// Moving token rows between the ranks of an expert-parallel group (GShard's dispatch and
// combine), and the owner's row layout.
//
// Terms. P ranks in the ep group; rank q owns experts [q·El, (q+1)·El), El = E / P. The MoE
// block (moe.cc MoE::dispatch) sends one row per (token, owner rank) with its assignments'
// (expert, slot) and gates; the owner places each row at its slots in the expert-major batch
// ([e][s][rows]) and sends one combined row back.
// Every exchange is fixed-size all_to_alls of counts (El assignments and one row count per
// peer) followed by all_to_all_v of the rows, so every rank of the group issues the same
// collectives in the same order whatever the routing, including experts and whole ranks that
// receive no token and ranks with no tokens at all. Without a group (P = 1) rows stay where
// they are. Bytes per MoE block and micro-batch: cost/comm.h ep_group_bytes.
#pragma once
#include <cstdint>
#include <vector>

#include "comm/process_group.h"

namespace strata::model::expert {

class ExpertGroup {
 public:
  ExpertGroup(comm::ProcessGroup* group, int experts);  // group null or size 1: one rank
  int size() const { return P_; }
  int rank() const { return rank_; }
  int local_experts() const { return El_; }
  int first_expert() const { return rank_ * El_; }
  comm::ProcessGroup* group() const { return group_; }
  // Payload bytes of this rank's sends so far (counts and rows), for the planner check, and
  // the part of them that went to ranks on other hosts (the hosts as the launcher placed the
  // ranks: STRATA_LOCAL_RANK / LOCAL_WORLD_SIZE and their equivalents, comm/bootstrap.h).
  int64_t bytes_sent() const { return bytes_; }
  int64_t bytes_sent_off_host() const { return off_host_bytes_; }
  // Token rows this rank dispatched so far (one per token and owner rank; each travels 4
  // times: cost/comm.h ep_group_bytes), counted by the MoE block that sends them.
  int64_t rows_sent() const { return rows_; }
  void add_rows(int64_t n) { rows_ += n; }

  // The routing of one exchange: sent[e] rows for each expert e (E); returns recv (P, El):
  // rows from source s for local expert e. One all_to_all.
  std::vector<int64_t> exchange_counts(const std::vector<int64_t>& sent);

  // One count per peer (P): returns each peer's count for this rank. One all_to_all.
  std::vector<int64_t> exchange_peer_counts(const std::vector<int64_t>& sent);
  // Rows of W elements of `dt` to each peer: send_rows[q] rows for peer q, peer-major, ->
  // recv_rows[q] rows from each, peer-major. One all_to_all_v (a copy when P = 1).
  void to_peers(const void* send, const std::vector<int64_t>& send_rows, void* recv,
                const std::vector<int64_t>& recv_rows, int64_t W, DType dt);

 private:
  comm::ProcessGroup* group_ = nullptr;
  int P_ = 1, rank_ = 0, El_ = 0;
  int64_t bytes_ = 0, off_host_bytes_ = 0, rows_ = 0;
  std::vector<char> off_host_;  // (P) peer q on another host; learnt at the first exchange
  // Counts `n` elements of `dt` to each peer in the byte totals (each peer's host learnt first).
  void count(const std::vector<size_t>& n, DType dt);
};

// Offsets of the owner's two layouts for recv (P, El): source-major src[s·El + e] and
// expert-major exp[e·P + s] (each with one extra entry: the total).
struct OwnerLayout {
  std::vector<int64_t> src, exp;
  int64_t rows = 0;
  OwnerLayout(const std::vector<int64_t>& recv, int P, int El);
};

}  // namespace strata::model::expert
