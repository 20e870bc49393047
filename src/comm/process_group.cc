// ProcessGroup: argument checks and the OpDesc for each call; the runtime does the rest.
#include "comm/process_group.h"

#include <cstdint>

#include "comm/runtime.h"
#include "core/error.h"

namespace strata::comm {

using detail::OpDesc;

ProcessGroup::ProcessGroup(std::unique_ptr<detail::GroupRuntime> runtime) : rt_(std::move(runtime)) {}
ProcessGroup::~ProcessGroup() = default;

int ProcessGroup::rank() const { return rt_->rank(); }
int ProcessGroup::size() const { return rt_->size(); }
const std::string& ProcessGroup::name() const { return rt_->name(); }
const std::vector<int>& ProcessGroup::world_ranks() const { return rt_->world_ranks(); }
Backend ProcessGroup::backend() const { return rt_->backend(); }
double ProcessGroup::timeout_s() const { return rt_->timeout_s(); }
uint64_t ProcessGroup::next_seq() const { return rt_->next_seq(); }
const Options& ProcessGroup::options() const { return rt_->options(); }
void ProcessGroup::set_background() { rt_->set_background(); }

std::shared_ptr<ProcessGroup> ProcessGroup::split(int color, int key, std::string name) {
  return rt_->split(color, key, std::move(name));
}

namespace {

bool overlaps(const void* a, size_t abytes, const void* b, size_t bbytes) {
  if (!a || !b || !abytes || !bbytes) return false;
  auto x = reinterpret_cast<uintptr_t>(a), y = reinterpret_cast<uintptr_t>(b);
  return x < y + bbytes && y < x + abytes;
}

struct Checker {
  const ProcessGroup& g;
  const char* what;
  template <typename... A>
  void check(bool ok, A&&... parts) const {
    if (!ok) fail("group ", g.name(), " rank ", g.rank(), " ", what, ": ", std::forward<A>(parts)...);
  }
  void buffer(const void* p, size_t count, const char* name) const {
    check(p || count == 0, name, " is null but count is ", count);
  }
  void rank_arg(int r, const char* name) const {
    check(r >= 0 && r < g.size(), name, " ", r, " is not a rank of a group of ", g.size());
  }
  void counts(const std::vector<size_t>& c, const char* name) const {
    check(int(c.size()) == g.size(), name, " has ", c.size(), " entries for a group of ", g.size());
  }
};

size_t total(const std::vector<size_t>& v) {
  size_t s = 0;
  for (size_t x : v) s += x;
  return s;
}

OpDesc make(OpType type, DType dtype, const void* send, void* recv, size_t count) {
  OpDesc op;
  op.op = type;
  op.dtype = dtype;
  op.send = send;
  op.recv = recv;
  op.count = count;
  return op;
}

}  // namespace

static OpDesc build_all_reduce(const ProcessGroup& g, const void* send, void* recv, size_t count, DType dtype,
                                       ReduceOp op) {
  Checker c{g, "all_reduce"};
  c.buffer(send, count, "send");
  c.buffer(recv, count, "recv");
  size_t b = count * dtype_size(dtype);
  c.check(send == recv || !overlaps(send, b, recv, b), "send and recv overlap without being equal");
  OpDesc d = make(OpType::allreduce, dtype, send, recv, count);
  d.redop = op;
  return d;
}

static OpDesc build_reduce_scatter_v(const ProcessGroup& g, const void* send, void* recv,
                                             const std::vector<size_t>& recv_counts, DType dtype,
                                             ReduceOp op) {
  Checker c{g, "reduce_scatter"};
  c.counts(recv_counts, "recv_counts");
  size_t es = dtype_size(dtype), n = total(recv_counts);
  size_t own = recv_counts[size_t(g.rank())], off = 0;
  for (int r = 0; r < g.rank(); ++r) off += recv_counts[size_t(r)];
  c.buffer(send, n, "send");
  c.buffer(recv, own, "recv");
  const char* slot = static_cast<const char*>(send) + off * es;
  c.check(recv == slot || !overlaps(send, n * es, recv, own * es),
          "recv overlaps send (in place means recv == send + this rank's block offset)");
  OpDesc d = make(OpType::reduce_scatter, dtype, send, recv, own);
  d.redop = op;
  d.counts = recv_counts;
  return d;
}

static OpDesc build_all_gather_v(const ProcessGroup& g, const void* send, void* recv,
                                         const std::vector<size_t>& counts, DType dtype) {
  Checker c{g, "all_gather"};
  c.counts(counts, "counts");
  size_t es = dtype_size(dtype), n = total(counts);
  size_t own = counts[size_t(g.rank())], off = 0;
  for (int r = 0; r < g.rank(); ++r) off += counts[size_t(r)];
  c.buffer(send, own, "send");
  c.buffer(recv, n, "recv");
  const char* slot = static_cast<const char*>(recv) + off * es;
  c.check(send == slot || !overlaps(send, own * es, recv, n * es),
          "send overlaps recv (in place means send == recv + this rank's block offset)");
  OpDesc d = make(counts == std::vector<size_t>(counts.size(), counts[0]) ? OpType::allgather
                                                                           : OpType::allgatherv,
                  dtype, send, recv, own);
  d.counts = counts;
  return d;
}

static OpDesc build_broadcast(const ProcessGroup& g, void* data, size_t count, DType dtype, int root) {
  Checker c{g, "broadcast"};
  c.rank_arg(root, "root");
  c.buffer(data, count, "data");
  OpDesc d = make(OpType::broadcast, dtype, data, data, count);
  d.root = root;
  return d;
}

static OpDesc build_reduce(const ProcessGroup& g, const void* send, void* recv, size_t count, DType dtype,
                                   ReduceOp op, int root) {
  Checker c{g, "reduce"};
  c.rank_arg(root, "root");
  c.buffer(send, count, "send");
  if (g.rank() == root) c.buffer(recv, count, "recv at the root");
  size_t b = count * dtype_size(dtype);
  if (g.rank() != root) recv = nullptr;
  c.check(send == recv || !overlaps(send, b, recv, b), "send and recv overlap without being equal");
  OpDesc d = make(OpType::reduce, dtype, send, recv, count);
  d.redop = op;
  d.root = root;
  return d;
}

// `fixed`: called as all_to_all (the same count everywhere). An all_to_all_v out of place
// stays one even when this rank's counts happen to be equal: its peers' may not be (MoE
// dispatch), and every rank must describe the same collective.
static OpDesc build_all_to_all_v(const ProcessGroup& g, const void* send, const std::vector<size_t>& send_counts,
                                         void* recv, const std::vector<size_t>& recv_counts,
                                         DType dtype, bool fixed = false) {
  Checker c{g, "all_to_all"};
  c.counts(send_counts, "send_counts");
  c.counts(recv_counts, "recv_counts");
  size_t es = dtype_size(dtype), ns = total(send_counts), nr = total(recv_counts);
  c.buffer(send, ns, "send");
  c.buffer(recv, nr, "recv");
  c.check(send_counts[size_t(g.rank())] == recv_counts[size_t(g.rank())], "sends ",
          send_counts[size_t(g.rank())], " elements to itself but expects ",
          recv_counts[size_t(g.rank())]);
  bool equal = send_counts == std::vector<size_t>(send_counts.size(), send_counts[0]) &&
               recv_counts == send_counts;
  c.check((equal && send == recv) || !overlaps(send, ns * es, recv, nr * es),
          "send and recv overlap (in place needs equal counts and send == recv)");
  // In place needs equal counts on every rank, so it is an all_to_all too.
  const bool uniform = equal && (fixed || (send == recv && send != nullptr));
  OpDesc d = make(uniform ? OpType::alltoall : OpType::alltoallv, dtype, send, recv,
                  uniform ? send_counts[0] : 0);
  d.counts = send_counts;
  d.counts2 = recv_counts;
  return d;
}

static OpDesc build_send(const ProcessGroup& g, const void* data, size_t count, DType dtype, int peer, int tag) {
  Checker c{g, "send"};
  c.rank_arg(peer, "peer");
  c.buffer(data, count, "data");
  c.check(tag >= 0, "tag ", tag, " is negative");
  OpDesc d = make(OpType::send, dtype, data, nullptr, count);
  d.peer = peer;
  d.tag = tag;
  d.p2p = true;
  return d;
}

static OpDesc build_recv(const ProcessGroup& g, void* data, size_t count, DType dtype, int peer, int tag) {
  Checker c{g, "recv"};
  c.rank_arg(peer, "peer");
  c.buffer(data, count, "data");
  c.check(tag >= 0, "tag ", tag, " is negative");
  OpDesc d = make(OpType::recv, dtype, nullptr, data, count);
  d.peer = peer;
  d.tag = tag;
  d.p2p = true;
  return d;
}

WorkPtr ProcessGroup::all_reduce_async(const void* send, void* recv, size_t count, DType dtype,
                                       ReduceOp op) {
  return rt_->submit(build_all_reduce(*this, send, recv, count, dtype, op), false);
}

WorkPtr ProcessGroup::reduce_scatter_v_async(const void* send, void* recv,
                                             const std::vector<size_t>& recv_counts, DType dtype,
                                             ReduceOp op) {
  return rt_->submit(build_reduce_scatter_v(*this, send, recv, recv_counts, dtype, op), false);
}

WorkPtr ProcessGroup::reduce_scatter_async(const void* send, void* recv, size_t recv_count,
                                           DType dtype, ReduceOp op) {
  return reduce_scatter_v_async(send, recv, std::vector<size_t>(size_t(size()), recv_count), dtype, op);
}

WorkPtr ProcessGroup::all_gather_v_async(const void* send, void* recv,
                                         const std::vector<size_t>& counts, DType dtype) {
  return rt_->submit(build_all_gather_v(*this, send, recv, counts, dtype), false);
}

WorkPtr ProcessGroup::all_gather_async(const void* send, void* recv, size_t send_count, DType dtype) {
  return all_gather_v_async(send, recv, std::vector<size_t>(size_t(size()), send_count), dtype);
}

WorkPtr ProcessGroup::broadcast_async(void* data, size_t count, DType dtype, int root) {
  return rt_->submit(build_broadcast(*this, data, count, dtype, root), false);
}

WorkPtr ProcessGroup::reduce_async(const void* send, void* recv, size_t count, DType dtype,
                                   ReduceOp op, int root) {
  return rt_->submit(build_reduce(*this, send, recv, count, dtype, op, root), false);
}

WorkPtr ProcessGroup::all_to_all_v_async(const void* send, const std::vector<size_t>& send_counts,
                                         void* recv, const std::vector<size_t>& recv_counts,
                                         DType dtype) {
  return rt_->submit(build_all_to_all_v(*this, send, send_counts, recv, recv_counts, dtype), false);
}

WorkPtr ProcessGroup::all_to_all_async(const void* send, void* recv, size_t count, DType dtype) {
  std::vector<size_t> counts(size_t(size()), count);
  return rt_->submit(build_all_to_all_v(*this, send, counts, recv, counts, dtype, true), false);
}

WorkPtr ProcessGroup::barrier_async() {
  return rt_->submit(make(OpType::barrier, DType::u8, nullptr, nullptr, 0), false);
}

WorkPtr ProcessGroup::send_async(const void* data, size_t count, DType dtype, int peer, int tag) {
  return rt_->submit(build_send(*this, data, count, dtype, peer, tag), false);
}

WorkPtr ProcessGroup::recv_async(void* data, size_t count, DType dtype, int peer, int tag) {
  return rt_->submit(build_recv(*this, data, count, dtype, peer, tag), false);
}

// Sync forms: the same descriptors through the runtime's sync path, which runs a collective
// on the calling thread when the group is idle.
void ProcessGroup::all_reduce(const void* send, void* recv, size_t count, DType dtype, ReduceOp op) {
  rt_->submit(build_all_reduce(*this, send, recv, count, dtype, op), true);
}
void ProcessGroup::reduce_scatter(const void* send, void* recv, size_t recv_count, DType dtype,
                                  ReduceOp op) {
  reduce_scatter_v(send, recv, std::vector<size_t>(size_t(size()), recv_count), dtype, op);
}
void ProcessGroup::reduce_scatter_v(const void* send, void* recv,
                                    const std::vector<size_t>& recv_counts, DType dtype,
                                    ReduceOp op) {
  rt_->submit(build_reduce_scatter_v(*this, send, recv, recv_counts, dtype, op), true);
}
void ProcessGroup::all_gather(const void* send, void* recv, size_t send_count, DType dtype) {
  all_gather_v(send, recv, std::vector<size_t>(size_t(size()), send_count), dtype);
}
void ProcessGroup::all_gather_v(const void* send, void* recv, const std::vector<size_t>& counts,
                                DType dtype) {
  rt_->submit(build_all_gather_v(*this, send, recv, counts, dtype), true);
}
void ProcessGroup::broadcast(void* data, size_t count, DType dtype, int root) {
  rt_->submit(build_broadcast(*this, data, count, dtype, root), true);
}
void ProcessGroup::reduce(const void* send, void* recv, size_t count, DType dtype, ReduceOp op,
                          int root) {
  rt_->submit(build_reduce(*this, send, recv, count, dtype, op, root), true);
}
void ProcessGroup::all_to_all(const void* send, void* recv, size_t count, DType dtype) {
  std::vector<size_t> counts(size_t(size()), count);
  rt_->submit(build_all_to_all_v(*this, send, counts, recv, counts, dtype, true), true);
}
void ProcessGroup::all_to_all_v(const void* send, const std::vector<size_t>& send_counts, void* recv,
                                const std::vector<size_t>& recv_counts, DType dtype) {
  rt_->submit(build_all_to_all_v(*this, send, send_counts, recv, recv_counts, dtype), true);
}
void ProcessGroup::barrier() {
  rt_->submit(make(OpType::barrier, DType::u8, nullptr, nullptr, 0), true);
}
void ProcessGroup::send(const void* data, size_t count, DType dtype, int peer, int tag) {
  rt_->submit(build_send(*this, data, count, dtype, peer, tag), true);
}
void ProcessGroup::recv(void* data, size_t count, DType dtype, int peer, int tag) {
  rt_->submit(build_recv(*this, data, count, dtype, peer, tag), true);
}

}  // namespace strata::comm
