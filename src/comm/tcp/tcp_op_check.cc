// The tcp backend's optional descriptor check (STRATA_TCP_CHECK_OPS=1): before each
// collective every rank sends its op's descriptor to every peer and compares what it gets,
// so ranks that call different collectives (or counts) at one sequence number fail at once
// with both named, as under shm, instead of timing out or exchanging misaligned data. It
// costs one more round trip per collective, which is why it is off by default.
#include <cstring>

#include "comm/tcp/tcp_transport.h"
#include "core/env.h"
#include "core/error.h"

namespace strata::comm::tcp {

using detail::OpDesc;

static const EnvVar kCheckOps("STRATA_TCP_CHECK_OPS", "0",
                              "tcp backend: 1 compares every collective's descriptor (op, sequence number, "
                              "dtype, reduce op, root, counts) across ranks first, naming mismatched ranks "
                              "(one more round trip per collective)");

bool tcp_check_ops_enabled() { return kCheckOps.get_bool(); }

namespace {
struct OpHeader {
  uint8_t op, dtype, redop, pad = 0;
  int32_t root;
  uint64_t seq, count, counts_hash;
};

OpHeader header_of(const OpDesc& op) {
  OpHeader h{};
  h.op = uint8_t(op.op);
  h.dtype = uint8_t(op.dtype);
  h.redop = uint8_t(op.redop);
  h.root = op.root;
  h.seq = op.seq;
  // Uneven all-to-all counts differ between ranks by design; the others must agree.
  bool per_rank = op.op == OpType::alltoallv || op.op == OpType::allgatherv ||
                  op.op == OpType::reduce_scatter || op.op == OpType::allgather;
  h.count = per_rank ? 0 : op.count;
  uint64_t x = 1469598103934665603ull;  // FNV-1a over the counts
  if (op.op != OpType::alltoallv)
    for (size_t c : op.counts) x = (x ^ c) * 1099511628211ull;
  h.counts_hash = x;
  return h;
}

std::string describe(int rank, const OpHeader& h) {
  std::string s = cat("rank ", rank, ": ", op_name(OpType(h.op)), " #", h.seq, " ", dtype_name(DType(h.dtype)));
  if (OpType(h.op) == OpType::allreduce || OpType(h.op) == OpType::reduce_scatter || OpType(h.op) == OpType::reduce)
    s += cat(" ", reduce_op_name(ReduceOp(h.redop)));
  if (h.count) s += cat(" count ", h.count);
  if (h.root >= 0) s += cat(" root ", h.root);
  return s;
}
}  // namespace

void TcpTransport::check_op(const OpDesc& op) {
  OpHeader mine = header_of(op);
  std::vector<OpHeader> theirs(static_cast<size_t>(size_));
  std::vector<Xfer> xs;
  for (int q = 0; q < size_; ++q) {
    if (q == rank_) continue;
    Xfer x;
    x.peer = q;
    x.sbuf = reinterpret_cast<const char*>(&mine);
    x.slen = sizeof mine;
    x.rbuf = reinterpret_cast<char*>(&theirs[size_t(q)]);
    x.rlen = sizeof mine;
    xs.push_back(x);
  }
  exchange(xs, op);
  for (int q = 0; q < size_; ++q) {
    if (q == rank_ || std::memcmp(&theirs[size_t(q)], &mine, sizeof mine) == 0) continue;
    fail(op_label(op), ": mismatched collectives (", describe(rank_, mine), "; ", describe(q, theirs[size_t(q)]),
         OpType(mine.op) == OpType(theirs[size_t(q)].op) && mine.count == theirs[size_t(q)].count
             ? "; their counts differ"
             : "",
         ")");
  }
}

}  // namespace strata::comm::tcp
